/*
 * generate_opts.h - generate's usage line, --help text and option table
 * (tools/generate.c only; kept apart so that the main reads as what it
 * does with the options).
 */
#ifndef LLMKIT_GENERATE_OPTS_H
#define LLMKIT_GENERATE_OPTS_H

#include <getopt.h>

static const char usage_line[] =
    "usage: generate [-hqVv] -m model [-p text | -f file] [-n n] [-o file] [--force]\n"
    "                [--chat] [--system text] [--parse-special] [--temp t] [--top-k k]\n"
    "                [--top-p p] [--min-p p] [--repeat-penalty r] [--repeat-last-n n]\n"
    "                [--seed n] [-t n] [--oversubscribe] [--ctx n] [--kv-mem size]\n"
    "                [--kernel name] [--device name] [--lookup [--lookup-ngram n] |\n"
    "                --draft model [--spec-depth n] [--spec-width n] [--draft-p-min p] |\n"
    "                --draft-head head [--spec-depth n] [--spec-width n] [--draft-p-min p]]\n"
    "                [--spec-tokens n|auto] [--spec-compare] [--json [--top-logits n]]\n"
    "       generate [-hqVv] -m model --batch [file | -] [-o file] [--force] [-n n]\n"
    "                [--max-seqs n] [--max-batch-tokens n] [--kv-mem size] [--block-size n]\n"
    "                [--kv-type type] [--schedule policy] [--preempt mode] [--no-prefix-cache]\n"
    "                [--kv-trace file] [--drain-timeout seconds] [--chat] [--system text]\n"
    "                [--parse-special] [--ignore-eos] [sampling options] [-t n]\n"
    "                [--oversubscribe] [--ctx n] [--kernel name] [--device name]\n"
    "                [--shard i/n] [--shard-by index|id] [--resume file] [--sync-lines n]\n"
    "                [--sync-seconds s] [--lookup [--lookup-ngram n] | --draft model |\n"
    "                --draft-head head] [--draft-p-min p] [--spec-tokens n|auto]\n"
    "       generate [-hqVv] --merge requests [-o file] [--force] results ...\n"
    "       generate [-hqVv] -m model --perplexity file [--ctx n] [--chunks n] [-o file]\n"
    "                [--force] [-t n] [--oversubscribe] [--kv-mem size] [--kernel name]\n"
    "                [--device name] [--json]\n"
    "       generate [-hqVv] -m model --tokenize | --count | --detokenize [-p text | -f file]\n"
    "                [--no-bos] [--no-parse-special] [-o file] [--force] [--json]";

static const char help_text[] =
    "generate - text generation and perplexity with a GGUF model\n"
    "\n"
    "Input:\n"
    "  -m, --model FILE        GGUF model (llama, qwen2, qwen3, gemma3)\n"
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
    "Speculative decoding (the output is plain decoding's, token for token):\n"
    "      --lookup            draft from the prompt and the output so far: the tokens\n"
    "                          that followed the last earlier occurrence of the longest\n"
    "                          matching n-gram, verified in one forward pass (also\n"
    "                          per sequence with --batch)\n"
    "      --lookup-ngram N    longest n-gram matched, 1..16 (default 3)\n"
    "      --draft FILE        draft with a smaller GGUF model of the same vocabulary\n"
    "                          (e.g. this model at fewer bits): greedy, a token tree\n"
    "                          (chains per sequence with --batch)\n"
    "      --draft-head FILE   draft with an EAGLE head made by draft-train for this model:\n"
    "                          EAGLE-2 dynamic trees from the model's own features\n"
    "                          (greedy chains per sequence with --batch)\n"
    "      --spec-depth N      --draft, --draft-head: tree levels at most, 1..64 (default 8)\n"
    "      --spec-width N      --draft: branches per level; --draft-head: children per\n"
    "                          node, 1..16 (default 1: a chain)\n"
    "      --draft-p-min P     --draft: stop the chain where the draft's best token has\n"
    "                          probability < P (default 0.5); --draft-head: drop tree\n"
    "                          nodes whose path probability is < P (default 0)\n"
    "      --spec-tokens N|auto  draft tokens per verify pass, 1..64; auto (the default):\n"
    "                          the size that maximises the expected tokens per second,\n"
    "                          from the verify pass's cost measured at the start and\n"
    "                          the drafts kept so far\n"
    "      --spec-compare      also decode plainly first (silently): exit 6 unless the\n"
    "                          tokens are the same; report the speedup\n"
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
    "      --drain-timeout S   after SIGINT/TERM/HUP, let the started requests run\n"
    "                          at most S seconds more, then end them as \"cancelled\"\n"
    "                          (default 30; 0 = at once)\n"
    "      --shard I/N         do only shard I of N (from 0): request k (from 0) when\n"
    "                          k mod N = I; every shard reads the whole file\n"
    "      --shard-by index|id  k as above, or a hash of the request's id (default index)\n"
    "      --resume FILE       append the results to FILE (created if absent) as they\n"
    "                          finish, skipping requests that have a result there\n"
    "      --sync-lines N      --resume: fsync FILE every N results (default 32) ...\n"
    "      --sync-seconds S    ... or S seconds after the last fsync (default 5)\n"
    "      Per request: id, prompt | tokens, max_tokens, temperature, top_p, top_k, min_p,\n"
    "      repeat_penalty, seed, stop (defaults: the options above and below)\n"
    "\n"
    "Merge (the results of the shards of one --batch job):\n"
    "      --merge REQUESTS    check that every request of REQUESTS has exactly one\n"
    "                          result in the results files given as operands, and\n"
    "                          write them in request order (exit 6 and the missing\n"
    "                          ids when not)\n"
    "\n"
    "Perplexity:\n"
    "      --perplexity FILE   perplexity of FILE the way llama-perplexity computes it\n"
    "      --chunks N          evaluate at most N chunks of --ctx tokens (default all)\n"
    "\n"
    "Tokenizer (the vocabulary only: no weights are read):\n"
    "      --tokenize          the ids of the text of -p, -f or stdin (taken as it is),\n"
    "                          one per line; with --json also each token's piece and\n"
    "                          byte offset and length in the text\n"
    "      --count             only the number of tokens, like wc\n"
    "      --detokenize        the text of the ids (numbers separated by spaces, commas,\n"
    "                          newlines or brackets) of -p, -f or stdin\n"
    "      --no-bos            tokenize: add no BOS/EOS; detokenize: keep them\n"
    "      --no-parse-special  tokenize: control-token texts stay text; detokenize:\n"
    "                          control tokens print nothing\n"
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
    "      --device NAME       cpu (default) or cuda (GPU 0; exit 5 when none is usable)\n"
    "\n"
    "Output:\n"
    "  -o, --output FILE       write to FILE atomically (default stdout, streamed)\n"
    "      --force             replace an existing output FILE\n"
    "      --json              one JSON object, schema generate/1\n"
    "      --top-logits N      --json: also the N largest raw logits (1..64) of the step\n"
    "                          that chose each generated token, as [id, logit] pairs\n"
    "  -q, --quiet             no statistics, warnings or progress on stderr\n"
    "  -v, --verbose           more messages\n"
    "  -h, --help              this help\n"
    "  -V, --version           print the version\n";

enum {
    OPT_CHAT = 256, OPT_CHUNKS, OPT_CTX, OPT_FORCE, OPT_IGNORE_EOS, OPT_JSON, OPT_KERNEL, OPT_KV_MEM,
    OPT_MIN_P, OPT_PERPLEXITY, OPT_REPEAT_LAST_N, OPT_REPEAT_PENALTY, OPT_SEED, OPT_SYSTEM, OPT_TEMP,
    OPT_TOP_K, OPT_TOP_P, OPT_BATCH, OPT_OVERSUBSCRIBE, OPT_PARSE_SPECIAL, OPT_DEVICE, OPT_LOOKUP,
    OPT_LOOKUP_NGRAM, OPT_SPEC_TOKENS, OPT_DRAFT, OPT_DRAFT_HEAD, OPT_SPEC_DEPTH, OPT_SPEC_WIDTH, OPT_DRAFT_P_MIN,
    OPT_SPEC_COMPARE, OPT_MERGE, OPT_TOP_LOGITS,
    /* the options that need --batch, together */
    OPT_BLOCK_SIZE, OPT_DRAIN_TIMEOUT, OPT_KV_TRACE, OPT_KV_TYPE, OPT_MAX_BATCH_TOKENS,
    OPT_MAX_SEQS, OPT_NO_PREFIX_CACHE, OPT_PREEMPT, OPT_RESUME, OPT_SHARD, OPT_SHARD_BY,
    OPT_SYNC_LINES, OPT_SYNC_SECONDS, OPT_SCHEDULE,
};

/* --tokenize and its options (gentok.h), together */
enum { OPT_TOKENIZE = 512, OPT_COUNT, OPT_DETOKENIZE, OPT_NO_BOS, OPT_NO_PARSE_SPECIAL };

static const struct option longopts[] = {
    { "batch", no_argument, NULL, OPT_BATCH },
    { "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
    { "chat", no_argument, NULL, OPT_CHAT },
    { "chunks", required_argument, NULL, OPT_CHUNKS },
    { "ctx", required_argument, NULL, OPT_CTX },
    { "device", required_argument, NULL, OPT_DEVICE },
    { "draft", required_argument, NULL, OPT_DRAFT },
    { "draft-head", required_argument, NULL, OPT_DRAFT_HEAD },
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
    { "top-logits", required_argument, NULL, OPT_TOP_LOGITS },
    { "top-p", required_argument, NULL, OPT_TOP_P },
    { "verbose", no_argument, NULL, 'v' },
    { "version", no_argument, NULL, 'V' },
    /* --tokenize and its options */
    { "count", no_argument, NULL, OPT_COUNT },
    { "detokenize", no_argument, NULL, OPT_DETOKENIZE },
    { "no-bos", no_argument, NULL, OPT_NO_BOS },
    { "no-parse-special", no_argument, NULL, OPT_NO_PARSE_SPECIAL },
    { "tokenize", no_argument, NULL, OPT_TOKENIZE },
    { NULL, 0, NULL, 0 },
};

#endif
