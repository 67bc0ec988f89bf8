/*
 * draft-train - trains an EAGLE-1 or EAGLE-3 draft head for a base GGUF model on CPU:
 * features from the model's forward pass, the head's forward and backward
 * over the trainer's kernels, AdamW.  The work is run_draft_train()
 * (common/train/draft_train.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compute.h"
#include "draft_train.h"
#include "escape.h"
#include "tool.h"
#include "tool_cb.h"

static const char usage_line[] =
    "usage: draft-train [-fhqVv] -m model --data file -o head [--arch eagle1|eagle3]\n"
    "                   [--ttt-steps n] [--epochs n] [--max-time seconds] [--lr x] [--batch n]\n"
    "                   [--seq-len n] [--seed n] [--cache dir] [--checkpoint-every n] [--resume]\n"
    "                   [--draft-vocab n] [--noise x] [--clip x] [--weight-decay x] [--no-fc-bias]\n"
    "                   [--gen-tokens n] [--gen-temp t] [--gen-share x] [--train-on-prompts]\n"
    "                   [--eval file] [--init random|target] [-t n] [--oversubscribe]\n"
    "                   [--kernel name] [--json] [--[no-]progress]";

static const char help_text[] =
    "draft-train - train an EAGLE-1 or EAGLE-3 draft head for speculative decoding\n"
    "\n"
    "  -m, --model FILE        the base model (GGUF, llama or gemma3)\n"
    "      --data FILE         training text, or JSON Lines with a \"text\" member (- = stdin);\n"
    "                          never the text you evaluate on; lines with a \"prompt\" or\n"
    "                          chat \"messages\" get the base model's own responses\n"
    "                          (self-distillation), and the loss counts those only\n"
    "      --train-on-prompts  the loss counts the prompts' positions too (the held-out\n"
    "                          figures still the responses')\n"
    "  -o, --output FILE       the head (GGUF, architecture eagle or eagle3), written atomically\n"
    "      --arch NAME         eagle1 (default) or eagle3 (features of three layers, own LM head\n"
    "                          over the --draft-vocab tokens, training-time test)\n"
    "      --ttt-steps N       eagle3: steps of the training-time test unrolled (default 7)\n"
    "      --init NAME         the head's start: random, or target (eagle3 on a llama model:\n"
    "                          the model's last layer, final norm and LM head rows, the FC\n"
    "                          passing the deepest feature; the default there)\n"
    "\n"
    "Training:\n"
    "      --epochs N          passes over the training sequences\n"
    "      --max-time SECONDS  wall-clock budget of the whole run: responses start until 1/4\n"
    "                          of it (--gen-share), features until 1/4 more, training (its\n"
    "                          learning rate schedule following the time) until the end,\n"
    "                          then save; with --epochs, whichever ends first\n"
    "      --lr X              peak learning rate (default 1e-3; 5% warmup, linear decay to 10%)\n"
    "      --batch N           sequences per optimizer step (default 4)\n"
    "      --seq-len N         positions per sequence (default 256)\n"
    "      --seed N            initialisation, order and noise (default 1)\n"
    "      --draft-vocab N     the cross-entropy over the N most frequent tokens of the\n"
    "                          positions trained (the responses', with prompts)\n"
    "                          (default 8192; 0 = the whole vocabulary)\n"
    "      --noise X           uniform noise U(-X, X) on the input features (default 0.1)\n"
    "      --clip X            clip the gradient's norm to X (default 0.5)\n"
    "      --weight-decay X    AdamW's decoupled weight decay (default 0.01)\n"
    "      --no-fc-bias        eagle1: an FC layer without bias (held at zero; exported as\n"
    "                          \"bias\": false, the layout vLLM's EAGLE-1 model loads)\n"
    "      --cache DIR         keep the features in DIR (zstd), reused by runs on the same model,\n"
    "                          text and --seq-len\n"
    "      --checkpoint-every N  write OUTPUT.ckpt every N steps (also on SIGINT/TERM/HUP)\n"
    "      --resume            continue from OUTPUT.ckpt\n"
    "      --gen-tokens N      self-distillation: response tokens per prompt at most\n"
    "                          (default 256)\n"
    "      --gen-temp T        self-distillation: sampling temperature (default 0: greedy)\n"
    "      --gen-share X       self-distillation with --max-time: responses start until X\n"
    "                          of it, 0 < X <= 0.75 (default 0.25)\n"
    "      --eval FILE         held-out text, read as --data, never trained on: the held-out\n"
    "                          loss and agreement are measured on it and all the data trains\n"
    "                          (default: 1/20 of the data held out); its answers and features\n"
    "                          are outside --max-time\n"
    "\n"
    "Compute:\n"
    "  -t, --threads N         worker threads of the base model's forward pass\n"
    "      --oversubscribe     allow more threads than CPUs\n"
    "      --kernel NAME       auto, avx512, avx2, ref (ref: the scalar trainer kernels too)\n"
    "\n"
    "Output:\n"
    "  -f, --force             replace an existing output\n"
    "      --json              one JSON line per step and evaluation on stdout (draft-train/1)\n"
    "      --progress          progress bar even when stderr is not a terminal\n"
    "      --no-progress       never a progress bar\n"
    "  -q, --quiet             no summary or warnings\n"
    "  -v, --verbose           more messages\n"
    "  -h, --help              this help\n"
    "  -V, --version           print the version\n";

enum {
    OPT_ARCH = 256, OPT_BATCH, OPT_CACHE, OPT_CKPT, OPT_CLIP, OPT_DATA, OPT_DRAFT_VOCAB, OPT_EPOCHS,
    OPT_EVAL, OPT_GEN_SHARE, OPT_GEN_TEMP, OPT_GEN_TOKENS, OPT_JSON, OPT_KERNEL, OPT_LR, OPT_MAX_TIME, OPT_NO_PROGRESS,
    OPT_NO_FC_BIAS, OPT_NOISE, OPT_OVERSUB, OPT_PROGRESS, OPT_RESUME, OPT_SEED, OPT_SEQ_LEN, OPT_TTT,
    OPT_TRAIN_PROMPTS, OPT_INIT, OPT_WEIGHT_DECAY,
};

static const struct option longopts[] = {
    { "arch", required_argument, NULL, OPT_ARCH },
    { "init", required_argument, NULL, OPT_INIT },
    { "batch", required_argument, NULL, OPT_BATCH },
    { "cache", required_argument, NULL, OPT_CACHE },
    { "checkpoint-every", required_argument, NULL, OPT_CKPT },
    { "clip", required_argument, NULL, OPT_CLIP },
    { "weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY },
    { "data", required_argument, NULL, OPT_DATA },
    { "draft-vocab", required_argument, NULL, OPT_DRAFT_VOCAB },
    { "epochs", required_argument, NULL, OPT_EPOCHS },
    { "eval", required_argument, NULL, OPT_EVAL },
    { "gen-share", required_argument, NULL, OPT_GEN_SHARE },
    { "gen-temp", required_argument, NULL, OPT_GEN_TEMP },
    { "gen-tokens", required_argument, NULL, OPT_GEN_TOKENS },
    { "force", no_argument, NULL, 'f' },
    { "help", no_argument, NULL, 'h' },
    { "json", no_argument, NULL, OPT_JSON },
    { "kernel", required_argument, NULL, OPT_KERNEL },
    { "lr", required_argument, NULL, OPT_LR },
    { "max-time", required_argument, NULL, OPT_MAX_TIME },
    { "model", required_argument, NULL, 'm' },
    { "no-fc-bias", no_argument, NULL, OPT_NO_FC_BIAS },
    { "train-on-prompts", no_argument, NULL, OPT_TRAIN_PROMPTS },
    { "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
    { "noise", required_argument, NULL, OPT_NOISE },
    { "output", required_argument, NULL, 'o' },
    { "oversubscribe", no_argument, NULL, OPT_OVERSUB },
    { "progress", no_argument, NULL, OPT_PROGRESS },
    { "quiet", no_argument, NULL, 'q' },
    { "resume", no_argument, NULL, OPT_RESUME },
    { "seed", required_argument, NULL, OPT_SEED },
    { "seq-len", required_argument, NULL, OPT_SEQ_LEN },
    { "threads", required_argument, NULL, 't' },
    { "ttt-steps", required_argument, NULL, OPT_TTT },
    { "verbose", no_argument, NULL, 'v' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
};

int
main(int argc, char **argv)
{
    struct draft_train_opts o = DRAFT_TRAIN_OPTS_INIT;
    struct draft_train_report r;
    struct diag d = {{0}};
    bool json = false, oversubscribe = false, ttt = false;
    int c, rc;

    cli_init(argv[0]);
    while ((c = cli_getopt(argc, argv, "fhm:o:qt:Vv", longopts, usage_line)) != -1) {
        switch (c) {
        case OPT_ARCH:
            if (strcmp(optarg, "eagle1") != 0 && strcmp(optarg, "eagle3") != 0)
                usage_error(usage_line, "--arch: '%s' is not supported (eagle1, eagle3)",
                            ESC(optarg));
            o.arch = optarg[5] == '3' ? 3 : 1;
            break;
        case OPT_INIT:
            if (strcmp(optarg, "random") != 0 && strcmp(optarg, "target") != 0)
                usage_error(usage_line, "--init: '%s' is not one of random, target", ESC(optarg));
            o.init = optarg[0] == 'r' ? DRAFT_INIT_RANDOM : DRAFT_INIT_TARGET;
            break;
        case OPT_BATCH: o.batch = cli_parse_i64(optarg, 1, 4096, "--batch", false); break;
        case OPT_CACHE: o.cache_dir = cli_path(usage_line, "--cache", optarg); break;
        case OPT_CKPT: o.ckpt_every = cli_parse_i64(optarg, 1, INT32_MAX, "--checkpoint-every", false); break;
        case OPT_CLIP: o.clip = (float)cli_parse_double(optarg, 1e-6, 1e6, "--clip"); break;
        case OPT_WEIGHT_DECAY:
            /* + 0.0: "-0" is the run 0 is (the checkpoint's options) */
            o.weight_decay = cli_parse_double(optarg, 0, 10, "--weight-decay") + 0.0;
            break;
        case OPT_DATA: o.data = cli_path(usage_line, "--data", optarg); break;
        case OPT_DRAFT_VOCAB:
            o.draft_vocab = cli_parse_i64(optarg, 0, INT32_MAX, "--draft-vocab", false);
            break;
        case OPT_EVAL: o.eval = cli_path(usage_line, "--eval", optarg); break;
        case OPT_EPOCHS: o.epochs = cli_parse_i64(optarg, 1, 1000000, "--epochs", false); break;
        case OPT_GEN_SHARE:
            o.gen_share = cli_parse_double(optarg, 1e-6, 0.75, "--gen-share");
            o.gen_share_set = true;
            break;
        case OPT_GEN_TEMP:
            o.gen_temp = (float)cli_parse_double(optarg, 0, 10, "--gen-temp");
            o.gen_set = true;
            break;
        case OPT_GEN_TOKENS:
            o.gen_tokens = cli_parse_i64(optarg, 1, 1 << 20, "--gen-tokens", false);
            o.gen_set = true;
            break;
        case 'f': o.force = true; break;
        case 'h': cli_exit_help(help_text, usage_line);
        case OPT_JSON: json = true; break;
        case OPT_KERNEL:
            if (!compute_kernel_available(optarg))
                usage_error(usage_line, "--kernel: unknown or unavailable kernel '%s'", ESC(optarg));
            o.kernel = optarg;
            break;
        case OPT_LR: o.lr = cli_parse_double(optarg, 1e-9, 1, "--lr"); break;
        case 'm': o.model = cli_path(usage_line, "-m", optarg); break;
        case OPT_MAX_TIME: o.max_time = cli_parse_double(optarg, 0.001, 1e9, "--max-time"); break;
        case OPT_NO_FC_BIAS: o.no_fc_bias = true; break;
        case OPT_TRAIN_PROMPTS: o.train_prompts = true; break;
        case OPT_NO_PROGRESS: tool_progress_mode = 0; break;
        case OPT_NOISE: o.noise = (float)cli_parse_double(optarg, 0, 100, "--noise"); break;
        case 'o': o.output = cli_path(usage_line, "-o", optarg); break;
        case OPT_OVERSUB: oversubscribe = true; break;
        case OPT_PROGRESS: tool_progress_mode = 1; break;
        case 'q': cli_verbosity = 0; break;
        case OPT_RESUME: o.resume = true; break;
        case OPT_SEED: o.seed = (uint64_t)cli_parse_i64(optarg, 0, INT64_MAX, "--seed", false); break;
        case OPT_SEQ_LEN: o.seq_len = cli_parse_i64(optarg, 2, 8192, "--seq-len", false); break;
        case OPT_TTT:
            o.ttt_steps = (int)cli_parse_i64(optarg, 1, 16, "--ttt-steps", false);
            ttt = true;
            break;
        case 't': o.n_threads = (int)cli_parse_i64(optarg, 1, 1024, "--threads", false); break;
        case 'v': cli_verbosity = 2; break;
        case 'V': cli_exit_version("draft-train");
        default: cli_exit_usage(usage_line);
        }
    }
    const struct usage_rule rules[] = {
        { optind < argc, "unexpected operand" },
        { !o.model, "no model (-m)" },
        { !o.data, "no training data (--data)" },
        { !o.output, "no output (-o)" },
        { o.output && !strcmp(o.output, "-"), "-o: the head is written to a file, not stdout" },
        { o.epochs == 0 && o.max_time == 0, "give --epochs or --max-time" },
        { o.gen_share_set && o.max_time == 0, "--gen-share: only with --max-time" },
        { ttt && o.arch != 3, "--ttt-steps: only with --arch eagle3" },
        { o.init == DRAFT_INIT_TARGET && o.arch != 3,
          "--init target: only with --arch eagle3 (an EAGLE-1 head regresses the features)" },
        { o.no_fc_bias && o.arch == 3, "--no-fc-bias: an EAGLE-3 head's FC has no bias anyway" },
        { o.model && o.data && !strcmp(o.model, "-") , "-m: the model must be a file" },
    };
    cli_check_usage(usage_line, rules, sizeof(rules) / sizeof(rules[0]));
    const struct stdin_use in[] = { { "--data", o.data }, { "--eval", o.eval } };
    cli_check_stdin(usage_line, in, sizeof(in) / sizeof(in[0]));
    o.n_threads = cli_cap_threads(o.n_threads, oversubscribe);
    if (json) {
        o.json = stdout;
        if (tool_progress_mode < 0)
            tool_progress_mode = 0;     /* --json: bars only when asked for */
    }
    o.cb = tool_callbacks(true);
    tool_catch_stop();
    o.stop = &tool_stop_count;
    rc = run_draft_train(&o, &r, &d);
    /* interrupted: whatever failed after a stop signal (a blocking open or
     * read cut short by it too) is the signal's doing */
    if (rc && tool_stop_count) {
        notemsg("%s", ESC(d.msg));
        return 128 + tool_stop_sig;
    }
    if (rc)
        die(rc_from_st(rc), "%s", ESC(d.msg));
    char held[96] = "held-out: no response position";
    if (r.hold_n > 0)
        snprintf(held, sizeof held, "held-out loss %.4f, top-1 agreement %.3f", r.hold_loss,
                 r.hold_acc);
    notemsg("wrote '%s': %lld steps, %lld positions in %.1f s (features %s); %s; peak memory "
            "%.1f MiB", ESC(o.output), (long long)r.steps, (long long)r.tokens, r.seconds,
            r.cache_hit ? "from the cache" : "computed", held, (double)r.peak_rss / 1048576.0);
    cli_finish_stdout();
    return RC_OK;
}
