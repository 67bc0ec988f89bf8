/*
 * quantize_opts.h - quantize's usage line, --help text and option table
 * (tools/quantize.c only; kept apart so that the main reads as what it does
 * with the options).
 */
#ifndef LLMKIT_QUANTIZE_OPTS_H
#define LLMKIT_QUANTIZE_OPTS_H

#include <getopt.h>
#include <stdio.h>

#include "quantize_run.h"

static const char usage_line[] =
    "usage: quantize [-fhqvV] --type type | --method gptq|awq|rtn [-t threads] [--oversubscribe]\n"
    "                [--bits n] [--group-size n] [--sym | --asym] [--act-order]\n"
    "                [--static-groups] [--damp f] [--mse] [--resume]\n"
    "                [--format gguf|gptq|gptq_v2|awq]\n"
    "                [--tensor-type pattern=type] [--pure] [--keep-output]\n"
    "                [--output-type type] [--embd-type type]\n"
    "                [--imatrix file | --calib file [--calib-ctx n] [--calib-chunks n]]\n"
    "                [--include-weights s] [--exclude-weights s] [--imatrix-out file]\n"
    "                [--imatrix-format gguf|dat] [--eval file [--eval-ctx n] [--eval-chunks n]]\n"
    "                [--eval-only]\n"
    "                [--kernel name] [--json] [--[no-]progress] input output";

static void
help(void)
{
    size_t n;
    const struct quant_ftype *ft = quant_ftype_list(&n);

    printf("%s\n\n", usage_line);
    fputs("Quantize the GGUF model INPUT into OUTPUT ('-' = stdin/stdout) with llama.cpp's\n"
          "types and mixes; the tensor data is byte for byte what llama-quantize writes.\n"
          "Or with a grid method (--method): GPTQ or AWQ calibrated on --calib text, or RTN,\n"
          "written as GGUF or as a GPTQ/AWQ Hugging Face directory (--format).\n\n"
          "      --act-order          GPTQ: columns by decreasing Hessian diagonal (desc_act)\n"
          "      --asym               asymmetric grid: a zero point per group (default)\n"
          "      --bits N             grid bits: 2, 3, 4 (default) or 8\n"
          "      --calib FILE         collect an importance matrix from this text ('-' = stdin)\n"
          "      --calib-chunks N     calibration chunks (default: all)\n"
          "      --calib-ctx N        tokens per calibration chunk (default 512)\n"
          "      --damp F             GPTQ: damping, fraction of the mean Hessian diagonal,\n"
          "                           0 < F < 1 (default 0.01; raised by 0.01 while H is not\n"
          "                           positive definite)\n"
          "      --embd-type TYPE     type of token_embd.weight\n"
          "      --eval FILE          compare base and quantized model on this text: perplexity,\n"
          "                           KL divergence, top-1 agreement (OUTPUT must be a file)\n"
          "      --eval-chunks N      evaluation chunks (default: all)\n"
          "      --eval-ctx N         tokens per evaluation chunk (default 512)\n"
          "      --eval-only          quantize nothing: evaluate the existing GGUF OUTPUT against\n"
          "                           INPUT (needs --eval; no --type or --method)\n"
          "      --exclude-weights S  ignore imatrix entries whose name contains S (repeatable)\n"
          "  -f, --force              replace an existing output; allow binary output to a terminal\n"
          "      --format F           gguf (default), gptq, gptq_v2 or awq (HF directory)\n"
          "      --group-size N       columns per group: 16, 32, 64, 128 (default) .. 1024, or\n"
          "                           -1 (one group per row)\n"
          "  -h, --help               show this help and exit\n"
          "      --imatrix FILE       importance matrix: llama.cpp GGUF or legacy .dat\n"
          "      --imatrix-format F   gguf (default) or dat for --imatrix-out\n"
          "      --imatrix-out FILE   write the importance matrix collected with --calib\n"
          "      --include-weights S  use only imatrix entries whose name contains S (repeatable)\n"
          "      --json               JSON Lines on stdout (schema quantize/1): tensors, summary, eval\n"
          "      --keep-output        leave output.weight as it is\n"
          "      --method M           gptq, awq or rtn instead of --type\n"
          "      --mse                search each group's scale for the least |error|^2.4\n"
          "      --kernel NAME        compute kernels for --calib/--eval: auto, avx512, avx2, ref\n"
          "                           (default $LLMKIT_KERNEL or auto)\n"
          "      --no-progress        never show a progress bar\n"
          "      --output-type TYPE   type of output.weight (and of a tied token_embd.weight)\n"
          "      --progress           show a progress bar even when stderr is not a terminal\n"
          "      --pure               no mix: every quantizable tensor gets the type's default\n"
          "  -q, --quiet              print no warnings\n"
          "      --resume             GPTQ: keep finished blocks in OUTPUT.ckpt and take them up\n"
          "                           when run again (same bits as an uninterrupted run)\n"
          "      --static-groups      GPTQ: group parameters fixed before the column loop\n"
          "      --sym                symmetric grid (zero at 2^(bits-1))\n"
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

enum { O_TYPE = 256, O_TT, O_PURE, O_KEEP, O_OTYPE, O_ETYPE, O_IMATRIX, O_CALIB, O_CCTX, O_CCHUNKS,
       O_INC, O_EXC, O_IMOUT, O_IMFMT, O_EVAL, O_ECTX, O_ECHUNKS, O_KERNEL, O_JSON, O_PROG, O_NOPROG,
       O_OVERSUB, O_METHOD, O_FORMAT, O_BITS, O_GS, O_SYM, O_ASYM, O_ACT, O_STATIC, O_DAMP, O_MSE,
       O_RESUME, O_EVONLY };
static const struct option longopts[] = {
    {"act-order", no_argument, NULL, O_ACT},
    {"asym", no_argument, NULL, O_ASYM},
    {"bits", required_argument, NULL, O_BITS},
    {"calib", required_argument, NULL, O_CALIB},
    {"calib-chunks", required_argument, NULL, O_CCHUNKS},
    {"calib-ctx", required_argument, NULL, O_CCTX},
    {"damp", required_argument, NULL, O_DAMP},
    {"embd-type", required_argument, NULL, O_ETYPE},
    {"eval", required_argument, NULL, O_EVAL},
    {"eval-chunks", required_argument, NULL, O_ECHUNKS},
    {"eval-ctx", required_argument, NULL, O_ECTX},
    {"eval-only", no_argument, NULL, O_EVONLY},
    {"exclude-weights", required_argument, NULL, O_EXC},
    {"force", no_argument, NULL, 'f'},
    {"format", required_argument, NULL, O_FORMAT},
    {"group-size", required_argument, NULL, O_GS},
    {"help", no_argument, NULL, 'h'},
    {"imatrix", required_argument, NULL, O_IMATRIX},
    {"imatrix-format", required_argument, NULL, O_IMFMT},
    {"imatrix-out", required_argument, NULL, O_IMOUT},
    {"include-weights", required_argument, NULL, O_INC},
    {"json", no_argument, NULL, O_JSON},
    {"keep-output", no_argument, NULL, O_KEEP},
    {"kernel", required_argument, NULL, O_KERNEL},
    {"method", required_argument, NULL, O_METHOD},
    {"mse", no_argument, NULL, O_MSE},
    {"no-progress", no_argument, NULL, O_NOPROG},
    {"output-type", required_argument, NULL, O_OTYPE},
    {"progress", no_argument, NULL, O_PROG},
    {"pure", no_argument, NULL, O_PURE},
    {"quiet", no_argument, NULL, 'q'},
    {"resume", no_argument, NULL, O_RESUME},
    {"static-groups", no_argument, NULL, O_STATIC},
    {"sym", no_argument, NULL, O_SYM},
    {"tensor-type", required_argument, NULL, O_TT},
    {"oversubscribe", no_argument, NULL, O_OVERSUB},
    {"threads", required_argument, NULL, 't'},
    {"type", required_argument, NULL, O_TYPE},
    {"verbose", no_argument, NULL, 'v'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

#endif
