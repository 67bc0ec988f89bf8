/*
 * tok_pre.c - the pre-tokenizer table (tok_pre.h).
 *
 * The llama.cpp side is llama.cpp's llama_vocab::impl::load and
 * llm_tokenizer_bpe (the regexes below are copied from it, non-ASCII
 * characters as octal escapes); tok_bpe.c translates them for PCRE2.  Every
 * name llama.cpp's llama_vocab::impl::load knows for a "gpt2" or "gemma4"
 * vocabulary is here, except "whitespace" (its own session type in
 * llama.cpp); a name not here fails to load.  Two of llama.cpp's hand-written
 * matchers have no regex: TOK_PRE_RE_DIGITS3 (afmoe, tiny_aya) is run by
 * tok_bpe.c's own code, and kimi-k2's is spelled as the PCRE2 pattern RE_KIMI,
 * which splits the same way.
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

/* copied from llama.cpp's llm_tokenizer_bpe (src/llama-vocab.cpp) */
#define RE_JAIS2_0 \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{" \
    "L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256" \
    "}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|" \
    "\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"
#define RE_DSLLM_0 "[\r\n]"
#define RE_DSLLM_1 \
    "\\s?[A-Za-z\302\265\303\200-\303\226\303\230-\303\266\303\270-\306\272\306\274-\306" \
    "\277\307\204-\312\223\312\225-\312\257\315\260-\315\263\315\266\315\267\315\273-\315" \
    "\275\315\277\316\206\316\210-\316\212\316\214\316\216-\316\241\316\243-\317\265\317" \
    "\267-\322\201\322\212-\324\257\324\261-\325\226\341\202\240-\341\203\205\341\216\240" \
    "-\341\217\265\341\217\270-\341\217\275\341\262\220-\341\262\272\341\262\275-\341\262" \
    "\277\341\264\200-\341\264\253\341\265\253-\341\265\267\341\265\271-\341\266\232\341" \
    "\270\200-\341\274\225\341\274\230-\341\274\235\341\274\240-\341\275\205\341\275\210-" \
    "\341\275\215\341\275\220-\341\275\227\341\275\231\341\275\233\341\275\235\341\275" \
    "\237-\341\275\275\341\276\200-\341\276\264\341\276\266-\341\276\274\341\276\276\341" \
    "\277\202-\341\277\204\341\277\206-\341\277\214\341\277\220-\341\277\223\341\277\226-" \
    "\341\277\233\341\277\240-\341\277\254\341\277\262-\341\277\264\341\277\266-\341\277" \
    "\274\342\204\202\342\204\207\342\204\212-\342\204\223\342\204\225\342\204\231-\342" \
    "\204\235\342\204\244\342\204\246\342\204\250\342\204\252-\342\204\255\342\204\257-" \
    "\342\204\264\342\204\271\342\204\274-\342\204\277\342\205\205-\342\205\211\342\205" \
    "\216\342\206\203\342\206\204\342\260\200-\342\261\273\342\261\276-\342\263\244\342" \
    "\263\253-\342\263\256\342\263\262\342\263\263\352\231\200-\352\231\255\352\232\200-" \
    "\352\232\233\352\234\242-\352\235\257\352\235\261-\352\236\207\352\236\213-\352\236" \
    "\216\352\255\260-\352\256\277\357\254\200-\357\254\206\357\254\223-\357\254\227\357" \
    "\274\241-\357\274\272\357\275\201-\357\275\232\360\220\220\200-\360\220\221\217\360" \
    "\220\222\260-\360\220\223\223\360\220\223\230-\360\220\223\273\360\220\262\200-\360" \
    "\220\262\262\360\220\263\200-\360\220\263\262\360\221\242\240-\360\221\243\237\360" \
    "\236\244\200-\360\236\245\203]+"
#define RE_DSLLM_2 \
    "\\s?[!-/:-~\357\274\201-\357\274\217\357\274\232-\357\275\236\342\200\230-\342\200" \
    "\237\343\200\200-\343\200\202]+"
#define RE_DSLLM_3 "\\s+$"
#define RE_DSLLM_4 \
    "[\344\270\200-\351\276\245\340\240\200-\344\270\200\352\260\200-\355\237\277]+"
#define RE_DSLLM_5 "\\p{N}+"
#define RE_DS3_0 "\\p{N}{1,3}"
#define RE_DS3_1 \
    "[\344\270\200-\351\276\245\343\201\200-\343\202\237\343\202\240-\343\203\277]+"
#define RE_DS3_2 \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p" \
    "{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
#define RE_SPARK_0 "\\p{N}{1,3}"
#define RE_SPARK_1 \
    "[\344\270\200-\351\276\245\343\201\200-\343\202\237\343\202\240-\343\203\277]+"
#define RE_SPARK_2 \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p" \
    "{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+"
#define RE_SPARK_3 "\\p{N}"
#define RE_YOUTU_0 \
    "[\352\260\200-\355\236\243\343\204\261-\343\206\216]+|[\357\274\201\342\200\246\342" \
    "\200\234\342\200\235\342\200\230\342\200\231\342\200\224\357\274\232\357\274\233\357" \
    "\274\214\343\200\201-\343\200\277\357\270\260-\357\271\217]+|[\343\204\205-\343\204" \
    "\257]+|[\344\270\200-\351\276\245\343\201\200-\343\202\237\343\202\240-\343\203\277]" \
    "+"
#define RE_YOUTU_1 \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p" \
    "{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}" \
    "]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|" \
    "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CHAMELEON_0 "<sentinel:[0-9]+>"
#define RE_CHAMELEON_1 "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"
#define RE_CHAMELEON_2 "([\\t\\n]|    |  )"
#define RE_CHAMELEON_3 "\\p{N}"
#define RE_CHAMELEON_4 "[\\p{P}!-/:-@\\[-`{-~]"
#define RE_GRANITE_EMB_0 \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'" \
    "[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\" \
    "p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE" \
    "]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|" \
    "\\s+(?!\\S)|\\s+"
#define RE_TINY_AYA_1 \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p" \
    "{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}" \
    "]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|" \
    "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n" \
    "/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_SUPERBPE_0 "\\p{N}+"
#define RE_SUPERBPE_1 "(?=(\\d{3})+(?!\\d))"
#define RE_AFMOE_1 \
    "[\344\270\200-\351\277\277\343\220\200-\344\266\277\350\261\210-\357\253\277\343\201" \
    "\200-\343\202\237\343\202\240-\343\203\277\357\275\245-\357\276\237\342\274\200-\342" \
    "\277\237\340\271\200-\340\271\277\340\272\200-\340\273\277\341\236\200-\341\237\277" \
    "\341\200\200-\341\202\237\352\251\240-\352\251\277\352\247\240-\352\247\277\352\260" \
    "\200-\355\236\257\341\204\200-\341\207\277]+"
#define RE_AFMOE_2 \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[" \
    "\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_EXAONE_MOE_0 \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:" \
    "\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\" \
    "n]|\\s+(?!\\S)|\\s+"

/* llama.cpp's Han ranges (unicode_cpt_is_han) */
#define HAN "[\\x{3400}-\\x{4DBF}\\x{4E00}-\\x{9FFF}\\x{F900}-\\x{FAFF}\\x{20000}-\\x{2A6DF}" \
    "\\x{2A700}-\\x{2EBEF}\\x{2F800}-\\x{2FA1F}]"
/* kimi-k2: llama.cpp's unicode_regex_split_custom_kimi_k2 as a pattern; its
 * "no match: one character" becomes the last alternative, \p{Cn} (an
 * unassigned code point has no flags there) */
#define RE_KIMI HAN "+|[^\\r\\n\\p{L}\\p{N}]?(?:(?!" HAN ")\\p{L})+" CONTRACTIONS "?" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}\\p{Cn}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+|\\p{Cn}"
#define RE_NEWLINES "[^\\n]+|[\\n]+"

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
#define RAW TOK_PRE_RAW
#define NL_WHOLE TOK_PRE_NL_WHOLE
#define MERGES_OPTIONAL TOK_PRE_MERGES_OPTIONAL
#define HF(x) (&hf_pre[HF_##x])

static const struct tok_pre table[] = {
    {"default", 0,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, HF(DEFAULT)},
    {"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
     ADD_BOS | IGNORE_MERGES, {RE_LLAMA3}, HF(LLAMA3)},
    {"dbrx smaug-bpe", 0, {RE_LLAMA3}, HF(LLAMA3)},
    {"chatglm-bpe", NO_BOS, {RE_LLAMA3}, NULL},
    {"glm4 glm5", NO_BOS | IGNORE_MERGES, {RE_LLAMA3}, NULL},
    {"jais-2", 0, {RE_JAIS2_0}, NULL},
    {"deepseek-llm", NO_CLEAN,
     {RE_DSLLM_0, RE_DSLLM_1, RE_DSLLM_2, RE_DSLLM_3, RE_DSLLM_4, RE_DSLLM_5}, NULL},
    {"deepseek-coder", NO_CLEAN,
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", "\\p{N}"},
     HF(DEEPSEEK_CODER)},
    {"deepseek-v3 hunyuan-dense joyai-llm hy_v4", NO_CLEAN, {RE_DS3_0, RE_DS3_1, RE_DS3_2}, NULL},
    {"spark2_5", NO_CLEAN, {RE_SPARK_0, RE_SPARK_1, RE_SPARK_2, RE_SPARK_3}, NULL},
    {"youtu", NO_CLEAN | IGNORE_MERGES, {RE_YOUTU_0, RE_YOUTU_1}, NULL},
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
    {"chameleon", NO_CLEAN | ADD_BOS,
     {RE_CHAMELEON_0, RE_CHAMELEON_1, RE_CHAMELEON_2, RE_CHAMELEON_3, RE_CHAMELEON_4, RE_GPT2},
     NULL},
    {"exaone-moe", 0, {RE_EXAONE_MOE_0}, NULL},
    {"gpt-4o llama4 kanana2 talkie minimax-m2", NO_CLEAN, {RE_GPT4O}, NULL},
    {"granite-embed-multi-97m", NO_CLEAN | IGNORE_MERGES, {RE_GRANITE_EMB_0}, NULL},
    {"tiny_aya cohere2moe", NO_CLEAN, {TOK_PRE_RE_DIGITS3, RE_TINY_AYA_1}, NULL},
    {"superbpe", NO_CLEAN, {RE_SUPERBPE_0, RE_SUPERBPE_1}, NULL},
    {"seed-coder", NO_CLEAN, {RE_SEED}, NULL},
    {"bailingmoe bailingmoe2 llada-moe", NO_CLEAN, {RE_BAILING}, NULL},
    {"kimi-k2", NO_CLEAN | MERGES_OPTIONAL, {RE_KIMI}, NULL},
    {"ufakzeka", NO_CLEAN, {RE_UFAKZEKA}, NULL},
    {"afmoe", NO_CLEAN, {TOK_PRE_RE_DIGITS3, RE_AFMOE_1, RE_AFMOE_2}, NULL},
    {"laguna", NO_CLEAN, {RE_NEWLINES, RE_QWEN2}, NULL},
    {"minicpm5", IGNORE_MERGES, {"\\p{N}{1,3}", RE_MINICPM5}, NULL},
    /* SPM-style BPE: spaces become U+2581, pieces are not byte-encoded */
    {"gemma4 granite-embed-multi-311m", RAW | NL_WHOLE, {RE_NEWLINES}, NULL},
    {"sarvam-moe", RAW | NO_CLEAN, {RE_NEWLINES}, NULL},
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
