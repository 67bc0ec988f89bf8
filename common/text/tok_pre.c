/*
 * tok_pre.c - the pre-tokenizer table (tok_pre.h).
 *
 * The llama.cpp side is llama.cpp's llama_vocab::impl::load and
 * llm_tokenizer_bpe; tok_bpe.c translates the regexes for PCRE2.  Names that
 * need regexes with \p{S} (whose ASCII members llama.cpp lists differently
 * from Unicode), custom matchers (kimi-k2, afmoe, superbpe) or a non-byte
 * encoding (gemma4) are not here, and fail to load.
 *
 * The HF side is the pre_tokenizer of each family's tokenizer.json (the
 * models llama.cpp's convert_hf_to_gguf_update.py lists for the name), as HF
 * tokenizers spells it.  A name has one only where its split was checked to
 * be the same (tokenizer.json files exported from llama.cpp's vocabulary
 * tests reproduce its test vectors with HF tokenizers); rows are split where
 * that holds for some names of a llama.cpp family and not others.
 */
#include "tok_pre.h"

#include <string.h>

/* ---- llama.cpp's regexes ---- */

#define CONTRACTIONS TOK_PRE_CONTRACTIONS
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* " ?[^(\s|.,!?…。，、।۔،)]+" */
#define RE_PORO " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" \
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+" \
    CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*" \
    CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_SEED CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}" \
    "| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BAILING "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+" \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define RE_UFAKZEKA "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_MINICPM5 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* ---- HF pre_tokenizers ---- */

#define HF_RE_LLAMA3 TOK_PRE_HF_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define HF_RE_QWEN2 TOK_PRE_HF_CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" \
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

enum { HF_GPT2, HF_LLAMA3, HF_QWEN2, HF_SMOLLM, HF_DEEPSEEK_CODER, HF_FALCON, HF_DEFAULT, N_HF };

/* In matching order; GPT-2's first, the fallback for names without one. */
static const struct tok_pre_hf hf_pre[N_HF] = {
    [HF_GPT2] = { "gpt-2", false, 1, { { TOK_PRE_HF_BYTELEVEL, NULL, 1 } } },
    [HF_LLAMA3] = { "llama-bpe", true, 2,
        { { TOK_PRE_HF_SPLIT, HF_RE_LLAMA3, 0 }, { TOK_PRE_HF_BYTELEVEL, NULL, 0 } } },
    [HF_QWEN2] = { "qwen2", false, 2,
        { { TOK_PRE_HF_SPLIT, HF_RE_QWEN2, 0 }, { TOK_PRE_HF_BYTELEVEL, NULL, 0 } } },
    [HF_SMOLLM] = { "smollm", false, 2,
        { { TOK_PRE_HF_DIGITS, NULL, 1 }, { TOK_PRE_HF_BYTELEVEL, NULL, 1 } } },
    [HF_DEEPSEEK_CODER] = { "deepseek-coder", false, 6,
        { { TOK_PRE_HF_SPLIT, "[\r\n]", 0 }, { TOK_PRE_HF_SPLIT, "\\s?\\p{L}+", 0 },
          { TOK_PRE_HF_SPLIT, "\\s?\\p{P}+", 0 },
          { TOK_PRE_HF_SPLIT,
            "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+", 0 },
          { TOK_PRE_HF_DIGITS, NULL, 1 }, { TOK_PRE_HF_BYTELEVEL, NULL, 0 } } },
    [HF_FALCON] = { "falcon", false, 4,
        { { TOK_PRE_HF_PUNCT, NULL, 0 }, { TOK_PRE_HF_BYTELEVEL, NULL, 1 },
          { TOK_PRE_HF_DIGITS, NULL, 0 }, { TOK_PRE_HF_SPLIT, "[0-9][0-9][0-9]", 0 } } },
    /* llama.cpp's own DEFAULT regexes, spelled as HF Splits */
    [HF_DEFAULT] = { "default", false, 5,
        { { TOK_PRE_HF_SPLIT, "[\\p{P}\\$\\+<=>\\^~\\|]+", 0 }, { TOK_PRE_HF_SPLIT, RE_GPT2, 0 },
          { TOK_PRE_HF_SPLIT, "\\p{N}+", 0 }, { TOK_PRE_HF_SPLIT, "[0-9][0-9][0-9]", 0 },
          { TOK_PRE_HF_BYTELEVEL, NULL, 0 } } },
};

/* ---- the table ---- */

#define ADD_BOS TOK_PRE_ADD_BOS
#define IGNORE_MERGES TOK_PRE_IGNORE_MERGES
#define NO_CLEAN TOK_PRE_NO_CLEAN
#define NO_BOS TOK_PRE_NO_BOS
#define HF(x) (&hf_pre[HF_##x])

static const struct tok_pre table[] = {
    {"default", 0,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, HF(DEFAULT)},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
     ADD_BOS | IGNORE_MERGES, {RE_LLAMA3}, HF(LLAMA3)},
    {"dbrx smaug-bpe", 0, {RE_LLAMA3}, HF(LLAMA3)},
    {"glm4 chatglm-bpe", NO_BOS, {RE_LLAMA3}, NULL},
    {"deepseek-coder", NO_CLEAN,
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"},
     HF(DEEPSEEK_CODER)},
    {"falcon", 0, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, HF(FALCON)},
    {"gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert "
     "mpt olmo jais", 0, {RE_GPT2}, HF(GPT2)},
    {"exaone4 jina-v1-en jina-v2-code roberta-bpe", 0, {RE_GPT2}, NULL},
    {"trillion granite-docling", NO_CLEAN, {RE_GPT2}, HF(GPT2)},
    {"starcoder refact codeshell exaone minerva-7b mellum2", 0, {"\\p{N}", RE_GPT2}, HF(SMOLLM)},
    {"smollm command-r", NO_CLEAN, {"\\p{N}", RE_GPT2}, HF(SMOLLM)},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2", NO_CLEAN, {RE_QWEN2}, HF(QWEN2)},
    {"hunyuan solar-open grok-2", NO_CLEAN, {RE_QWEN2}, NULL},
    {"stablelm2", 0, {RE_QWEN2}, HF(QWEN2)},
    {"megrez", 0, {RE_QWEN2}, NULL},
    {"qwen35", NO_CLEAN, {RE_QWEN35}, NULL},
    {"poro-chat", NO_CLEAN, {RE_PORO}, NULL},
    {"bloom gpt3-finnish", 0, {RE_PORO}, NULL},
    {"viking", NO_CLEAN, {RE_PORO, "\\p{N}"}, NULL},
    {"tekken", NO_CLEAN | IGNORE_MERGES | ADD_BOS, {RE_TEKKEN}, NULL},
    {"gpt-4o llama4 kanana2 talkie minimax-m2", NO_CLEAN, {RE_GPT4O}, NULL},
    {"seed-coder", NO_CLEAN, {RE_SEED}, NULL},
    {"bailingmoe bailingmoe2 llada-moe", NO_CLEAN, {RE_BAILING}, NULL},
    {"ufakzeka", NO_CLEAN, {RE_UFAKZEKA}, NULL},
    {"laguna", NO_CLEAN, {"[^\\n]+|[\\n]+", RE_QWEN2}, NULL},
    {"minicpm5", IGNORE_MERGES, {"\\p{N}{1,3}", RE_MINICPM5}, NULL},
};

const struct tok_pre *
tok_pre_find(const char *name)
{
    size_t i, n;

    if (!name)
        return NULL;
    n = strlen(name);
    for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const char *s = table[i].names;

        while (*s) {
            size_t k = strcspn(s, " ");

            if (k == n && !memcmp(s, name, n))
                return &table[i];
            s += k;
            s += *s == ' ';
        }
    }
    return NULL;
}

const struct tok_pre_hf *
tok_pre_hf_get(size_t i)
{
    return i < N_HF ? &hf_pre[i] : NULL;
}
