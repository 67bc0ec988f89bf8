/*
 * quantize - quantize a GGUF model with llama.cpp's types and mixes (bytes
 * identical to llama-quantize's), optionally with an importance matrix read
 * from a file or collected from calibration text, or with a grid method
 * (GPTQ, AWQ, RTN: --method), and report what it cost.  The work is
 * run_quantize() (common/quant/quantize_run.c); the options are in
 * quantize_opts.h.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "quantize_run.h"
#include "tool.h"
#include "tool_cb.h"
#include "xio.h"

#include "quantize_opts.h"

#define MAX_LIST 64

static int
parse_type(const char *s, const char *what)
{
    int t = quant_tensor_type_parse(s);
    if (t < 0)
        usage_error(usage_line, "%s: unknown or unsupported tensor type '%s'", what, s);
    return t;
}

int
main(int argc, char **argv)
{
    struct quantize_run_opts r = { .q = { .mix = { .output_type = -1, .embd_type = -1 },
                                          .cb = tool_callbacks(false) },
                                   .calib_ctx = 512, .calib_chunks = -1, .eval_ctx = 512,
                                   .eval_chunks = -1,
                                   .m = { .g = { .bits = 4, .group_size = 128, .damp = 0.01 } } };
    struct gptq_opts *g = &r.m.g;
    bool grid_opt = false, gptq_opt = false, sym_set = false, asym_set = false;
    struct quantize_opts *o = &r.q;
    struct quant_override ov[MAX_LIST];
    const char *inc[MAX_LIST], *exc[MAX_LIST];
    size_t n_ov = 0, n_inc = 0, n_exc = 0;
    bool oversubscribe = false;
    struct stat st;
    struct diag d = {{0}};
    int c, rc;

    cli_init(argv[0]);
    while ((c = cli_getopt(argc, argv, "fhqt:vV", longopts, usage_line)) != -1) {
        switch (c) {
        case 'f': o->force = true; break;
        case 'h': help(); cli_finish_stdout(); return RC_OK;
        case 'q': cli_verbosity = 0; break;
        case 't': o->n_threads = (int)cli_parse_i64(optarg, 1, 1024, "--threads", false); break;
        case O_OVERSUB: oversubscribe = true; break;
        case 'v': cli_verbosity = 2; break;
        case 'V': cli_exit_version("quantize");
        case O_TYPE:
            if (!(r.ft = quant_ftype_find(optarg)))
                usage_error(usage_line, "--type: unknown file type '%s' (see --help)", optarg);
            break;
        case O_TT: {
            char *eq = strchr(optarg, '=');
            if (!eq || eq == optarg || !eq[1])
                usage_error(usage_line, "--tensor-type: expected PATTERN=TYPE, not '%s'", optarg);
            if (n_ov == MAX_LIST)
                usage_error(usage_line, "--tensor-type: at most %d", MAX_LIST);
            *eq = 0;
            ov[n_ov].pattern = optarg;
            ov[n_ov++].type = (uint32_t)parse_type(eq + 1, "--tensor-type");
            break;
        }
        case O_PURE: o->mix.pure = true; break;
        case O_KEEP: o->mix.keep_output = true; break;
        case O_OTYPE: o->mix.output_type = parse_type(optarg, "--output-type"); break;
        case O_ETYPE: o->mix.embd_type = parse_type(optarg, "--embd-type"); break;
        case O_IMATRIX: r.imatrix_in = cli_path(usage_line, "--imatrix", optarg); break;
        case O_CALIB: r.calib = cli_path(usage_line, "--calib", optarg); break;
        case O_CCTX: r.calib_ctx = cli_parse_i64(optarg, 16, 1 << 20, "--calib-ctx", false); break;
        case O_CCHUNKS: r.calib_chunks = cli_parse_i64(optarg, 1, INT32_MAX, "--calib-chunks", false); break;
        case O_INC:
        case O_EXC:
            if ((c == O_INC ? n_inc : n_exc) == MAX_LIST)
                usage_error(usage_line, "at most %d --include-weights/--exclude-weights", MAX_LIST);
            if (c == O_INC)
                inc[n_inc++] = optarg;
            else
                exc[n_exc++] = optarg;
            break;
        case O_IMOUT: r.imatrix_out = cli_path(usage_line, "--imatrix-out", optarg); break;
        case O_IMFMT:
            if (strcmp(optarg, "gguf") && strcmp(optarg, "dat"))
                usage_error(usage_line, "--imatrix-format: '%s' is not gguf or dat", optarg);
            r.imatrix_dat = !strcmp(optarg, "dat");
            break;
        case O_EVAL: r.eval = cli_path(usage_line, "--eval", optarg); break;
        case O_ECTX: r.eval_ctx = cli_parse_i64(optarg, 4, 1 << 20, "--eval-ctx", false); break;
        case O_ECHUNKS: r.eval_chunks = cli_parse_i64(optarg, 1, INT32_MAX, "--eval-chunks", false); break;
        case O_EVONLY: r.eval_only = true; break;
        case O_KERNEL: r.kernel = optarg; break;
        case O_JSON: r.json = true; break;
        case O_METHOD:
            if ((c = qmethod_parse(optarg)) < 0)
                usage_error(usage_line, "--method: '%s' is not gptq, awq or rtn", optarg);
            r.use_method = true;
            r.m.method = (enum qmethod)c;
            break;
        case O_FORMAT:
            if ((c = qformat_parse(optarg)) < 0)
                usage_error(usage_line, "--format: '%s' is not gguf, gptq, gptq_v2 or awq", optarg);
            r.format = (enum qformat)c;
            grid_opt = true;
            break;
        case O_BITS: g->bits = (int)cli_parse_i64(optarg, 2, 8, "--bits", false); grid_opt = true; break;
        case O_GS: g->group_size = cli_parse_i64(optarg, -1, 1 << 20, "--group-size", false); grid_opt = true; break;
        case O_SYM: g->sym = sym_set = grid_opt = true; break;
        case O_ASYM: g->sym = false; asym_set = grid_opt = true; break;
        case O_MSE: g->mse = grid_opt = true; break;
        case O_ACT: g->act_order = gptq_opt = true; break;
        case O_STATIC: g->static_groups = gptq_opt = true; break;
        case O_RESUME: r.resume = gptq_opt = true; break;
        case O_DAMP: {
            char *e;
            g->damp = strtod(optarg, &e);
            if (e == optarg || *e || !(g->damp > 0 && g->damp < 1))
                usage_error(usage_line, "--damp: '%s' is not a number greater than 0 and less than 1",
                            optarg);
            gptq_opt = true;
            break;
        }
        case O_PROG: tool_progress_mode = 1; break;
        case O_NOPROG: tool_progress_mode = 0; break;
        default: cli_exit_usage(usage_line);
        }
    }
    argc -= optind;
    argv += optind;
    if (argc != 2)
        usage_error(usage_line, argc < 2 ? "missing %s" : "too many operands%s",
                    argc == 0 ? "input and output" : argc == 1 ? "output" : "");
    cli_path(usage_line, "INPUT", argv[0]);
    cli_path(usage_line, "OUTPUT", argv[1]);
    struct diag gd;
    /* an input read twice (by the calibration or the evaluation, then the
     * quantization) must be a file: a pipe or FIFO can be read only once */
    const bool in_stream = path_is_stream(argv[0]);
    const bool meth = r.use_method, gptq = meth && r.m.method == QM_GPTQ;
    const bool awq = meth && r.m.method == QM_AWQ;
    const struct usage_rule rules[] = {
        { r.eval_only && !r.eval, "--eval-only needs --eval" },
        { r.eval_only && (r.ft || meth || grid_opt || gptq_opt || r.calib || r.imatrix_in || n_ov ||
                          o->mix.pure || o->mix.keep_output || o->mix.output_type >= 0 ||
                          o->mix.embd_type >= 0 || o->force),
          "--eval-only takes only --eval, --eval-ctx, --eval-chunks, --kernel, --json, -t, -q, -v" },
        { !r.ft && !meth && !r.eval_only, "missing --type or --method" },
        { r.ft && meth, "--type and --method exclude each other" },
        { (grid_opt || gptq_opt) && !meth, "--bits, --group-size, --format ... need --method" },
        { gptq_opt && !gptq, "--act-order, --static-groups, --damp and --resume need --method gptq" },
        { gptq && !r.calib, "--method gptq needs --calib" },
        { awq && !r.calib, "--method awq needs --calib" },
        { meth && !gptq && !awq && r.calib, "--method rtn takes no --calib" },
        { awq && sym_set, "--method awq quantizes with a zero point per group: no --sym" },
        { awq && g->mse, "--mse is GPTQ's and RTN's scale search: --method awq searches its own" },
        { sym_set && asym_set, "--sym and --asym exclude each other" },
        { meth && gptq_check_opts(g, &gd) < 0, gd.msg },
        { meth && (r.imatrix_in || r.imatrix_out || n_ov || n_inc || n_exc || o->mix.pure ||
                   o->mix.keep_output || o->mix.output_type >= 0 || o->mix.embd_type >= 0),
          "--method takes none of the llama.cpp type options (--imatrix, --tensor-type, --pure ...)" },
        { meth && in_stream, "--method reads INPUT twice: it must be a file, not '-', a pipe or a device" },
        { meth && r.format != QF_GGUF && !strcmp(argv[1], "-"),
          "--format gptq/gptq_v2/awq writes a directory: OUTPUT cannot be '-'" },
        { r.eval && meth && r.format != QF_GGUF, "--eval needs --format gguf" },
        { r.resume && !strcmp(argv[1], "-"), "--resume needs OUTPUT as a file, not '-'" },
        { r.imatrix_in && r.calib, "--imatrix and --calib exclude each other" },
        { r.imatrix_out && !r.calib, "--imatrix-out needs --calib" },
        { (n_inc || n_exc) && !r.imatrix_in && !r.calib,
          "--include-weights/--exclude-weights need an importance matrix" },
        { n_inc && n_exc, "--include-weights and --exclude-weights exclude each other" },
        { (r.calib || r.eval) && in_stream,
          "--calib and --eval read INPUT twice: it must be a file, not '-', a pipe or a device" },
        { r.eval && !strcmp(argv[1], "-"), "--eval needs OUTPUT as a file, not '-'" },
        { r.json && !strcmp(argv[1], "-"), "--json writes to stdout: OUTPUT cannot be '-'" },
    };
    cli_check_usage(usage_line, rules, sizeof(rules) / sizeof(rules[0]));
    const struct stdin_use in[] = {
        { "--imatrix", r.imatrix_in }, { "--calib", r.calib }, { "--eval", r.eval }, { "INPUT", argv[0] },
    };
    cli_check_stdin(usage_line, in, sizeof(in) / sizeof(in[0]));
    o->input = argv[0];
    o->output = argv[1];
    o->mix.ftype = r.ft ? r.ft->ftype : 0;
    o->mix.ov = ov;
    o->mix.n_ov = n_ov;
    r.inc = inc;
    r.n_inc = n_inc;
    r.exc = exc;
    r.n_exc = n_exc;
    if (r.json && tool_progress_mode < 0)
        tool_progress_mode = 0;     /* --json: bars only when asked for */
    if (!strcmp(o->input, "-") && isatty(STDIN_FILENO) && !o->force)
        die(RC_USAGE, "refusing to read binary input from a terminal (use -f to force)");
    if (!strcmp(o->output, "-") && isatty(STDOUT_FILENO) && !o->force)
        die(RC_USAGE, "refusing to write binary output to a terminal (use -f to force)");
    if (r.imatrix_out && !strcmp(r.imatrix_out, o->output))
        usage_error(usage_line, "'%s' is named for two outputs", o->output);
    /* a device or FIFO is written in place (xio.h): it cannot be read back */
    if (r.eval && stat(o->output, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
        usage_error(usage_line, "--eval reads OUTPUT back: it must be a file, not a device or FIFO");
    o->n_threads = cli_cap_threads(o->n_threads, oversubscribe);
    r.report = stdout;
    r.log = stderr;
    r.log_prefix = cli_progname;
    if ((rc = run_quantize(&r, &d)) < 0)
        die(rc_from_st(rc), "%s", d.msg);
    cli_finish_stdout();
    return RC_OK;
}
