/*
 * quantize - quantize a GGUF model with llama.cpp's types and mixes (bytes
 * identical to llama-quantize's), optionally with an importance matrix read
 * from a file or collected from calibration text, and report what it cost.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cli.h"
#include "imatrix.h"
#include "qeval.h"
#include "qtypes.h"
#include "quantize.h"
#include "xio.h"

static const char usage_line[] =
    "usage: quantize [-fhqvV] --type type [-t threads] [--oversubscribe]\n"
    "                [--tensor-type pattern=type] [--pure] [--keep-output]\n"
    "                [--output-type type] [--embd-type type]\n"
    "                [--imatrix file | --calib file [--calib-ctx n] [--calib-chunks n]]\n"
    "                [--include-weights s] [--exclude-weights s] [--imatrix-out file]\n"
    "                [--imatrix-format gguf|dat] [--eval file [--eval-ctx n] [--eval-chunks n]]\n"
    "                [--kernel name] [--json] [--[no-]progress] input output";

#define MAX_LIST 64

static void
help(void)
{
    size_t n;
    const struct quant_ftype *ft = quant_ftype_list(&n);

    printf("%s\n\n", usage_line);
    fputs("Quantize the GGUF model INPUT into OUTPUT ('-' = stdin/stdout) with llama.cpp's\n"
          "types and mixes; the tensor data is byte for byte what llama-quantize writes.\n\n"
          "      --calib FILE         collect an importance matrix from this text ('-' = stdin)\n"
          "      --calib-chunks N     calibration chunks (default: all)\n"
          "      --calib-ctx N        tokens per calibration chunk (default 512)\n"
          "      --embd-type TYPE     type of token_embd.weight\n"
          "      --eval FILE          compare base and quantized model on this text: perplexity,\n"
          "                           KL divergence, top-1 agreement (OUTPUT must be a file)\n"
          "      --eval-chunks N      evaluation chunks (default: all)\n"
          "      --eval-ctx N         tokens per evaluation chunk (default 512)\n"
          "      --exclude-weights S  ignore imatrix entries whose name contains S (repeatable)\n"
          "  -f, --force              replace an existing output; allow binary output to a terminal\n"
          "  -h, --help               show this help and exit\n"
          "      --imatrix FILE       importance matrix: llama.cpp GGUF or legacy .dat\n"
          "      --imatrix-format F   gguf (default) or dat for --imatrix-out\n"
          "      --imatrix-out FILE   write the importance matrix collected with --calib\n"
          "      --include-weights S  use only imatrix entries whose name contains S (repeatable)\n"
          "      --json               JSON Lines on stdout (schema quantize/1): tensors, summary, eval\n"
          "      --keep-output        leave output.weight as it is\n"
          "      --kernel NAME        compute kernels for --calib/--eval: auto, avx512, avx2, ref\n"
          "                           (default $LLMKIT_KERNEL or auto)\n"
          "      --no-progress        never show a progress bar\n"
          "      --output-type TYPE   type of output.weight (and of a tied token_embd.weight)\n"
          "      --progress           show a progress bar even when stderr is not a terminal\n"
          "      --pure               no mix: every quantizable tensor gets the type's default\n"
          "  -q, --quiet              print no warnings\n"
          "  -t, --threads N          worker threads (default: all CPUs; at most the CPUs this\n"
          "                           process may use, unless --oversubscribe)\n"
          "      --oversubscribe      keep -t N even above the CPUs this process may use\n"
          "      --tensor-type P=T    tensors whose name matches the regular expression P get\n"
          "                           type T (repeatable; first match wins)\n"
          "      --type NAME          file type (below); required\n"
          "  -v, --verbose            list every tensor on stderr\n"
          "  -V, --version            print the version and exit\n\n"
          "File types (--type):\n", stdout);
    for (size_t i = 0; i < n; i++)
        printf("  %-7s %2u  %s\n", ft[i].name, ft[i].ftype, ft[i].desc);
    fputs("  aliases: Q3_K = Q3_K_M, Q4_K = Q4_K_M, Q5_K = Q5_K_M\n"
          "Tensor types (--tensor-type, --output-type, --embd-type): Q4_0 Q4_1 Q5_0 Q5_1 Q8_0\n"
          "  Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS F16 BF16 F32\n\n"
          "Exit status: 0 ok, 1 failure, 2 usage, 3 bad input data, 4 I/O error, 5 out of memory.\n",
          stdout);
}

static void
warn_cb(const char *msg)
{
    warnmsg("%s", msg);
}

static struct progress pbar;
static int progress_mode = -1;

static void
progress_cb(void *ctx, int64_t done, int64_t total)
{
    if (done == 0)
        progress_begin(&pbar, progress_mode, (const char *)ctx, (uint64_t)total);
    progress_update(&pbar, (uint64_t)done);
    if (done == total)
        progress_end(&pbar);
}

static int
parse_type(const char *s, const char *what)
{
    int t = quant_tensor_type_parse(s);
    if (t < 0)
        usage_error(usage_line, "%s: unknown or unsupported tensor type '%s'", what, s);
    return t;
}

static char *
file_sha256(const char *path)
{
    struct diag d;
    char *buf, *hex = malloc(65);
    size_t len;

    if (!hex || read_file_all(path, (size_t)1 << 34, &buf, &len, &d) < 0) {
        free(hex);
        return NULL;
    }
    if (quantize_sha256_hex(buf, len, hex) < 0) {
        free(hex);
        hex = NULL;
    }
    free(buf);
    return hex;
}

static void
print_json_tensor(const struct quantize_tensor_info *t)
{
    json_t *j = json_object(), *ne = json_array();

    for (uint32_t k = 0; k < t->n_dims; k++)
        json_array_append_new(ne, json_integer(t->ne[k]));
    json_object_set_new(j, "schema", json_string("quantize/1"));
    json_object_set_new(j, "type", json_string("tensor"));
    json_object_set_new(j, "name", json_string(t->name));
    json_object_set_new(j, "ggml_type", json_string(qtype_get(t->type)->name));
    json_object_set_new(j, "src_type", json_string(qtype_get(t->src_type)->name));
    json_object_set_new(j, "ne", ne);
    json_object_set_new(j, "bytes", json_integer((json_int_t)t->bytes));
    json_object_set_new(j, "fallback", json_boolean(t->fallback));
    json_object_set_new(j, "imatrix", json_boolean(t->used_imatrix));
    json_object_set_new(j, "sha256", json_string(t->sha256));
    json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
    fputc('\n', stdout);
    json_decref(j);
}

int
main(int argc, char **argv)
{
    enum { O_TYPE = 256, O_TT, O_PURE, O_KEEP, O_OTYPE, O_ETYPE, O_IMATRIX, O_CALIB, O_CCTX, O_CCHUNKS,
           O_INC, O_EXC, O_IMOUT, O_IMFMT, O_EVAL, O_ECTX, O_ECHUNKS, O_KERNEL, O_JSON, O_PROG, O_NOPROG,
           O_OVERSUB };
    static const struct option longopts[] = {
        {"calib", required_argument, NULL, O_CALIB},
        {"calib-chunks", required_argument, NULL, O_CCHUNKS},
        {"calib-ctx", required_argument, NULL, O_CCTX},
        {"embd-type", required_argument, NULL, O_ETYPE},
        {"eval", required_argument, NULL, O_EVAL},
        {"eval-chunks", required_argument, NULL, O_ECHUNKS},
        {"eval-ctx", required_argument, NULL, O_ECTX},
        {"exclude-weights", required_argument, NULL, O_EXC},
        {"force", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {"imatrix", required_argument, NULL, O_IMATRIX},
        {"imatrix-format", required_argument, NULL, O_IMFMT},
        {"imatrix-out", required_argument, NULL, O_IMOUT},
        {"include-weights", required_argument, NULL, O_INC},
        {"json", no_argument, NULL, O_JSON},
        {"keep-output", no_argument, NULL, O_KEEP},
        {"kernel", required_argument, NULL, O_KERNEL},
        {"no-progress", no_argument, NULL, O_NOPROG},
        {"output-type", required_argument, NULL, O_OTYPE},
        {"progress", no_argument, NULL, O_PROG},
        {"pure", no_argument, NULL, O_PURE},
        {"quiet", no_argument, NULL, 'q'},
        {"tensor-type", required_argument, NULL, O_TT},
        {"oversubscribe", no_argument, NULL, O_OVERSUB},
        {"threads", required_argument, NULL, 't'},
        {"type", required_argument, NULL, O_TYPE},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct quantize_opts o = { .mix = { .output_type = -1, .embd_type = -1 }, .progress = -1,
                               .warn = warn_cb };
    struct quant_override ov[MAX_LIST];
    const char *inc[MAX_LIST], *exc[MAX_LIST];
    size_t n_ov = 0, n_inc = 0, n_exc = 0;
    const struct quant_ftype *ft = NULL;
    const char *imatrix_in = NULL, *calib = NULL, *imatrix_out = NULL, *eval = NULL, *kernel = NULL;
    int64_t calib_ctx = 512, calib_chunks = -1, eval_ctx = 512, eval_chunks = -1;
    bool json = false, dat = false, oversubscribe = false;
    struct imatrix im;
    struct quantize_report rep;
    struct qeval_result ev;
    struct diag d = {{0}};
    char *imx_sha = NULL, *cal_sha = NULL;
    struct xout outs[3] = { { 0 } };   /* stdout, --imatrix-out, OUTPUT */
    int c, rc;

    cli_init(argv[0]);
    imatrix_init(&im);
    while ((c = getopt_long(argc, argv, "fhqt:vV", longopts, NULL)) != -1) {
        switch (c) {
        case 'f': o.force = true; break;
        case 'h': help(); cli_finish_stdout(); return RC_OK;
        case 'q': cli_verbosity = 0; break;
        case 't': o.n_threads = (int)cli_parse_i64(optarg, 1, 1024, "--threads", false); break;
        case O_OVERSUB: oversubscribe = true; break;
        case 'v': cli_verbosity = 2; break;
        case 'V': printf("quantize (llmkit) %s\n", LLMKIT_VERSION); cli_finish_stdout(); return RC_OK;
        case O_TYPE:
            if (!(ft = quant_ftype_find(optarg)))
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
        case O_PURE: o.mix.pure = true; break;
        case O_KEEP: o.mix.keep_output = true; break;
        case O_OTYPE: o.mix.output_type = parse_type(optarg, "--output-type"); break;
        case O_ETYPE: o.mix.embd_type = parse_type(optarg, "--embd-type"); break;
        case O_IMATRIX: imatrix_in = optarg; break;
        case O_CALIB: calib = optarg; break;
        case O_CCTX: calib_ctx = cli_parse_i64(optarg, 16, 1 << 20, "--calib-ctx", false); break;
        case O_CCHUNKS: calib_chunks = cli_parse_i64(optarg, 1, INT32_MAX, "--calib-chunks", false); break;
        case O_INC:
        case O_EXC:
            if ((c == O_INC ? n_inc : n_exc) == MAX_LIST)
                usage_error(usage_line, "at most %d --include-weights/--exclude-weights", MAX_LIST);
            if (c == O_INC)
                inc[n_inc++] = optarg;
            else
                exc[n_exc++] = optarg;
            break;
        case O_IMOUT: imatrix_out = optarg; break;
        case O_IMFMT:
            if (strcmp(optarg, "gguf") && strcmp(optarg, "dat"))
                usage_error(usage_line, "--imatrix-format: '%s' is not gguf or dat", optarg);
            dat = !strcmp(optarg, "dat");
            break;
        case O_EVAL: eval = optarg; break;
        case O_ECTX: eval_ctx = cli_parse_i64(optarg, 4, 1 << 20, "--eval-ctx", false); break;
        case O_ECHUNKS: eval_chunks = cli_parse_i64(optarg, 1, INT32_MAX, "--eval-chunks", false); break;
        case O_KERNEL: kernel = optarg; break;
        case O_JSON: json = true; break;
        case O_PROG: progress_mode = 1; break;
        case O_NOPROG: progress_mode = 0; break;
        default: fprintf(stderr, "%s\n", usage_line); return RC_USAGE;
        }
    }
    argc -= optind;
    argv += optind;
    if (argc != 2)
        usage_error(usage_line, argc < 2 ? "missing %s" : "too many operands%s",
                    argc == 0 ? "input and output" : argc == 1 ? "output" : "");
    if (!ft)
        usage_error(usage_line, "missing --type");
    if (imatrix_in && calib)
        usage_error(usage_line, "--imatrix and --calib exclude each other");
    if (imatrix_out && !calib)
        usage_error(usage_line, "--imatrix-out needs --calib");
    if ((n_inc || n_exc) && !imatrix_in && !calib)
        usage_error(usage_line, "--include-weights/--exclude-weights need an importance matrix");
    if (n_inc && n_exc)
        usage_error(usage_line, "--include-weights and --exclude-weights exclude each other");
    if ((calib || eval) && !strcmp(argv[0], "-"))
        usage_error(usage_line, "--calib and --eval need INPUT as a file, not '-'");
    if (eval && !strcmp(argv[1], "-"))
        usage_error(usage_line, "--eval needs OUTPUT as a file, not '-'");
    if (json && !strcmp(argv[1], "-"))
        usage_error(usage_line, "--json writes to stdout: OUTPUT cannot be '-'");
    if (calib && eval && !strcmp(calib, "-") && !strcmp(eval, "-"))
        usage_error(usage_line, "--calib and --eval cannot both read stdin");
    o.input = argv[0];
    o.output = argv[1];
    o.mix.ftype = ft->ftype;
    o.mix.ov = ov;
    o.mix.n_ov = n_ov;
    if (json && progress_mode < 0)
        progress_mode = 0;      /* --json: bars only when asked for */
    o.progress = progress_mode;
    if (!strcmp(o.input, "-") && isatty(STDIN_FILENO) && !o.force)
        die(RC_USAGE, "refusing to read binary input from a terminal (use -f to force)");
    if (!strcmp(o.output, "-") && isatty(STDOUT_FILENO) && !o.force)
        die(RC_USAGE, "refusing to write binary output to a terminal (use -f to force)");
    /* Every output is opened now and committed together at the end (the
     * report on stdout first): a run that fails anywhere leaves none. */
    xio_note_input(o.input);
    xio_note_input(calib);
    xio_note_input(imatrix_in);
    xio_note_input(eval);
    if (imatrix_out && !strcmp(imatrix_out, o.output))
        usage_error(usage_line, "'%s' is named for two outputs", o.output);
    if ((rc = xout_open(&outs[2], o.output, o.force, &d)) < 0)
        die(rc_from_st(rc), "'%s': %s", o.output, d.msg);
    o.out = &outs[2];
    if (eval && !outs[2].tmp)
        usage_error(usage_line, "--eval reads OUTPUT back: it must be a file, not a device or FIFO");
    o.n_threads = cli_cap_threads(o.n_threads, oversubscribe);

    if (imatrix_in) {
        if ((rc = imatrix_read(&im, imatrix_in, &d)) < 0)
            die(rc_from_st(rc), "'%s': %s", imatrix_in, d.msg);
        if (!im.legacy && !im.has_metadata)
            die(RC_DATA, "'%s': missing imatrix metadata (imatrix.datasets, chunk_count, chunk_size)",
                imatrix_in);
        imx_sha = strcmp(imatrix_in, "-") ? file_sha256(imatrix_in) : NULL;
        o.imatrix_file = imatrix_in;
    } else if (calib) {
        struct imatrix_collect_opts co = { .ctx = calib_ctx, .max_chunks = calib_chunks, .bos = -1,
                                           .progress = progress_cb, .progress_ctx = "calibrating" };
        int64_t ntok = 0;
        if ((rc = imatrix_from_text(&im, o.input, calib, &co, o.n_threads, kernel, &ntok, &d)) < 0)
            die(rc_from_st(rc), "%s", d.msg);
        infomsg("'%s': %lld tokens, %lld chunks of %lld", calib, (long long)ntok,
                (long long)im.chunk_count, (long long)calib_ctx);
        cal_sha = strcmp(calib, "-") ? file_sha256(calib) : NULL;
        if (imatrix_out) {
            if ((rc = xout_open(&outs[1], imatrix_out, o.force, &d)) < 0 ||
                (rc = imatrix_write_fp(&im, outs[1].fp, dat, &d)) < 0)
                die(rc_from_st(rc), "'%s': %s", imatrix_out, d.msg);
            o.imatrix_file = imatrix_out;
        }
    }
    if (imatrix_in || calib) {
        imatrix_filter(&im, inc, n_inc, exc, n_exc);
        o.mix.has_imatrix = im.n > 0;
        o.imatrix = im.n ? &im : NULL;
        o.imatrix_sha256 = imx_sha;
        o.calib_sha256 = cal_sha;
    }
    if ((rc = quantize_model(&o, &rep, &d)) < 0)
        die(rc_from_st(rc), "%s", d.msg);
    for (size_t i = 0; i < rep.n; i++) {
        const struct quantize_tensor_info *t = &rep.t[i];
        if (json)
            print_json_tensor(t);
        infomsg("[%4zu/%4zu] %-32s %-6s -> %-6s %s%s", i + 1, rep.n, t->name,
                qtype_get(t->src_type)->name, qtype_get(t->type)->name,
                t->fallback ? " (fallback)" : "", t->used_imatrix ? " (imatrix)" : "");
    }
    if (rep.n_fallback)
        warnmsg("%d of %zu tensors needed a fallback type (rows not a multiple of the block size)",
                rep.n_fallback, rep.n);
    if (o.imatrix && rep.imatrix_missing)
        infomsg("%d quantized tensors had no imatrix entry", rep.imatrix_missing);
    if (eval) {
        struct qeval_opts eo = { eval_ctx, eval_chunks, o.n_threads, kernel, progress_cb, "evaluating" };
        /* the quantized model is read where it lies, not yet committed */
        if (outs[2].fp && fflush(outs[2].fp) != 0)
            die(RC_IO, "'%s': write failed:", o.output);
        if ((rc = qeval_run(o.input, outs[2].tmp ? outs[2].tmp : o.output, eval, &eo, &ev, &d)) < 0)
            die(rc_from_st(rc), "%s", d.msg);
    }
    {
        double bpw = rep.n_params ? 8.0 * (double)rep.out_bytes / (double)rep.n_params : 0.0;
        struct stat st;
        double in_mib = stat(o.input, &st) == 0 && S_ISREG(st.st_mode) ? (double)st.st_size / 1048576.0
                                                                        : (double)rep.src_bytes / 1048576.0;
        if (json) {
            json_t *j = json_object();
            json_object_set_new(j, "schema", json_string("quantize/1"));
            json_object_set_new(j, "type", json_string("summary"));
            json_object_set_new(j, "file_type", json_string(ft->name));
            json_object_set_new(j, "tensors", json_integer((json_int_t)rep.n));
            json_object_set_new(j, "params", json_integer((json_int_t)rep.n_params));
            json_object_set_new(j, "src_bytes", json_integer((json_int_t)rep.src_bytes));
            json_object_set_new(j, "tensor_bytes", json_integer((json_int_t)rep.out_bytes));
            json_object_set_new(j, "file_bytes", json_integer((json_int_t)rep.file_bytes));
            json_object_set_new(j, "bpw", json_real(bpw));
            json_object_set_new(j, "fallbacks", json_integer(rep.n_fallback));
            json_object_set_new(j, "imatrix_entries", json_integer((json_int_t)(o.imatrix ? im.n : 0)));
            json_object_set_new(j, "seconds", json_real(rep.seconds));
            if (eval) {
                json_object_set_new(j, "eval_ctx", json_integer(eval_ctx));
                json_object_set_new(j, "eval_chunks", json_integer(ev.n_chunks));
                json_object_set_new(j, "eval_scored", json_integer(ev.n_scored));
                json_object_set_new(j, "ppl_base", json_real(ev.ppl_base));
                json_object_set_new(j, "ppl_base_stderr", json_real(ev.ppl_base_err));
                json_object_set_new(j, "ppl_quant", json_real(ev.ppl_quant));
                json_object_set_new(j, "ppl_quant_stderr", json_real(ev.ppl_quant_err));
                json_object_set_new(j, "kld_mean", json_real(ev.kld_mean));
                json_object_set_new(j, "kld_median", json_real(ev.kld_median));
                json_object_set_new(j, "kld_p99", json_real(ev.kld_p99));
                json_object_set_new(j, "kld_max", json_real(ev.kld_max));
                json_object_set_new(j, "top1_agreement", json_real(ev.top1));
            }
            json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
            fputc('\n', stdout);
            json_decref(j);
        } else {
            (void)in_mib;
            fprintf(stderr, "%s: %s: %zu tensors, %.2f MiB -> %.2f MiB, %.4f bits per weight, %.2f s\n",
                    cli_progname, ft->name, rep.n, (double)rep.src_bytes / 1048576.0,
                    (double)rep.out_bytes / 1048576.0, bpw, rep.seconds);
            if (eval) {
                printf("%-22s %14s %14s\n", "", "base", ft->name);
                printf("%-22s %14.2f %14.2f\n", "file size (MiB)", in_mib,
                       (double)rep.file_bytes / 1048576.0);
                printf("%-22s %14.4f %14.4f\n", "bits per weight",
                       rep.n_params ? 8.0 * (double)rep.src_bytes / (double)rep.n_params : 0.0, bpw);
                printf("%-22s %14.4f %14.4f\n", "perplexity", ev.ppl_base, ev.ppl_quant);
                printf("%-22s %14.4f %14.4f\n", "  +/-", ev.ppl_base_err, ev.ppl_quant_err);
                printf("%-22s %14s %14.6f\n", "KL divergence mean", "", ev.kld_mean);
                printf("%-22s %14s %14.6f\n", "KL divergence median", "", ev.kld_median);
                printf("%-22s %14s %14.6f\n", "KL divergence p99", "", ev.kld_p99);
                printf("%-22s %14s %13.2f%%\n", "top-1 agreement", "", 100.0 * ev.top1);
                printf("%-22s %14lld %14lld\n", "chunks, scored tokens", (long long)ev.n_chunks,
                       (long long)ev.n_scored);
            }
        }
    }
    quantize_report_release(&rep);
    imatrix_release(&im);
    free(imx_sha);
    free(cal_sha);
    xout_open(&outs[0], "-", false, &d);
    if ((rc = xout_commit_all(outs, 3, &d)) < 0)
        die(rc_from_st(rc), "%s", d.msg);
    cli_finish_stdout();
    return RC_OK;
}
