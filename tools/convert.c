/*
 * convert - convert models between GGUF, Hugging Face directories and
 * llama2.c checkpoints, and describe them (--info).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert.h"
#include "eagle_hf.h"
#include "escape.h"
#include "qtypes.h"
#include "tool.h"
#include "tool_cb.h"

static const char usage_line[] =
    "usage: convert [-fhqvV] [--from fmt] [--to fmt] [--type type] [--tokenizer file]\n"
    "               [--shard-size size] [--base file] [--layout layout] [--verifier name]\n"
    "               [--[no-]progress] input output\n"
    "       convert --info [--json] [--from fmt] input";

static void
help(void)
{
    printf("%s\n\n", usage_line);
    fputs("Convert a model between formats, or describe it.\n"
          "Formats: gguf (GGUF v2/v3 file), hf (Hugging Face directory with config.json,\n"
          "safetensors and tokenizer files), llama2c (llama2.c .bin + tokenizer.bin, input only).\n"
          "The input format is detected from its contents; the output is GGUF when its name\n"
          "ends in .gguf or is '-', else a Hugging Face directory.\n\n"
          "EAGLE draft heads (GGUF from draft-train) convert to and from the published HF\n"
          "layout (config.json + model.safetensors), EAGLE-3 heads also to and from vLLM's\n"
          "speculators layout; importing one needs --base.\n\n"
          "      --base FILE        HF EAGLE head input: the base model GGUF it drafts for\n"
          "  -f, --force            replace an existing output; allow binary output to a terminal\n"
          "      --from FMT         input format: gguf, hf, llama2c (default: detect)\n"
          "  -h, --help             show this help and exit\n"
          "      --info             describe INPUT: metadata, tensors, totals, bits per weight\n"
          "      --json             with --info: JSON Lines (schema convert-info/1)\n"
          "      --layout LAYOUT    EAGLE head to HF: eagle (the EAGLE authors', default) or\n"
          "                         speculators (vLLM's speculators library; EAGLE-3 heads)\n"
          "      --no-progress      never show a progress bar\n"
          "      --progress         show a progress bar even when stderr is not a terminal\n"
          "  -q, --quiet            print no warnings\n"
          "      --shard-size SIZE  hf output: largest safetensors shard (default 5G; K/M/G suffixes)\n"
          "      --to FMT           output format: gguf or hf (default: from the output name)\n"
          "      --tokenizer FILE   llama2c input: tokenizer.bin (default: beside the checkpoint)\n"
          "      --type TYPE        tensor type of the output: f32, f16 or bf16 (quantized\n"
          "                         tensors are dequantized; 1-D tensors and norms stay f32)\n"
          "  -v, --verbose          say more about what is done\n"
          "      --verifier NAME    with --layout speculators: the target's HF id or path,\n"
          "                         written as the speculator's verifier (default: none)\n"
          "  -V, --version          print the version and exit\n\n"
          "Exit status: 0 ok, 1 failure, 2 usage, 3 bad input data, 4 I/O error, 5 out of memory.\n",
          stdout);
}

int
main(int argc, char **argv)
{
    enum { O_FROM = 256, O_TO, O_TYPE, O_TOKENIZER, O_SHARD, O_INFO, O_JSON, O_PROGRESS, O_NO_PROGRESS,
           O_BASE, O_LAYOUT, O_VERIFIER };
    static const struct option longopts[] = {
        {"base", required_argument, NULL, O_BASE},
        {"force", no_argument, NULL, 'f'},
        {"from", required_argument, NULL, O_FROM},
        {"help", no_argument, NULL, 'h'},
        {"info", no_argument, NULL, O_INFO},
        {"json", no_argument, NULL, O_JSON},
        {"layout", required_argument, NULL, O_LAYOUT},
        {"no-progress", no_argument, NULL, O_NO_PROGRESS},
        {"progress", no_argument, NULL, O_PROGRESS},
        {"quiet", no_argument, NULL, 'q'},
        {"shard-size", required_argument, NULL, O_SHARD},
        {"to", required_argument, NULL, O_TO},
        {"tokenizer", required_argument, NULL, O_TOKENIZER},
        {"type", required_argument, NULL, O_TYPE},
        {"verbose", no_argument, NULL, 'v'},
        {"verifier", required_argument, NULL, O_VERIFIER},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    struct convert_opts o = {.out_type = -1, .cb = tool_callbacks(true)};
    bool info = false;
    struct diag d = {{0}};
    int c, rc;

    cli_init(argv[0]);
    while ((c = cli_getopt(argc, argv, "fhqvV", longopts, usage_line)) != -1) {
        switch (c) {
        case 'f': o.force = true; break;
        case 'h': help(); cli_finish_stdout(); return RC_OK;
        case 'q': cli_verbosity = 0; break;
        case 'v': cli_verbosity = 2; break;
        case 'V': cli_exit_version("convert");
        case O_BASE: o.base = cli_path(usage_line, "--base", optarg); break;
        case O_LAYOUT:
            if (eagle_hf_layout_parse(optarg) < 0)
                usage_error(usage_line, "--layout: unknown layout '%s' (eagle, speculators)", ESC(optarg));
            o.layout = optarg;
            break;
        case O_FROM:
            if ((o.from = model_fmt_parse(optarg)) == FMT_AUTO)
                usage_error(usage_line, "--from: unknown format '%s' (gguf, hf, llama2c)", ESC(optarg));
            break;
        case O_TO:
            if ((o.to = model_fmt_parse(optarg)) == FMT_AUTO || o.to == FMT_LLAMA2C)
                usage_error(usage_line, "--to: unknown output format '%s' (gguf, hf)", ESC(optarg));
            break;
        case O_TYPE:
            o.out_type = qtype_by_name(optarg);
            if (o.out_type != GGML_TYPE_F32 && o.out_type != GGML_TYPE_F16 && o.out_type != GGML_TYPE_BF16)
                usage_error(usage_line, "--type: '%s' is not f32, f16 or bf16 (use quantize for other types)",
                            ESC(optarg));
            break;
        case O_TOKENIZER: o.tokenizer = cli_path(usage_line, "--tokenizer", optarg); break;
        case O_VERIFIER:
            if (!*optarg)
                usage_error(usage_line, "--verifier: empty name");
            o.verifier = optarg;
            break;
        case O_SHARD: o.shard_size = (uint64_t)cli_parse_i64(optarg, 1, INT64_MAX, "--shard-size", true); break;
        case O_INFO: info = true; break;
        case O_JSON: o.json = true; break;
        case O_PROGRESS: tool_progress_mode = 1; break;
        case O_NO_PROGRESS: tool_progress_mode = 0; break;
        default: cli_exit_usage(usage_line);
        }
    }
    argc -= optind;
    argv += optind;
    if (info) {
        if (argc != 1)
            usage_error(usage_line, argc ? "--info takes one input" : "missing input");
        if (o.base || o.layout || o.verifier)
            usage_error(usage_line, "--%s goes with a conversion, not --info",
                        o.base ? "base" : o.layout ? "layout" : "verifier");
        o.info = stdout;
    } else {
        if (o.json)
            usage_error(usage_line, "--json goes with --info");
        if (argc != 2)
            usage_error(usage_line, argc < 2 ? "missing %s" : "too many operands%s",
                        argc == 0 ? "input and output" : argc == 1 ? "output" : "");
        o.output = cli_path(usage_line, "OUTPUT", argv[1]);
    }
    o.input = cli_path(usage_line, "INPUT", argv[0]);
    const struct stdin_use in[] = {
        { "INPUT", o.input }, { "--tokenizer", o.tokenizer }, { "--base", o.base },
    };
    cli_check_stdin(usage_line, in, sizeof(in) / sizeof(in[0]));
    if (!strcmp(o.input, "-") && isatty(STDIN_FILENO) && !o.force)
        die(RC_USAGE, "refusing to read binary input from a terminal (use -f to force)");
    if (!info && !strcmp(o.output, "-") && isatty(STDOUT_FILENO) && !o.force)
        die(RC_USAGE, "refusing to write binary output to a terminal (use -f to force)");
    rc = run_convert(&o, &d);
    if (rc && info && ferror(stdout))   /* the output failed, not the input */
        die(RC_IO, "stdout: %s", ESC(d.msg));
    if (rc && info)
        die(rc_from_st(rc), "'%s': %s", ESC(o.input), ESC(d.msg));
    if (rc)
        die(rc_from_st(rc), "%s", ESC(d.msg));
    cli_finish_stdout();
    return RC_OK;
}
