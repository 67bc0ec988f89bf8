/*
 * generate - text generation with a GGUF model: one prompt streamed to
 * standard output, a batch of requests (JSONL in, JSONL out) through the
 * continuous-batching engine, or the perplexity of a text file.  The work is
 * run_generate() (common/model/generate.c) or run_generate_batch() (genbatch.c).
 */
#include <stdio.h>
#include <string.h>

#include "compute.h"
#include "genbatch.h"
#include "generate.h"
#include "genmerge.h"
#include "gentok.h"
#include "scheduler.h"
#include "tool.h"
#include "tool_cb.h"

#include "generate_opts.h"

/* --batch: SIGINT/SIGTERM/SIGHUP drain the run (genbatch.h); then exit 128 + the signal. */
static int
run_batch(struct batch_opts *b)
{
    struct batch_report r;
    struct diag d = {{0}};
    int rc;

    tool_catch_stop();
    b->stop = &tool_stop_count;
    if ((rc = run_generate_batch(b, &r, &d))) {
        if (tool_stop_count)    /* e.g. waiting for a FIFO's writer: stopped, not failed */
            die(128 + tool_stop_sig, "stopped by signal %d: %s", (int)tool_stop_sig, d.msg);
        die(rc_from_st(rc), "%s", d.msg);
    }
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
    if (!r.perplexity && !r.ends_in_newline)
        cli_end_text_line(!o->json && (!o->output || !strcmp(o->output, "-")));
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
    struct gentok_opts tk = { 0 };
    bool tk_other = false;          /* an option --tokenize does not take */
    struct diag d = {{0}};
    bool have_n = false, batch = false, batch_opt = false, oversubscribe = false, have_spec = false;
    bool have_tree = false, have_ngram = false, have_shape = false, have_pmin = false;
    bool shard_by = false, sync_opt = false;
    int c, v;

    cli_init(argv[0]);
    generate_opts_init(&o);
    batch_opts_init(&b, &o);
    o.sp.seed = sample_random_seed();     /* unless --seed */
    while ((c = cli_getopt(argc, argv, "f:hm:n:o:p:qt:Vv", longopts, usage_line)) != -1) {
        if (c >= OPT_BLOCK_SIZE && c <= OPT_SCHEDULE)
            batch_opt = true;
        tk_other |= c < OPT_TOKENIZE && !(c < 128 && strchr("mpfoqv", c)) && c != OPT_FORCE &&
                    c != OPT_JSON;
        switch (c) {
        case OPT_TOKENIZE: case OPT_COUNT: case OPT_DETOKENIZE:
            if (tk.mode && (int)tk.mode != GENTOK_TOKENIZE + (c - OPT_TOKENIZE))
                usage_error(usage_line, "--tokenize, --count and --detokenize are exclusive");
            tk.mode = (enum gentok_mode)(GENTOK_TOKENIZE + (c - OPT_TOKENIZE));
            break;
        case OPT_NO_BOS: tk.no_special = true; break;
        case OPT_NO_PARSE_SPECIAL: tk.no_parse_special = true; break;
        case OPT_BATCH: batch = true; break;
        case OPT_BLOCK_SIZE: b.block_size = cli_parse_i64(optarg, 1, 4096, "--block-size", false); break;
        case OPT_KV_TRACE: b.trace = cli_path(usage_line, "--kv-trace", optarg); break;
        case OPT_MERGE: mo.requests = cli_path(usage_line, "--merge", optarg); break;
        case OPT_RESUME: b.resume = cli_path(usage_line, "--resume", optarg); break;
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
        case 'f': o.prompt_file = cli_path(usage_line, "-f", optarg); break;
        case OPT_FORCE: o.force = true; break;
        case OPT_IGNORE_EOS: o.ignore_eos = true; break;
        case 'h': cli_exit_help(help_text, usage_line);
        case OPT_JSON: o.json = true; break;
        case OPT_TOP_LOGITS: o.top_logits = (int)cli_parse_i64(optarg, 1, 64, "--top-logits", false); break;
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
            have_ngram = true;
            break;
        case OPT_SPEC_TOKENS:
            o.spec_tokens = strcmp(optarg, "auto") == 0 ? 0
                          : cli_parse_i64(optarg, 1, 64, "--spec-tokens", false);
            have_spec = true;
            break;
        case OPT_DRAFT: o.draft = cli_path(usage_line, "--draft", optarg); break;
        case OPT_DRAFT_HEAD: o.draft_head = cli_path(usage_line, "--draft-head", optarg); break;
        case OPT_SPEC_COMPARE: o.spec_compare = true; have_spec = true; break;
        case OPT_SPEC_DEPTH:
            o.spec_depth = (int)cli_parse_i64(optarg, 1, 64, "--spec-depth", false);
            have_tree = have_shape = true;
            break;
        case OPT_SPEC_WIDTH:
            o.spec_width = (int)cli_parse_i64(optarg, 1, 16, "--spec-width", false);
            have_tree = have_shape = true;
            break;
        case OPT_DRAFT_P_MIN:
            o.draft_p_min = (float)cli_parse_double(optarg, 0, 1, "--draft-p-min");
            have_tree = have_pmin = true;
            break;
        case OPT_KV_MEM: o.kv_mem = cli_parse_i64(optarg, 1, INT64_MAX, "--kv-mem", true); break;
        case OPT_MIN_P: o.sp.min_p = (float)cli_parse_double(optarg, 0, 1, "--min-p"); break;
        case 'm': o.model = cli_path(usage_line, "-m", optarg); break;
        case 'n':
            o.n_predict = cli_parse_i64(optarg, -1, (int64_t)1 << 30, "--n-predict", false);
            have_n = true;
            break;
        case 'o': o.output = cli_path(usage_line, "-o", optarg); break;
        case OPT_OVERSUBSCRIBE: oversubscribe = true; break;
        case OPT_PARSE_SPECIAL: o.parse_special = true; break;
        case OPT_PERPLEXITY: o.perplexity = cli_path(usage_line, "--perplexity", optarg); break;
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
        for (int i = optind; i < argc; i++)
            cli_path(usage_line, "--merge: a results file", argv[i]);
        mo.output = o.output;
        mo.force = o.force;
        return run_merge(&mo, argc - optind, argv + optind);
    }
    if (batch && optind < argc)
        b.input = cli_path(usage_line, "--batch", argv[optind++]);
    if (optind < argc)
        usage_error(usage_line, "unexpected operand '%s' (the prompt goes after -p)", argv[optind]);
    const struct usage_rule rules[] = {
        { !o.model, "no model given (-m)" },
        { tk.mode && tk_other, "--tokenize, --count and --detokenize take only -m, -p, -f, -o, "
          "--force, --json, --no-bos and --no-parse-special" },
        { (tk.no_special || tk.no_parse_special) && !tk.mode, "--no-bos and --no-parse-special "
          "need --tokenize, --count or --detokenize" },
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
        { o.top_logits && (!o.json || o.perplexity), "--top-logits needs --json and a prompt" },
        { have_spec && !o.lookup && !o.draft && !o.draft_head, "--spec-tokens and --spec-compare "
          "need --lookup, --draft or --draft-head" },
        { have_ngram && !o.lookup, "--lookup-ngram needs --lookup" },
        { have_tree && !o.draft && !o.draft_head, "--spec-depth, --spec-width and --draft-p-min "
          "need --draft or --draft-head" },
        { o.lookup + !!o.draft + !!o.draft_head > 1, "--lookup, --draft and --draft-head are exclusive" },
        { (o.lookup || o.draft || o.draft_head) && o.perplexity, "--lookup, --draft and --draft-head "
          "do not go with --perplexity" },
        { batch && have_shape, "--spec-depth and --spec-width work with one "
          "prompt (-p, -f): --batch drafts chains of --spec-tokens" },
        { o.spec_compare && batch, "--spec-compare works with one prompt (-p, -f)" },
    };
    cli_check_usage(usage_line, rules, sizeof(rules) / sizeof(rules[0]));
    /* the prompt (or the text of --tokenize): -p, else -f, else stdin */
    const bool prompt_read = !batch && !o.perplexity && !o.prompt;
    const struct stdin_use in[] = {
        { "-m", o.model }, { "--draft", o.draft }, { "--draft-head", o.draft_head },
        { "--batch", batch ? (b.input ? b.input : "-") : NULL }, { "--perplexity", o.perplexity },
        { o.prompt_file ? "-f" : "the prompt (no -p or -f)",
          prompt_read ? (o.prompt_file ? o.prompt_file : "-") : NULL },
    };
    cli_check_stdin(usage_line, in, sizeof(in) / sizeof(in[0]));
    if (o.draft_head && !have_pmin)
        o.draft_p_min = 0.0f;   /* a head's confidence floor is off unless asked for */
    o.threads = cli_cap_threads(o.threads, oversubscribe);
    o.cb = tool_callbacks(false);
    if (o.json)
        o.cb.progress = NULL;   /* no bar with --json (STYLE) */
    if (tk.mode && (v = run_gentok(&tk, &o, &d)))     /* --tokenize, --count, --detokenize */
        die(rc_from_st(v), "%s", d.msg);
    if (tk.mode)
        return cli_finish_stdout(), RC_OK;
    return batch ? run_batch(&b) : run_one(&o);
}
