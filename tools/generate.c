/*
 * generate - text generation with a GGUF model: one prompt streamed to
 * standard output, a batch of requests (JSONL in, JSONL out) through the
 * continuous-batching engine, or the perplexity of a text file.  Options
 * are parsed here; the work is run_generate() in common/model/generate.c and
 * run_generate_batch() in common/model/genbatch.c.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "compute.h"
#include "genbatch.h"
#include "generate.h"
#include "qtypes.h"
#include "scheduler.h"
#include "xio.h"

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
    OPT_CHAT = 256, OPT_CHUNKS, OPT_CTX, OPT_FORCE, OPT_IGNORE_EOS, OPT_JSON, OPT_KERNEL, OPT_KV_MEM, OPT_MIN_P,
    OPT_PERPLEXITY, OPT_REPEAT_LAST_N, OPT_REPEAT_PENALTY, OPT_SEED, OPT_SYSTEM, OPT_TEMP,
    OPT_TOP_K, OPT_TOP_P, OPT_BATCH, OPT_BLOCK_SIZE, OPT_KV_TRACE, OPT_KV_TYPE,
    OPT_MAX_BATCH_TOKENS, OPT_MAX_SEQS, OPT_NO_PREFIX_CACHE, OPT_PREEMPT, OPT_SCHEDULE,
    OPT_DRAIN_TIMEOUT, OPT_OVERSUBSCRIBE, OPT_PARSE_SPECIAL,
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

static struct progress bar;

static void
on_progress(void *ctx, int64_t done, int64_t total)
{
    (void)ctx;
    if (done == 0)
        progress_begin(&bar, -1, "perplexity", (uint64_t)total);
    progress_update(&bar, (uint64_t)done);
    if (done == total)
        progress_end(&bar);
}

static void
on_info(void *ctx, const char *msg)
{
    (void)ctx;
    infomsg("%s", msg);
}

static void
on_warn(void *ctx, const char *msg)
{
    (void)ctx;
    warnmsg("%s", msg);
}

/* ---- batch mode: SIGINT/SIGTERM stop admission and let the running
 * requests finish for at most --drain-timeout seconds (a second signal
 * ends the drain after the current step); requests cut off get
 * "cancelled" results, what finished is kept and the exit status is 128 +
 * the signal.  SIGPIPE (the reader of the results went away) removes
 * partial files and ends quietly. */

static volatile sig_atomic_t stop_count, stop_sig;

static void
on_stop(int sig)
{
    stop_sig = sig;
    if (stop_count < 2)
        stop_count++;
}

static void
on_pipe(int sig)
{
    xio_cleanup_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void
batch_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;        /* no SA_RESTART: a blocked read returns */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_pipe;
    sigaction(SIGPIPE, &sa, NULL);
}

static int
run_batch(struct batch_opts *b)
{
    struct batch_report r;
    struct diag d = {{0}};
    int rc;

    batch_signals();
    b->stop = &stop_count;
    rc = run_generate_batch(b, &r, &d);
    if (rc)
        die(rc_from_st(rc), "%s", d.msg);
    if (cli_verbosity >= 1) {
        fprintf(stderr, "%s: %lld requests: %lld completed, %lld errors", cli_progname,
                (long long)r.requests, (long long)r.completed, (long long)r.errors);
        if (r.cancelled)
            fprintf(stderr, ", %lld cancelled", (long long)r.cancelled);
        if (r.unfinished)
            fprintf(stderr, ", %lld unfinished", (long long)r.unfinished);
        fprintf(stderr, "; %lld tokens generated in %.2f s, %.1f tok/s\n", (long long)r.generated,
                r.wall_ms / 1000.0, r.gen_tok_s);
        fprintf(stderr, "%s: %lld steps, %lld preemptions, %lld prefix-cache blocks reused; "
                "KV waste %.1f%% paged vs %.1f%% contiguous\n", cli_progname, (long long)r.steps,
                (long long)r.preemptions, (long long)r.prefix_hits, 100.0 * r.waste_paged,
                100.0 * r.waste_contig);
    }
    cli_finish_stdout();
    if (stop_count)
        return 128 + stop_sig;
    return r.errors ? RC_FAIL : RC_OK;
}

static uint64_t
random_seed(void)
{
    uint64_t s;

    if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s))
        s = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return s & (((uint64_t)1 << 53) - 1);   /* exact in a JSON number */
}

/* print_stats() : the summary line; newline_sent: the text on stdout was
 * already ended with a newline (a terminal). */
static void
print_stats(const struct generate_report *r, bool newline_sent)
{
    if (r->perplexity) {
        fprintf(stderr, "%s: %lld chunks of %lld tokens, %lld tokens scored, %.1f tok/s, %.2f s\n",
                cli_progname, (long long)r->ppl_chunks, (long long)r->ctx,
                (long long)r->ppl_scored, r->ppl_tok_s, r->ppl_ms / 1000.0);
        return;
    }
    if (!r->ends_in_newline && !newline_sent && isatty(STDERR_FILENO))
        fputc('\n', stderr);     /* the text may be on this terminal, through a pipe */
    fprintf(stderr, "%s: prompt %lld tokens, %.1f tok/s; generated %lld tokens, %.1f tok/s (%s)\n",
            cli_progname, (long long)r->prompt_tokens, r->prompt_tok_s,
            (long long)r->completion_tokens, r->gen_tok_s, r->finish_reason);
}

int
main(int argc, char **argv)
{
    struct generate_opts o;
    struct generate_report r;
    struct batch_opts b;
    struct diag d = {{0}};
    bool seed_set = false, have_chunks = false, have_n = false, batch = false, batch_opt = false;
    bool oversubscribe = false, newline_sent = false;
    int c, rc;

    cli_init(argv[0]);
    generate_opts_init(&o);
    batch_opts_init(&b, &o);
    while ((c = getopt_long(argc, argv, "f:hm:n:o:p:qt:Vv", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BATCH: batch = true; break;
        case OPT_BLOCK_SIZE:
            b.block_size = cli_parse_i64(optarg, 1, 4096, "--block-size", false);
            batch_opt = true;
            break;
        case OPT_KV_TRACE: b.trace = optarg; batch_opt = true; break;
        case OPT_KV_TYPE:
            if (!strcmp(optarg, "f16"))
                b.kv_type = GGML_TYPE_F16;
            else if (!strcmp(optarg, "f32"))
                b.kv_type = GGML_TYPE_F32;
            else if (!strcmp(optarg, "q8_0"))
                b.kv_type = GGML_TYPE_Q8_0;
            else
                usage_error(usage_line, "--kv-type: '%s' is not f16, f32 or q8_0", optarg);
            batch_opt = true;
            break;
        case OPT_MAX_BATCH_TOKENS:
            b.max_batch_tokens = cli_parse_i64(optarg, 1, 1 << 24, "--max-batch-tokens", true);
            batch_opt = true;
            break;
        case OPT_MAX_SEQS:
            b.max_seqs = cli_parse_i64(optarg, 1, 1 << 16, "--max-seqs", false);
            batch_opt = true;
            break;
        case OPT_NO_PREFIX_CACHE: b.prefix_cache = false; batch_opt = true; break;
        case OPT_PREEMPT:
            if (!strcmp(optarg, "recompute"))
                b.preempt = SCHED_PREEMPT_RECOMPUTE;
            else if (!strcmp(optarg, "swap"))
                b.preempt = SCHED_PREEMPT_SWAP;
            else
                usage_error(usage_line, "--preempt: '%s' is not recompute or swap", optarg);
            batch_opt = true;
            break;
        case OPT_SCHEDULE:
            if (!strcmp(optarg, "continuous"))
                b.policy = SCHED_CONTINUOUS;
            else if (!strcmp(optarg, "static"))
                b.policy = SCHED_STATIC;
            else
                usage_error(usage_line, "--schedule: '%s' is not continuous or static", optarg);
            batch_opt = true;
            break;
        case OPT_CHAT: o.chat = true; break;
        case OPT_CHUNKS:
            o.chunks = cli_parse_i64(optarg, 1, INT32_MAX, "--chunks", false);
            have_chunks = true;
            break;
        case OPT_CTX: o.ctx = cli_parse_i64(optarg, 1, (int64_t)1 << 24, "--ctx", true); break;
        case OPT_DRAIN_TIMEOUT:
            b.drain_timeout = cli_parse_double(optarg, 0, 1e9, "--drain-timeout");
            batch_opt = true;
            break;
        case 'f': o.prompt_file = optarg; break;
        case OPT_FORCE: o.force = true; break;
        case OPT_IGNORE_EOS: o.ignore_eos = true; break;
        case 'h':
            fputs(help_text, stdout);
            fputc('\n', stdout);
            puts(usage_line);
            cli_finish_stdout();
            return RC_OK;
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
            o.repeat_last_n = (int32_t)cli_parse_i64(optarg, -1, (int64_t)1 << 24, "--repeat-last-n",
                                                     false);
            break;
        case OPT_REPEAT_PENALTY:
            o.sp.repeat_penalty = (float)cli_parse_double(optarg, 1e-3, 1e3, "--repeat-penalty");
            break;
        case OPT_SEED:
            o.sp.seed = (uint64_t)cli_parse_i64(optarg, 0, INT64_MAX, "--seed", false);
            seed_set = true;
            break;
        case OPT_SYSTEM: o.system = optarg; break;
        case 't': o.threads = (int)cli_parse_i64(optarg, 1, 1024, "--threads", false); break;
        case OPT_TEMP: o.sp.temp = (float)cli_parse_double(optarg, 0, 1e6, "--temp"); break;
        case OPT_TOP_K: o.sp.top_k = (int32_t)cli_parse_i64(optarg, 0, INT32_MAX, "--top-k", false); break;
        case OPT_TOP_P: o.sp.top_p = (float)cli_parse_double(optarg, 0, 1, "--top-p"); break;
        case 'v': cli_verbosity = 2; break;
        case 'V':
            printf("generate (llmkit) %s\n", LLMKIT_VERSION);
            cli_finish_stdout();
            return RC_OK;
        default:
            fprintf(stderr, "%s\n", usage_line);
            return RC_USAGE;
        }
    }
    if (batch && optind < argc)
        b.input = argv[optind++];
    if (optind < argc)
        usage_error(usage_line, "unexpected operand '%s' (the prompt goes after -p)", argv[optind]);
    if (!o.model)
        usage_error(usage_line, "no model given (-m)");
    if (batch_opt && !batch)
        usage_error(usage_line, "--max-seqs, --max-batch-tokens, --block-size, --kv-type, "
                    "--schedule, --preempt, --no-prefix-cache, --kv-trace and --drain-timeout "
                    "need --batch");
    if (batch && (o.prompt || o.prompt_file || o.perplexity || o.json))
        usage_error(usage_line, "--batch takes no -p, -f, --perplexity or --json (the results "
                    "are JSON Lines)");
    if (b.trace && !strcmp(b.trace, "-") && (!o.output || !strcmp(o.output, "-")))
        usage_error(usage_line, "--kv-trace - needs -o FILE for the results");
    if (o.prompt && o.prompt_file)
        usage_error(usage_line, "-p and -f are exclusive");
    if (o.system && !o.chat)
        usage_error(usage_line, "--system needs --chat");
    if (o.parse_special && !o.chat)
        usage_error(usage_line, "--parse-special needs --chat (the special-token texts of a "
                    "plain prompt are always special)");
    if (o.perplexity && (o.prompt || o.prompt_file || o.chat || have_n))
        usage_error(usage_line, "--perplexity takes no prompt, --chat or -n");
    if (have_chunks && !o.perplexity)
        usage_error(usage_line, "--chunks needs --perplexity");
    if (!seed_set)
        o.sp.seed = random_seed();
    o.threads = cli_cap_threads(o.threads, oversubscribe);
    /* no output of this run may replace one of its inputs */
    xio_note_input(o.model);
    xio_note_input(o.prompt_file);
    xio_note_input(o.perplexity);
    o.progress = o.json ? NULL : on_progress;   /* no bar with --json (STYLE) */
    o.info = on_info;
    o.warn = on_warn;
    if (batch)
        return run_batch(&b);

    rc = run_generate(&o, &r, &d);
    if (rc)
        die(rc_from_st(rc), "%s", d.msg);
    if (!o.json && !o.perplexity && (!o.output || !strcmp(o.output, "-")) &&
        !r.ends_in_newline && isatty(STDOUT_FILENO)) {
        /* end the line on a terminal, so that the statistics or the shell
         * prompt do not follow the text on it; a pipe or a file gets
         * exactly the generated bytes */
        putchar('\n');
        newline_sent = true;
    }
    if (cli_verbosity >= 1)
        print_stats(&r, newline_sent);
    cli_finish_stdout();
    return RC_OK;
}
