/*
 * generate - text generation with a GGUF model: one prompt streamed to
 * standard output, a batch of requests (JSONL in, JSONL out) through the
 * continuous-batching engine, or the perplexity of a text file.  The work is
 * run_generate() (common/model/generate.c) or run_generate_batch() (genbatch.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compute.h"
#include "genbatch.h"
#include "generate.h"
#include "scheduler.h"
#include "tool.h"
#include "tool_cb.h"

static const char usage_line[] =
    "usage: generate [-hqVv] -m model [-p text | -f file] [-n n] [-o file] [--force]\n"
    "                [--chat] [--system text] [--parse-special] [--temp t] [--top-k k]\n"
    "                [--top-p p] [--min-p p] [--repeat-penalty r] [--repeat-last-n n]\n"
    "                [--seed n] [-t n] [--oversubscribe] [--ctx n] [--kv-mem size]\n"
    "                [--kernel name] [--json]\n"
    "       generate [-hqVv] -m model --batch [file | -] [-o file] [--force] [-n n]\n"
    "                [--max-seqs n] [--max-batch-tokens n] [--kv-mem size] [--block-size n]\n"
    "                [--kv-type type] [--schedule policy] [--preempt mode] [--no-prefix-cache]\n"
    "                [--kv-trace file] [--drain-timeout seconds] [--chat] [--system text]\n"
    "                [--parse-special] [--ignore-eos] [sampling options] [-t n]\n"
    "                [--oversubscribe] [--ctx n] [--kernel name]\n"
    "       generate [-hqVv] -m model --perplexity file [--ctx n] [--chunks n] [-o file]\n"
    "                [--force] [-t n] [--oversubscribe] [--kv-mem size] [--kernel name] [--json]";

static const char help_text[] =
    "generate - text generation and perplexity with a GGUF model\n"
    "\n"
    "Input:\n"
    "  -m, --model FILE        GGUF model (llama architecture)\n"
    "  -p, --prompt TEXT       the prompt\n"
    "  -f, --file FILE         read the prompt from FILE (- = stdin; default: stdin)\n"
    "      --chat              wrap the prompt in the model's chat template\n"
    "      --system TEXT       system message for --chat\n"
    "      --parse-special     with --chat: control-token texts in the prompt and the\n"
    "                          system message (e.g. <|im_start|>) become control\n"
    "                          tokens; default: they stay plain text\n"
    "\n"
    "Generation:\n"
    "  -n, --n-predict N       tokens to generate (default -1: until end of text or --ctx)\n"
    "      --ignore-eos        do not stop at end-of-generation tokens (for benchmarks)\n"
    "      --temp T            temperature; 0 = greedy (default 0.8)\n"
    "      --top-k K           keep the K most likely tokens; 0 = off (default 40)\n"
    "      --top-p P           keep the smallest set with mass >= P; 1 = off (default 0.95)\n"
    "      --min-p P           keep tokens with p >= P * max p; 0 = off (default 0.05)\n"
    "      --repeat-penalty R  penalise recently seen tokens; 1 = off (default 1)\n"
    "      --repeat-last-n N   tokens the penalty looks back; -1 = --ctx (default 64)\n"
    "      --seed N            random seed (default: random, shown with --json and -v)\n"
    "      Order: penalty, top-k, top-p, min-p, temperature, draw (as llama.cpp)\n"
    "\n"
    "Batch (requests as JSON Lines or plain text lines; results as JSON Lines):\n"
    "      --batch [FILE|-]    run every request of FILE (default stdin) with continuous\n"
    "                          batching; one result line per request as it finishes\n"
    "      --max-seqs N        sequences decoded together at most (default 16)\n"
    "      --max-batch-tokens N  tokens per step: decodes plus prefill chunks (default 512)\n"
    "      --block-size N      KV tokens per block (default 16)\n"
    "      --kv-type TYPE      KV element type: f16, f32, q8_0 (default f16)\n"
    "      --schedule POLICY   continuous, or static batches (default continuous)\n"
    "      --preempt MODE      when blocks run out: recompute or swap (default recompute)\n"
    "      --no-prefix-cache   do not share KV blocks of common prompt prefixes\n"
    "      --kv-trace FILE     one kvtrace/1 JSON line per step (read by kvstat --trace)\n"
    "      --drain-timeout S   after SIGINT/SIGTERM, let the started requests run at\n"
    "                          most S seconds more, then end them as \"cancelled\"\n"
    "                          (default 30; 0 = at once)\n"
    "      Per request: id, prompt | tokens, max_tokens, temperature, top_p, top_k, min_p,\n"
    "      repeat_penalty, seed, stop (defaults: the options above and below)\n"
    "\n"
    "Perplexity:\n"
    "      --perplexity FILE   perplexity of FILE the way llama-perplexity computes it\n"
    "      --chunks N          evaluate at most N chunks of --ctx tokens (default all)\n"
    "\n"
    "Resources:\n"
    "  -t, --threads N         worker threads (default: the CPUs this process may use;\n"
    "                          more than those is capped to them, with a warning)\n"
    "      --oversubscribe     keep -t N even above the CPUs this process may use\n"
    "      --ctx N             context in tokens (default: the model's; 512 for --perplexity)\n"
    "      --kv-mem SIZE       KV-cache budget, e.g. 256MiB (default: enough for --ctx;\n"
    "                          --batch: for --max-seqs contexts, at most 1GiB)\n"
    "      --kernel NAME       kernel implementation: auto, avx512, avx2, ref (default\n"
    "                          $LLMKIT_KERNEL or auto)\n"
    "\n"
    "Output:\n"
    "  -o, --output FILE       write to FILE atomically (default stdout, streamed)\n"
    "      --force             replace an existing output FILE\n"
    "      --json              one JSON object, schema generate/1\n"
    "  -q, --quiet             no statistics, warnings or progress on stderr\n"
    "  -v, --verbose           more messages\n"
    "  -h, --help              this help\n"
    "  -V, --version           print the version\n";

enum {
    OPT_CHAT = 256, OPT_CHUNKS, OPT_CTX, OPT_FORCE, OPT_IGNORE_EOS, OPT_JSON, OPT_KERNEL, OPT_KV_MEM,
    OPT_MIN_P, OPT_PERPLEXITY, OPT_REPEAT_LAST_N, OPT_REPEAT_PENALTY, OPT_SEED, OPT_SYSTEM, OPT_TEMP,
    OPT_TOP_K, OPT_TOP_P, OPT_BATCH, OPT_OVERSUBSCRIBE, OPT_PARSE_SPECIAL,
    /* the options that need --batch, together */
    OPT_BLOCK_SIZE, OPT_DRAIN_TIMEOUT, OPT_KV_TRACE, OPT_KV_TYPE, OPT_MAX_BATCH_TOKENS,
    OPT_MAX_SEQS, OPT_NO_PREFIX_CACHE, OPT_PREEMPT, OPT_SCHEDULE,
};

static const struct option longopts[] = {
    { "batch", no_argument, NULL, OPT_BATCH },
    { "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
    { "chat", no_argument, NULL, OPT_CHAT },
    { "chunks", required_argument, NULL, OPT_CHUNKS },
    { "ctx", required_argument, NULL, OPT_CTX },
    { "drain-timeout", required_argument, NULL, OPT_DRAIN_TIMEOUT },
    { "file", required_argument, NULL, 'f' },
    { "force", no_argument, NULL, OPT_FORCE },
    { "help", no_argument, NULL, 'h' },
    { "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
    { "json", no_argument, NULL, OPT_JSON },
    { "kernel", required_argument, NULL, OPT_KERNEL },
    { "kv-mem", required_argument, NULL, OPT_KV_MEM },
    { "kv-trace", required_argument, NULL, OPT_KV_TRACE },
    { "kv-type", required_argument, NULL, OPT_KV_TYPE },
    { "max-batch-tokens", required_argument, NULL, OPT_MAX_BATCH_TOKENS },
    { "max-seqs", required_argument, NULL, OPT_MAX_SEQS },
    { "min-p", required_argument, NULL, OPT_MIN_P },
    { "model", required_argument, NULL, 'm' },
    { "n-predict", required_argument, NULL, 'n' },
    { "no-prefix-cache", no_argument, NULL, OPT_NO_PREFIX_CACHE },
    { "output", required_argument, NULL, 'o' },
    { "oversubscribe", no_argument, NULL, OPT_OVERSUBSCRIBE },
    { "parse-special", no_argument, NULL, OPT_PARSE_SPECIAL },
    { "perplexity", required_argument, NULL, OPT_PERPLEXITY },
    { "preempt", required_argument, NULL, OPT_PREEMPT },
    { "prompt", required_argument, NULL, 'p' },
    { "quiet", no_argument, NULL, 'q' },
    { "repeat-last-n", required_argument, NULL, OPT_REPEAT_LAST_N },
    { "repeat-penalty", required_argument, NULL, OPT_REPEAT_PENALTY },
    { "schedule", required_argument, NULL, OPT_SCHEDULE },
    { "seed", required_argument, NULL, OPT_SEED },
    { "system", required_argument, NULL, OPT_SYSTEM },
    { "temp", required_argument, NULL, OPT_TEMP },
    { "threads", required_argument, NULL, 't' },
    { "top-k", required_argument, NULL, OPT_TOP_K },
    { "top-p", required_argument, NULL, OPT_TOP_P },
    { "verbose", no_argument, NULL, 'v' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
};

/* --batch: SIGINT/SIGTERM drain the run (genbatch.h); then exit 128 + the signal. */
static int
run_batch(struct batch_opts *b)
{
    struct batch_report r;
    struct diag d = {{0}};
    int rc;

    tool_catch_stop();
    b->stop = &tool_stop_count;
    if ((rc = run_generate_batch(b, &r, &d)))
        die(rc_from_st(rc), "%s", d.msg);
    if (cli_verbosity >= 1)
        batch_report_print(&r, cli_progname, stderr);
    cli_finish_stdout();
    return tool_stop_count ? 128 + tool_stop_sig : r.errors ? RC_FAIL : RC_OK;
}

static int
run_one(const struct generate_opts *o)
{
    struct generate_report r;
    struct diag d = {{0}};
    int rc;

    if ((rc = run_generate(o, &r, &d)))
        die(rc_from_st(rc), "%s", d.msg);
    if (!r.perplexity && !r.ends_in_newline) {
        /* end the line on a terminal, so that the statistics or the shell
         * prompt do not follow the text on it; a pipe or a file gets
         * exactly the generated bytes */
        if (!o->json && (!o->output || !strcmp(o->output, "-")) && isatty(STDOUT_FILENO))
            putchar('\n');
        else if (cli_verbosity >= 1 && isatty(STDERR_FILENO))
            fputc('\n', stderr);   /* the text may be on this terminal, through a pipe */
    }
    if (cli_verbosity >= 1)
        generate_report_print(&r, cli_progname, stderr);
    cli_finish_stdout();
    return RC_OK;
}

int
main(int argc, char **argv)
{
    struct generate_opts o;
    struct batch_opts b;
    bool have_n = false, batch = false, batch_opt = false, oversubscribe = false;
    int c, v;

    cli_init(argv[0]);
    generate_opts_init(&o);
    batch_opts_init(&b, &o);
    o.sp.seed = sample_random_seed();     /* unless --seed */
    while ((c = getopt_long(argc, argv, "f:hm:n:o:p:qt:Vv", longopts, NULL)) != -1) {
        if (c >= OPT_BLOCK_SIZE && c <= OPT_SCHEDULE)
            batch_opt = true;
        switch (c) {
        case OPT_BATCH: batch = true; break;
        case OPT_BLOCK_SIZE: b.block_size = cli_parse_i64(optarg, 1, 4096, "--block-size", false); break;
        case OPT_KV_TRACE: b.trace = optarg; break;
        case OPT_KV_TYPE:
            if ((v = batch_kv_type_parse(optarg)) < 0)
                usage_error(usage_line, "--kv-type: '%s' is not f16, f32 or q8_0", optarg);
            b.kv_type = (uint32_t)v;
            break;
        case OPT_MAX_BATCH_TOKENS:
            b.max_batch_tokens = cli_parse_i64(optarg, 1, 1 << 24, "--max-batch-tokens", true);
            break;
        case OPT_MAX_SEQS: b.max_seqs = cli_parse_i64(optarg, 1, 1 << 16, "--max-seqs", false); break;
        case OPT_NO_PREFIX_CACHE: b.prefix_cache = false; break;
        case OPT_PREEMPT:
            if ((b.preempt = sched_preempt_parse(optarg)) < 0)
                usage_error(usage_line, "--preempt: '%s' is not recompute or swap", optarg);
            break;
        case OPT_SCHEDULE:
            if ((b.policy = sched_policy_parse(optarg)) < 0)
                usage_error(usage_line, "--schedule: '%s' is not continuous or static", optarg);
            break;
        case OPT_CHAT: o.chat = true; break;
        case OPT_CHUNKS: o.chunks = cli_parse_i64(optarg, 1, INT32_MAX, "--chunks", false); break;
        case OPT_CTX: o.ctx = cli_parse_i64(optarg, 1, (int64_t)1 << 24, "--ctx", true); break;
        case OPT_DRAIN_TIMEOUT: b.drain_timeout = cli_parse_double(optarg, 0, 1e9, "--drain-timeout"); break;
        case 'f': o.prompt_file = optarg; break;
        case OPT_FORCE: o.force = true; break;
        case OPT_IGNORE_EOS: o.ignore_eos = true; break;
        case 'h': cli_exit_help(help_text, usage_line);
        case OPT_JSON: o.json = true; break;
        case OPT_KERNEL:
            if (!compute_kernel_available(optarg))
                usage_error(usage_line, "--kernel: unknown or unavailable kernel '%s'", optarg);
            o.kernel = optarg;
            break;
        case OPT_KV_MEM: o.kv_mem = cli_parse_i64(optarg, 1, INT64_MAX, "--kv-mem", true); break;
        case OPT_MIN_P: o.sp.min_p = (float)cli_parse_double(optarg, 0, 1, "--min-p"); break;
        case 'm': o.model = optarg; break;
        case 'n':
            o.n_predict = cli_parse_i64(optarg, -1, (int64_t)1 << 30, "--n-predict", false);
            have_n = true;
            break;
        case 'o': o.output = optarg; break;
        case OPT_OVERSUBSCRIBE: oversubscribe = true; break;
        case OPT_PARSE_SPECIAL: o.parse_special = true; break;
        case OPT_PERPLEXITY: o.perplexity = optarg; break;
        case 'p': o.prompt = optarg; break;
        case 'q': cli_verbosity = 0; break;
        case OPT_REPEAT_LAST_N:
            o.repeat_last_n = (int32_t)cli_parse_i64(optarg, -1, 1 << 24, "--repeat-last-n", false);
            break;
        case OPT_REPEAT_PENALTY:
            o.sp.repeat_penalty = (float)cli_parse_double(optarg, 1e-3, 1e3, "--repeat-penalty");
            break;
        case OPT_SEED: o.sp.seed = (uint64_t)cli_parse_i64(optarg, 0, INT64_MAX, "--seed", false); break;
        case OPT_SYSTEM: o.system = optarg; break;
        case 't': o.threads = (int)cli_parse_i64(optarg, 1, 1024, "--threads", false); break;
        case OPT_TEMP: o.sp.temp = (float)cli_parse_double(optarg, 0, 1e6, "--temp"); break;
        case OPT_TOP_K: o.sp.top_k = (int32_t)cli_parse_i64(optarg, 0, INT32_MAX, "--top-k", false); break;
        case OPT_TOP_P: o.sp.top_p = (float)cli_parse_double(optarg, 0, 1, "--top-p"); break;
        case 'v': cli_verbosity = 2; break;
        case 'V': cli_exit_version("generate");
        default: cli_exit_usage(usage_line);
        }
    }
    if (batch && optind < argc)
        b.input = argv[optind++];
    if (optind < argc)
        usage_error(usage_line, "unexpected operand '%s' (the prompt goes after -p)", argv[optind]);
    const struct usage_rule rules[] = {
        { !o.model, "no model given (-m)" },
        { batch_opt && !batch, "--max-seqs, --max-batch-tokens, --block-size, --kv-type, --schedule, "
          "--preempt, --no-prefix-cache, --kv-trace and --drain-timeout need --batch" },
        { batch && (o.prompt || o.prompt_file || o.perplexity || o.json),
          "--batch takes no -p, -f, --perplexity or --json (the results are JSON Lines)" },
        { b.trace && !strcmp(b.trace, "-") && (!o.output || !strcmp(o.output, "-")),
          "--kv-trace - needs -o FILE for the results" },
        { o.prompt && o.prompt_file, "-p and -f are exclusive" },
        { o.system && !o.chat, "--system needs --chat" },
        { o.parse_special && !o.chat, "--parse-special needs --chat (the special-token texts of a "
          "plain prompt are always special)" },
        { o.perplexity && (o.prompt || o.prompt_file || o.chat || have_n),
          "--perplexity takes no prompt, --chat or -n" },
        { o.chunks > 0 && !o.perplexity, "--chunks needs --perplexity" },
    };
    cli_check_usage(usage_line, rules, sizeof(rules) / sizeof(rules[0]));
    o.threads = cli_cap_threads(o.threads, oversubscribe);
    o.cb = tool_callbacks(false);
    if (o.json)
        o.cb.progress = NULL;   /* no bar with --json (STYLE) */
    return batch ? run_batch(&b) : run_one(&o);
}
