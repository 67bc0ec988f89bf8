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
#include "genmerge.h"
#include "scheduler.h"
#include "tool.h"
#include "tool_cb.h"

#include "generate_usage.h"

enum {
    OPT_CHAT = 256, OPT_CHUNKS, OPT_CTX, OPT_FORCE, OPT_IGNORE_EOS, OPT_JSON, OPT_KERNEL, OPT_KV_MEM,
    OPT_MIN_P, OPT_PERPLEXITY, OPT_REPEAT_LAST_N, OPT_REPEAT_PENALTY, OPT_SEED, OPT_SYSTEM, OPT_TEMP,
    OPT_TOP_K, OPT_TOP_P, OPT_BATCH, OPT_OVERSUBSCRIBE, OPT_PARSE_SPECIAL, OPT_DEVICE, OPT_LOOKUP,
    OPT_LOOKUP_NGRAM, OPT_SPEC_TOKENS, OPT_DRAFT, OPT_SPEC_DEPTH, OPT_SPEC_WIDTH, OPT_DRAFT_P_MIN,
    OPT_SPEC_COMPARE, OPT_MERGE,
    /* the options that need --batch, together */
    OPT_BLOCK_SIZE, OPT_DRAIN_TIMEOUT, OPT_KV_TRACE, OPT_KV_TYPE, OPT_MAX_BATCH_TOKENS,
    OPT_MAX_SEQS, OPT_NO_PREFIX_CACHE, OPT_PREEMPT, OPT_RESUME, OPT_SHARD, OPT_SHARD_BY,
    OPT_SYNC_LINES, OPT_SYNC_SECONDS, OPT_SCHEDULE,
};

static const struct option longopts[] = {
    { "batch", no_argument, NULL, OPT_BATCH },
    { "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
    { "chat", no_argument, NULL, OPT_CHAT },
    { "chunks", required_argument, NULL, OPT_CHUNKS },
    { "ctx", required_argument, NULL, OPT_CTX },
    { "device", required_argument, NULL, OPT_DEVICE },
    { "draft", required_argument, NULL, OPT_DRAFT },
    { "draft-p-min", required_argument, NULL, OPT_DRAFT_P_MIN },
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
    { "lookup", no_argument, NULL, OPT_LOOKUP },
    { "lookup-ngram", required_argument, NULL, OPT_LOOKUP_NGRAM },
    { "max-batch-tokens", required_argument, NULL, OPT_MAX_BATCH_TOKENS },
    { "max-seqs", required_argument, NULL, OPT_MAX_SEQS },
    { "merge", required_argument, NULL, OPT_MERGE },
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
    { "resume", required_argument, NULL, OPT_RESUME },
    { "schedule", required_argument, NULL, OPT_SCHEDULE },
    { "seed", required_argument, NULL, OPT_SEED },
    { "shard", required_argument, NULL, OPT_SHARD },
    { "shard-by", required_argument, NULL, OPT_SHARD_BY },
    { "spec-compare", no_argument, NULL, OPT_SPEC_COMPARE },
    { "spec-depth", required_argument, NULL, OPT_SPEC_DEPTH },
    { "spec-tokens", required_argument, NULL, OPT_SPEC_TOKENS },
    { "spec-width", required_argument, NULL, OPT_SPEC_WIDTH },
    { "sync-lines", required_argument, NULL, OPT_SYNC_LINES },
    { "sync-seconds", required_argument, NULL, OPT_SYNC_SECONDS },
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

/* --merge REQUESTS RESULTS... (genmerge.h) */
static int
run_merge(struct merge_opts *m, int n, char **results)
{
    struct merge_report r;
    struct diag d = {{0}};
    int rc;

    m->results = (const char *const *)results;
    m->n_results = n;
    m->cb = tool_callbacks(false);
    if ((rc = run_generate_merge(m, &r, &d)))
        die(rc_from_st(rc), "%s", d.msg);
    if (cli_verbosity >= 1)
        merge_report_print(&r, n, cli_progname, stderr);
    cli_finish_stdout();
    return RC_OK;
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
    struct merge_opts mo = { 0 };
    struct diag d = {{0}};
    bool have_n = false, batch = false, batch_opt = false, oversubscribe = false, have_spec = false;
    bool have_tree = false;
    bool shard_by = false, sync_opt = false;
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
        case OPT_MERGE: mo.requests = optarg; break;
        case OPT_RESUME: b.resume = optarg; break;
        case OPT_SHARD:
            if (batch_shard_parse(optarg, &b.shard, &d) < 0)
                usage_error(usage_line, "--shard: %s", d.msg);
            break;
        case OPT_SHARD_BY:
            if (strcmp(optarg, "index") && strcmp(optarg, "id"))
                usage_error(usage_line, "--shard-by: '%s' is not index or id", optarg);
            b.shard.by_id = !strcmp(optarg, "id");
            shard_by = true;
            break;
        case OPT_SYNC_LINES:
            b.sync_lines = cli_parse_i64(optarg, 1, INT32_MAX, "--sync-lines", false);
            sync_opt = true;
            break;
        case OPT_SYNC_SECONDS:
            b.sync_seconds = cli_parse_double(optarg, 0, 1e6, "--sync-seconds");
            sync_opt = true;
            break;
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
        case OPT_DEVICE:
            if (!compute_device_known(optarg))
                usage_error(usage_line, "--device: unknown device '%s' (cpu, cuda)", optarg);
            o.device = optarg;
            break;
        case OPT_LOOKUP: o.lookup = true; break;
        case OPT_LOOKUP_NGRAM:
            o.lookup_ngram = (int)cli_parse_i64(optarg, 1, 16, "--lookup-ngram", false);
            have_spec = true;
            break;
        case OPT_SPEC_TOKENS:
            o.spec_tokens = strcmp(optarg, "auto") == 0 ? 0
                          : cli_parse_i64(optarg, 1, 64, "--spec-tokens", false);
            have_spec = true;
            break;
        case OPT_DRAFT: o.draft = optarg; break;
        case OPT_SPEC_COMPARE: o.spec_compare = true; have_spec = true; break;
        case OPT_SPEC_DEPTH:
            o.spec_depth = (int)cli_parse_i64(optarg, 1, 64, "--spec-depth", false);
            have_tree = true;
            break;
        case OPT_SPEC_WIDTH:
            o.spec_width = (int)cli_parse_i64(optarg, 1, 16, "--spec-width", false);
            have_tree = true;
            break;
        case OPT_DRAFT_P_MIN:
            o.draft_p_min = (float)cli_parse_double(optarg, 0, 1, "--draft-p-min");
            have_tree = true;
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
    if (mo.requests) {
        if (batch || batch_opt || o.model || o.prompt || o.prompt_file || o.perplexity || o.json)
            usage_error(usage_line, "--merge takes only -o, --force and the results files");
        if (optind == argc)
            usage_error(usage_line, "--merge: no results files given");
        mo.output = o.output;
        mo.force = o.force;
        return run_merge(&mo, argc - optind, argv + optind);
    }
    if (batch && optind < argc)
        b.input = argv[optind++];
    if (optind < argc)
        usage_error(usage_line, "unexpected operand '%s' (the prompt goes after -p)", argv[optind]);
    const struct usage_rule rules[] = {
        { !o.model, "no model given (-m)" },
        { batch_opt && !batch, "--max-seqs, --max-batch-tokens, --block-size, --kv-type, --schedule, "
          "--preempt, --no-prefix-cache, --kv-trace, --shard, --shard-by, --resume, --sync-lines, "
          "--sync-seconds and --drain-timeout need --batch" },
        { shard_by && !b.shard.count, "--shard-by needs --shard" },
        { sync_opt && !b.resume, "--sync-lines and --sync-seconds need --resume" },
        { b.resume && o.output, "--resume FILE is where the results go: no -o with it" },
        { b.resume && !strcmp(b.resume, "-"), "--resume needs a file it can read back, not '-'" },
        { batch && (o.prompt || o.prompt_file || o.perplexity || o.json),
          "--batch takes no -p, -f, --perplexity or --json (the results are JSON Lines)" },
        { b.trace && !strcmp(b.trace, "-") && !b.resume && (!o.output || !strcmp(o.output, "-")),
          "--kv-trace - needs -o FILE (or --resume FILE) for the results" },
        { o.prompt && o.prompt_file, "-p and -f are exclusive" },
        { o.system && !o.chat, "--system needs --chat" },
        { o.parse_special && !o.chat, "--parse-special needs --chat (the special-token texts of a "
          "plain prompt are always special)" },
        { o.perplexity && (o.prompt || o.prompt_file || o.chat || have_n),
          "--perplexity takes no prompt, --chat or -n" },
        { o.chunks > 0 && !o.perplexity, "--chunks needs --perplexity" },
        { have_spec && !o.lookup && !o.draft, "--lookup-ngram, --spec-tokens and --spec-compare need "
          "--lookup or --draft" },
        { have_tree && !o.draft, "--spec-depth, --spec-width and --draft-p-min need --draft" },
        { o.lookup && o.draft, "--lookup and --draft are exclusive" },
        { (o.lookup || o.draft) && (batch || o.perplexity), "--lookup and --draft work with one "
          "prompt (-p, -f), not with --batch or --perplexity" },
    };
    cli_check_usage(usage_line, rules, sizeof(rules) / sizeof(rules[0]));
    o.threads = cli_cap_threads(o.threads, oversubscribe);
    o.cb = tool_callbacks(false);
    if (o.json)
        o.cb.progress = NULL;   /* no bar with --json (STYLE) */
    return batch ? run_batch(&b) : run_one(&o);
}
