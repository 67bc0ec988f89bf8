/*
 * kvstat - KV-cache memory accounting: bytes per token for MHA/GQA/MQA/MLA in
 * each KV dtype, what fits in a memory budget, contiguous vs paged waste for
 * a length workload, and summaries and plots of generate's KV traces.
 * Options are parsed here; the work is run_kvstat() in common/kv/kvstat.c.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "escape.h"
#include "kvstat.h"
#include "tool.h"
#include "tool_cb.h"
#include "xio.h"

static const char usage_line[] =
    "usage: kvstat [-fhqVv] [-o file] [--json | --csv] [--kv-type type] [--ctx n] [--batch n]\n"
    "              [--mem size [--weights file|size]] [--compare] [--lengths file | --dist name]\n"
    "              [--trace file [--svg file]] [model ...]";

static const char help_text[] =
    "kvstat - KV-cache memory accounting for LLM serving\n"
    "\n"
    "Models (FILE operands: GGUF, HF config.json or a directory holding one; - = stdin):\n"
    "      --layers N          with no FILE: number of layers\n"
    "      --heads N           with no FILE: query heads\n"
    "      --kv-heads N        with no FILE: key/value heads (default --heads)\n"
    "      --head-dim N        with no FILE: head size\n"
    "      --kv-lora-rank R    MLA latent size (model from flags, or the --compare MLA row)\n"
    "      --rope-dim N        MLA decoupled RoPE key size (likewise)\n"
    "      --kv-type TYPE      f32, f16, bf16, fp8, q8_0, q4_0 (default f16)\n"
    "\n"
    "Sizing:\n"
    "      --ctx N             context per sequence (default: the model's, else 4096)\n"
    "      --batch N           sequences per batch (default 1)\n"
    "      --block-size N      paged KV block in tokens (default 16)\n"
    "      --mem SIZE          memory budget, e.g. 24GiB: sequences that fit, longest context\n"
    "      --weights FILE|SIZE memory the weights take from --mem (default: a GGUF's tensors)\n"
    "      --compare           the model as MHA, GQA, MQA and MLA, with reduction factors\n"
    "      --groups G          K/V heads of the GQA row (default: the model's, else 8)\n"
    "\n"
    "Workloads (contiguous max/pow2/oracle reservation vs paged allocation):\n"
    "      --lengths FILE      one request per line: PROMPT OUTPUT\n"
    "      --dist NAME         fixed, uniform, geometric (exponential), lognormal, zipf (pareto)\n"
    "      --mean P[,O]        mean prompt and output lengths (one value: half each)\n"
    "      --shape X           lognormal sigma (default 1), zipf tail exponent (default 2)\n"
    "      --max N             longest request; the contiguous reservation (default --ctx)\n"
    "      --n N               requests to draw (default 1000)\n"
    "      --seed N            random seed (default 1)\n"
    "\n"
    "Traces (generate --kv-trace JSON Lines, docs/kv-trace.md):\n"
    "      --trace FILE        summarise a trace (- = stdin)\n"
    "      --svg FILE          plot KV blocks and sequences over time (- = stdout)\n"
    "\n"
    "Output:\n"
    "  -o, --output FILE       write the report to FILE atomically (default stdout)\n"
    "  -f, --force             overwrite existing output files\n"
    "      --json              JSON Lines, schema kvstat/1, final summary record\n"
    "      --csv               CSV, one header line per record type\n"
    "  -q, --quiet             no warnings\n"
    "  -v, --verbose           more messages\n"
    "  -h, --help              this help\n"
    "  -V, --version           print the version\n";

enum {
    OPT_BATCH = 256, OPT_BLOCK_SIZE, OPT_COMPARE, OPT_CSV, OPT_CTX, OPT_DIST, OPT_GROUPS,
    OPT_HEAD_DIM, OPT_HEADS, OPT_JSON, OPT_KV_HEADS, OPT_KV_LORA_RANK, OPT_KV_TYPE, OPT_LAYERS,
    OPT_LENGTHS, OPT_MAX, OPT_MEAN, OPT_MEM, OPT_N, OPT_ROPE_DIM, OPT_SEED, OPT_SHAPE, OPT_SVG,
    OPT_TRACE, OPT_WEIGHTS,
};

static const struct option longopts[] = {
    { "batch", required_argument, NULL, OPT_BATCH },
    { "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
    { "compare", no_argument, NULL, OPT_COMPARE },
    { "csv", no_argument, NULL, OPT_CSV },
    { "ctx", required_argument, NULL, OPT_CTX },
    { "dist", required_argument, NULL, OPT_DIST },
    { "force", no_argument, NULL, 'f' },
    { "groups", required_argument, NULL, OPT_GROUPS },
    { "head-dim", required_argument, NULL, OPT_HEAD_DIM },
    { "heads", required_argument, NULL, OPT_HEADS },
    { "help", no_argument, NULL, 'h' },
    { "json", no_argument, NULL, OPT_JSON },
    { "kv-heads", required_argument, NULL, OPT_KV_HEADS },
    { "kv-lora-rank", required_argument, NULL, OPT_KV_LORA_RANK },
    { "kv-type", required_argument, NULL, OPT_KV_TYPE },
    { "layers", required_argument, NULL, OPT_LAYERS },
    { "lengths", required_argument, NULL, OPT_LENGTHS },
    { "max", required_argument, NULL, OPT_MAX },
    { "mean", required_argument, NULL, OPT_MEAN },
    { "mem", required_argument, NULL, OPT_MEM },
    { "n", required_argument, NULL, OPT_N },
    { "output", required_argument, NULL, 'o' },
    { "quiet", no_argument, NULL, 'q' },
    { "rope-dim", required_argument, NULL, OPT_ROPE_DIM },
    { "seed", required_argument, NULL, OPT_SEED },
    { "shape", required_argument, NULL, OPT_SHAPE },
    { "svg", required_argument, NULL, OPT_SVG },
    { "trace", required_argument, NULL, OPT_TRACE },
    { "verbose", no_argument, NULL, 'v' },
    { "version", no_argument, NULL, 'V' },
    { "weights", required_argument, NULL, OPT_WEIGHTS },
    { NULL, 0, NULL, 0 },
};

/* --mean P[,O]: one value is the mean total, split evenly. */
static void
parse_mean(const char *s, struct kvstat_opts *o)
{
    char buf[64];
    char *comma;

    if (strlen(s) >= sizeof(buf))
        usage_error(usage_line, "--mean: invalid value '%s'", ESC(s));
    strcpy(buf, s);
    comma = strchr(buf, ',');
    if (comma) {
        *comma = '\0';
        o->mean_prompt = cli_parse_double(buf, 1, (double)KV_MAX_LEN, "--mean (prompt)");
        o->mean_output = cli_parse_double(comma + 1, 0, (double)KV_MAX_LEN, "--mean (output)");
    } else {
        double total = cli_parse_double(buf, 2, (double)KV_MAX_LEN, "--mean");
        o->mean_prompt = o->mean_output = total / 2;
    }
}

/* --weights FILE|SIZE: an existing file's size, else a size ("13GiB"). */
static void
parse_weights(const char *s, struct kvstat_opts *o)
{
    struct stat st;

    o->weights_name = cli_path(usage_line, "--weights", s);
    if (stat(s, &st) == 0) {
        if (!S_ISREG(st.st_mode))
            die(RC_IO, "--weights: '%s': is %s, not a regular file", ESC(s),
                file_kind_name(st.st_mode));
        o->weights = (int64_t)st.st_size;
        xio_note_input(s);
        return;
    }
    if (s[0] < '0' || s[0] > '9')
        die(RC_IO, "--weights: '%s': cannot stat:", ESC(s));
    o->weights = cli_parse_i64(s, 0, INT64_MAX, "--weights", true);
}

int
main(int argc, char **argv)
{
    struct kvstat_opts o;
    struct diag d = {{0}};
    bool json = false, csv = false, have_mean = false, have_dist_opt = false, have_max = false;
    int c, rc, t;

    cli_init(argv[0]);
    kvstat_opts_init(&o);
    o.cb = tool_callbacks(true);
    while ((c = cli_getopt(argc, argv, "fho:qVv", longopts, usage_line)) != -1) {
        switch (c) {
        case OPT_BATCH: o.batch = cli_parse_i64(optarg, 1, 1 << 24, "--batch", false); break;
        case OPT_BLOCK_SIZE: o.block_size = cli_parse_i64(optarg, 1, 65536, "--block-size", false); break;
        case OPT_COMPARE: o.compare = true; break;
        case OPT_CSV: csv = true; break;
        case OPT_CTX: o.ctx = cli_parse_i64(optarg, 1, KV_MAX_LEN, "--ctx", true); break;
        case OPT_DIST:
            if ((o.dist = kv_dist_parse(optarg)) < 0)
                usage_error(usage_line, "--dist: unknown distribution '%s' (fixed, uniform, "
                            "geometric, lognormal, zipf)", ESC(optarg));
            break;
        case 'f': o.force = true; break;
        case OPT_GROUPS: o.groups = cli_parse_i64(optarg, 1, KV_MAX_HEADS, "--groups", false); break;
        case OPT_HEAD_DIM: o.head_dim = cli_parse_i64(optarg, 1, KV_MAX_HEAD_DIM, "--head-dim", false); break;
        case OPT_HEADS: o.heads = cli_parse_i64(optarg, 1, KV_MAX_HEADS, "--heads", false); break;
        case 'h': cli_exit_help(help_text, usage_line);
        case OPT_JSON: json = true; break;
        case OPT_KV_HEADS: o.kv_heads = cli_parse_i64(optarg, 1, KV_MAX_HEADS, "--kv-heads", false); break;
        case OPT_KV_LORA_RANK:
            o.kv_lora_rank = cli_parse_i64(optarg, 1, KV_MAX_RANK, "--kv-lora-rank", false);
            break;
        case OPT_KV_TYPE:
            if ((t = kv_dtype_parse(optarg)) < 0)
                usage_error(usage_line, "--kv-type: unknown type '%s' (f32, f16, bf16, fp8, q8_0, q4_0)",
                            ESC(optarg));
            o.kv_type = (enum kv_dtype)t;
            break;
        case OPT_LAYERS: o.layers = cli_parse_i64(optarg, 1, KV_MAX_LAYERS, "--layers", false); break;
        case OPT_LENGTHS: o.lengths = cli_path(usage_line, "--lengths", optarg); break;
        case OPT_MAX:
            o.max_len = cli_parse_i64(optarg, 2, KV_MAX_LEN, "--max", true);
            have_max = true;
            break;
        case OPT_MEAN: parse_mean(optarg, &o); have_mean = true; break;
        case OPT_MEM: o.mem = cli_parse_i64(optarg, 1, INT64_MAX, "--mem", true); break;
        case OPT_N:
            o.n = cli_parse_i64(optarg, 1, 10000000, "--n", false);
            have_dist_opt = true;
            break;
        case 'o': o.output = cli_path(usage_line, "-o", optarg); break;
        case 'q': cli_verbosity = 0; break;
        case OPT_ROPE_DIM: o.rope_dim = cli_parse_i64(optarg, 1, KV_MAX_HEAD_DIM, "--rope-dim", false); break;
        case OPT_SEED:
            o.seed = (uint64_t)cli_parse_i64(optarg, 0, INT64_MAX, "--seed", false);
            have_dist_opt = true;
            break;
        case OPT_SHAPE:
            o.shape = cli_parse_double(optarg, 0.01, 100, "--shape");
            have_dist_opt = true;
            break;
        case OPT_SVG: o.svg = cli_path(usage_line, "--svg", optarg); break;
        case OPT_TRACE: o.trace = cli_path(usage_line, "--trace", optarg); break;
        case 'v': cli_verbosity = 2; break;
        case 'V': cli_exit_version("kvstat");
        case OPT_WEIGHTS: parse_weights(optarg, &o); break;
        default: cli_exit_usage(usage_line);
        }
    }
    o.inputs = (const char *const *)(argv + optind);
    o.n_inputs = (size_t)(argc - optind);

    {
        /* --trace, --lengths and the FILE operands: one at most reads stdin */
        const char *file_stdin = NULL;
        for (size_t i = 0; i < o.n_inputs; i++) {
            const struct stdin_use twice[] = { { "FILE", file_stdin }, { "FILE", o.inputs[i] } };
            cli_path(usage_line, "FILE", o.inputs[i]);
            cli_check_stdin(usage_line, twice, 2);
            if (!strcmp(o.inputs[i], "-"))
                file_stdin = "-";
        }
        const struct stdin_use in[] = {
            { "--trace", o.trace }, { "--lengths", o.lengths }, { "FILE", file_stdin },
        };
        cli_check_stdin(usage_line, in, sizeof(in) / sizeof(in[0]));
    }
    const struct usage_rule rules[] = {
        { json && csv, "--json and --csv are exclusive" },
        { o.lengths && o.dist >= 0, "--lengths and --dist are exclusive" },
        { o.dist >= 0 && !have_mean, "--dist needs --mean" },
        { o.dist < 0 && (have_mean || have_dist_opt), "--mean, --n, --seed and --shape need --dist" },
        { have_max && !o.lengths && o.dist < 0, "--max needs --lengths or --dist" },
        { o.n_inputs && (o.layers || o.heads || o.kv_heads || o.head_dim),
          "--layers, --heads, --kv-heads and --head-dim describe a model given without FILE operands" },
        { o.n_inputs && !o.compare && (o.kv_lora_rank || o.rope_dim),
          "with FILE operands, --kv-lora-rank and --rope-dim need --compare" },
        { o.groups && !o.compare, "--groups needs --compare" },
        { o.svg && !o.trace, "--svg needs --trace" },
        { o.weights >= 0 && !o.mem, "--weights needs --mem" },
        { !o.n_inputs && !o.layers && !o.heads && !o.head_dim && !o.kv_heads && !o.kv_lora_rank &&
          !o.lengths && o.dist < 0 && !o.trace, "no model, workload or trace given" },
    };
    cli_check_usage(usage_line, rules, sizeof(rules) / sizeof(rules[0]));
    o.format = json ? KVSTAT_JSON : csv ? KVSTAT_CSV : KVSTAT_TABLE;
    rc = run_kvstat(&o, &d);
    if (rc)
        die(rc_from_st(rc), "%s", ESC(d.msg));
    cli_finish_stdout();
    return RC_OK;
}
