/*
 * chat.c - chat template families (see chat.h).  Detection and rendering
 * follow llama.cpp's llm_chat_detect_template / llm_chat_apply_template.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

static const char *const family_names[CHAT_N_FAMILIES] = {
    [CHAT_CHATML] = "chatml",
    [CHAT_LLAMA2] = "llama2",
    [CHAT_LLAMA2_SYS] = "llama2-sys",
    [CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [CHAT_MISTRAL_V1] = "mistral-v1",
    [CHAT_MISTRAL_V3] = "mistral-v3",
    [CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_MISTRAL_V7] = "mistral-v7",
    [CHAT_MISTRAL_V7_TEKKEN] = "mistral-v7-tekken",
    [CHAT_PHI3] = "phi3",
    [CHAT_PHI4] = "phi4",
    [CHAT_FALCON3] = "falcon3",
    [CHAT_ZEPHYR] = "zephyr",
    [CHAT_MONARCH] = "monarch",
    [CHAT_GEMMA] = "gemma",
    [CHAT_ORION] = "orion",
    [CHAT_OPENCHAT] = "openchat",
    [CHAT_VICUNA] = "vicuna",
    [CHAT_VICUNA_ORCA] = "vicuna-orca",
    [CHAT_DEEPSEEK] = "deepseek",
    [CHAT_DEEPSEEK3] = "deepseek3",
    [CHAT_COMMAND_R] = "command-r",
    [CHAT_LLAMA3] = "llama3",
    [CHAT_LLAMA4] = "llama4",
    [CHAT_CHATGLM4] = "chatglm4",
    [CHAT_GLMEDGE] = "glmedge",
    [CHAT_GRANITE] = "granite",
    [CHAT_SMOLVLM] = "smolvlm",
};

const char *
chat_family_name(enum chat_family f)
{
    return (unsigned)f < CHAT_N_FAMILIES ? family_names[f] : "unknown";
}

int
chat_family_from_name(const char *name)
{
    int i;

    for (i = 0; i < CHAT_N_FAMILIES; i++)
        if (!strcmp(name, family_names[i]))
            return i;
    return -1;
}

/* ---- detection ---- */

#define HAS(s) (strstr(tmpl, (s)) != NULL)
#define FULLWIDTH_BAR "\xef\xbd\x9c"         /* U+FF5C */
#define SP_MARK "\xe2\x96\x81"               /* U+2581 */

/* The family of a Jinja template by its markers, in llama.cpp's order, or -1
 * with *other set to the name of a family llama.cpp knows but we do not
 * render. */
static int
detect(const char *tmpl, const char **other)
{
    *other = NULL;
    if (HAS("<|im_start|>"))
        return HAS("<|im_sep|>") ? CHAT_PHI4
             : HAS("<end_of_utterance>") ? CHAT_SMOLVLM : CHAT_CHATML;
    if (!strncmp(tmpl, "mistral", 7) || HAS("[INST]")) {
        if (HAS("[SYSTEM_PROMPT]"))
            return CHAT_MISTRAL_V7;
        if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) {
            if (HAS(" [INST]"))
                return CHAT_MISTRAL_V1;
            if (HAS("\"[INST]\""))
                return CHAT_MISTRAL_V3_TEKKEN;
            return CHAT_MISTRAL_V3;
        }
        if (HAS("content.strip()"))
            return CHAT_LLAMA2_SYS_STRIP;
        if (HAS("bos_token + '[INST]"))
            return CHAT_LLAMA2_SYS_BOS;
        if (HAS("<<SYS>>"))
            return CHAT_LLAMA2_SYS;
        return CHAT_LLAMA2;
    }
    if (HAS("<|assistant|>") && HAS("<|end|>"))
        return CHAT_PHI3;
    if (HAS("[gMASK]<sop>"))
        return CHAT_CHATGLM4;
    if (HAS("<|assistant|>") && HAS("<|user|>"))
        return HAS("</s>") ? CHAT_FALCON3 : CHAT_GLMEDGE;
    if (HAS("<|{{ item['role'] }}|>") && HAS("<|begin_of_image|>"))
        return CHAT_GLMEDGE;
    if (HAS("<|user|>") && HAS("<|endoftext|>"))
        return CHAT_ZEPHYR;
    if (HAS("bos_token + message['role']"))
        return CHAT_MONARCH;
    if (HAS("<start_of_turn>"))
        return CHAT_GEMMA;
    if (HAS("'\\n\\nAssistant: ' + eos_token"))
        return CHAT_ORION;
    if (HAS("GPT4 Correct "))
        return CHAT_OPENCHAT;
    if (HAS("USER: ") && HAS("ASSISTANT: "))
        return HAS("SYSTEM: ") ? CHAT_VICUNA_ORCA : CHAT_VICUNA;
    if (HAS("### Instruction:") && HAS("<|EOT|>"))
        return CHAT_DEEPSEEK;
    if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>"))
        return CHAT_COMMAND_R;
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>"))
        return CHAT_LLAMA3;
    if (HAS("[gMASK]sop"))
        *other = "chatglm3";
    else if (HAS("<\xe7\x94\xa8\xe6\x88\xb7>"))       /* <用户> */
        *other = "minicpm";
    else if (HAS("'Assistant: ' + message['content'] + eos_token"))
        *other = "deepseek2";
    else if (HAS("<" FULLWIDTH_BAR "Assistant" FULLWIDTH_BAR ">") &&
             HAS("<" FULLWIDTH_BAR "User" FULLWIDTH_BAR ">") &&
             HAS("<" FULLWIDTH_BAR "end" SP_MARK "of" SP_MARK "sentence" FULLWIDTH_BAR ">"))
        return CHAT_DEEPSEEK3;
    else if (HAS("[|system|]") && HAS("[|assistant|]") && HAS("[|endofturn|]"))
        *other = "exaone";
    else if (HAS("rwkv-world") || HAS("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"))
        *other = "rwkv-world";
    else if (HAS("<|start_of_role|>"))
        return CHAT_GRANITE;
    else if (HAS("message['role'] + additional_special_tokens[0] + message['content'] + "
                 "additional_special_tokens[1]"))
        *other = "gigachat";
    else if (HAS("<|role_start|>"))
        *other = "megrez";
    else if (HAS(" \xd0\x90\xd1\x81\xd1\x81\xd0\xb8\xd1\x81\xd1\x82\xd0\xb5\xd0\xbd\xd1\x82:"))
        *other = "yandex";
    else if (HAS("<role>ASSISTANT</role>") && HAS("'HUMAN'"))
        *other = "bailing";
    else if (HAS("<|header_start|>") && HAS("<|header_end|>"))
        return CHAT_LLAMA4;
    else if (HAS("<|endofuserprompt|>"))
        *other = "dots1";
    else if (HAS("<|startoftext|>") && HAS("<|extra_4|>"))
        *other = "hunyuan-moe";
    else if (HAS("<|im_assistant|>assistant<|im_middle|>"))
        *other = "kimi-k2";
    return -1;
}

/* A family for a model without a (recognised) template, from the marker
 * tokens its vocabulary has. */
static enum chat_family
guess_from_vocab(const struct tokenizer *tok)
{
    static const struct {
        const char *token;
        enum chat_family f;
    } marks[] = {
        {"<|im_start|>", CHAT_CHATML},
        {"<start_of_turn>", CHAT_GEMMA},
        {"<|start_header_id|>", CHAT_LLAMA3},
        {"<|header_start|>", CHAT_LLAMA4},
        {"[INST]", CHAT_MISTRAL_V3},
        {"<|assistant|>", CHAT_PHI3},
    };
    size_t i;

    for (i = 0; tok && tok->p && i < sizeof(marks) / sizeof(marks[0]); i++)
        if (tok_find(tok, marks[i].token, strlen(marks[i].token)) >= 0)
            return marks[i].f;
    return CHAT_CHATML;
}

/* ChatML templates that add a system prompt when there is none (SmolLM2,
 * Qwen): the literal "<|im_start|>system\n...<|im_end|>" inside one string
 * of the template, with a condition on the first role present.  *out gets a
 * malloc'd, unescaped copy, or NULL.  0 or -ST_NOMEM. */
static int
find_default_system(const char *tmpl, char **out)
{
    static const char head[] = "<|im_start|>system";
    const char *p;

    *out = NULL;
    if (!strstr(tmpl, "!= 'system'") && !strstr(tmpl, "== 'system'") &&
        !strstr(tmpl, "!= \"system\"") && !strstr(tmpl, "== \"system\""))
        return 0;
    for (p = strstr(tmpl, head); p; p = strstr(p + 1, head)) {
        const char *s = p + sizeof(head) - 1, *e;
        char *o;

        if (*s == '\n')
            s++;
        else if (s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        e = strstr(s, "<|im_end|>");
        if (!e || e == s || strcspn(s, "'\"{}") < (size_t)(e - s))
            continue;                         /* not one literal: message content */
        o = *out = malloc((size_t)(e - s) + 1);
        if (!o)
            return -ST_NOMEM;
        while (s < e) {
            if (s[0] == '\\' && s + 1 < e) {
                char c = s[1];

                *o++ = c == 'n' ? '\n' : c == 't' ? '\t' : c;
                s += 2;
            } else {
                *o++ = *s++;
            }
        }
        *o = '\0';
        return 0;
    }
    return 0;
}

int
chat_template_init(struct chat_template *ct, const char *tmpl, const struct tokenizer *tok,
                   struct diag *d)
{
    const char *other = NULL;
    int f;

    memset(ct, 0, sizeof(*ct));
    if (!tmpl || !*tmpl) {
        ct->family = guess_from_vocab(tok);
        ct->guessed = true;
        snprintf(ct->note, sizeof(ct->note), "the model has no chat template; using %s (from "
                 "its vocabulary)", chat_family_name(ct->family));
        return 0;
    }
    f = chat_family_from_name(tmpl);
    if (f < 0)
        f = detect(tmpl, &other);
    if (f < 0) {
        ct->family = guess_from_vocab(tok);
        ct->guessed = true;
        if (other)
            snprintf(ct->note, sizeof(ct->note), "chat template looks like %s, which is not "
                     "supported; using %s", other, chat_family_name(ct->family));
        else
            snprintf(ct->note, sizeof(ct->note), "chat template not recognised; using %s",
                     chat_family_name(ct->family));
        return 0;
    }
    ct->family = (enum chat_family)f;
    if (ct->family == CHAT_CHATML && find_default_system(tmpl, &ct->default_system) < 0)
        return diag_set(d, ST_NOMEM, "out of memory");
    return 0;
}

int
chat_template_from_gguf(struct chat_template *ct, const struct gguf *g,
                        const struct tokenizer *tok, struct diag *d)
{
    const char *tmpl = NULL;
    int rc = gguf_get_str(g, "tokenizer.chat_template", &tmpl, d);

    if (rc < 0)
        return rc;
    return chat_template_init(ct, rc == 0 ? tmpl : NULL, tok, d);
}

void
chat_template_release(struct chat_template *ct)
{
    free(ct->default_system);
    memset(ct, 0, sizeof(*ct));
}

/* ---- rendering ---- */

struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
    /* where message content went (NULL: not recorded) */
    struct tok_span *spans;
    size_t n_spans, cap_spans;
};

static void
put_n(struct sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        char *np;

        while (nc < b->n + n + 1)
            nc *= 2;
        np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void
put(struct sbuf *b, const char *s)
{
    put_n(b, s, strlen(s));
}

static bool
is_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* llama.cpp's trim(): ASCII whitespace off both ends */
static void
put_trim(struct sbuf *b, const char *s)
{
    size_t n = strlen(s);

    while (n > 0 && is_space(*s)) {
        s++;
        n--;
    }
    while (n > 0 && is_space(s[n - 1]))
        n--;
    put_n(b, s, n);
}

/* Message text: its bytes are recorded as a content span, so that the
 * tokenizer can tell them from the template's own markers. */
static void
span_add(struct sbuf *b, size_t off)
{
    if (b->oom || b->n == off)
        return;
    if (b->n_spans && b->spans[b->n_spans - 1].off + b->spans[b->n_spans - 1].len == off) {
        b->spans[b->n_spans - 1].len += b->n - off;
        return;
    }
    if (b->n_spans == b->cap_spans) {
        size_t nc = b->cap_spans ? b->cap_spans * 2 : 8;
        struct tok_span *ns = realloc(b->spans, nc * sizeof(*ns));

        if (!ns) {
            b->oom = true;
            return;
        }
        b->spans = ns;
        b->cap_spans = nc;
    }
    b->spans[b->n_spans++] = (struct tok_span){off, b->n - off};
}

static void
put_content_n(struct sbuf *b, const char *s, size_t n)
{
    size_t off = b->n;

    put_n(b, s, n);
    span_add(b, off);
}

static void
put_content(struct sbuf *b, const char *s)
{
    put_content_n(b, s, strlen(s));
}

static void
put_content_trim(struct sbuf *b, const char *s)
{
    size_t off = b->n;

    put_trim(b, s);
    span_add(b, off);
}

static bool
role_is(const struct chat_msg *m, const char *r)
{
    return !strcmp(m->role, r);
}

static void
render_llama2(struct sbuf *b, enum chat_family f, const struct chat_msg *m, size_t n)
{
    bool sys = f != CHAT_LLAMA2, bos = f == CHAT_LLAMA2_SYS_BOS;
    bool strip = f == CHAT_LLAMA2_SYS_STRIP, inside = true;
    size_t i;

    put(b, "[INST] ");
    for (i = 0; i < n; i++) {
        if (!inside) {
            inside = true;
            put(b, bos ? "<s>[INST] " : "[INST] ");
        }
        if (role_is(&m[i], "system")) {
            if (sys)
                put(b, "<<SYS>>\n");
            strip ? put_content_trim(b, m[i].content) : put_content(b, m[i].content);
            put(b, sys ? "\n<</SYS>>\n\n" : "\n");
        } else if (role_is(&m[i], "user")) {
            strip ? put_content_trim(b, m[i].content) : put_content(b, m[i].content);
            put(b, " [/INST]");
        } else {
            strip ? put_content_trim(b, m[i].content) : put_content(b, m[i].content);
            put(b, "</s>");
            inside = false;
        }
    }
}

static void
render_mistral(struct sbuf *b, enum chat_family f, const struct chat_msg *m, size_t n)
{
    size_t i;

    if (f == CHAT_MISTRAL_V7 || f == CHAT_MISTRAL_V7_TEKKEN) {
        const char *sp = f == CHAT_MISTRAL_V7 ? " " : "";

        for (i = 0; i < n; i++) {
            if (role_is(&m[i], "system")) {
                put(b, "[SYSTEM_PROMPT]");
                put(b, sp);
                put_content(b, m[i].content);
                put(b, "[/SYSTEM_PROMPT]");
            } else if (role_is(&m[i], "user")) {
                put(b, "[INST]");
                put(b, sp);
                put_content(b, m[i].content);
                put(b, "[/INST]");
            } else {
                put(b, sp);
                put_content(b, m[i].content);
                put(b, "</s>");
            }
        }
        return;
    }
    {
        const char *lead = f == CHAT_MISTRAL_V1 ? " " : "";
        const char *trail = f == CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
        bool trim_asst = f == CHAT_MISTRAL_V3, inside = false;

        for (i = 0; i < n; i++) {
            if (!inside) {
                put(b, lead);
                put(b, "[INST]");
                put(b, trail);
                inside = true;
            }
            if (role_is(&m[i], "system")) {
                put_content(b, m[i].content);
                put(b, "\n\n");
            } else if (role_is(&m[i], "user")) {
                put_content(b, m[i].content);
                put(b, lead);
                put(b, "[/INST]");
            } else {
                put(b, trail);
                trim_asst ? put_content_trim(b, m[i].content) : put_content(b, m[i].content);
                put(b, "</s>");
                inside = false;
            }
        }
    }
}

static void
render_gemma(struct sbuf *b, const struct chat_msg *m, size_t n, bool add_ass)
{
    struct sbuf sys = {0};
    size_t i;

    for (i = 0; i < n; i++) {
        const char *role = m[i].role;

        if (role_is(&m[i], "system")) {
            /* no system turn in Gemma: folded into the next user turn */
            put_trim(&sys, m[i].content);
            continue;
        }
        if (!strcmp(role, "assistant"))
            role = "model";
        put(b, "<start_of_turn>");
        put(b, role);
        put(b, "\n");
        if (sys.n && strcmp(role, "model")) {
            put_content_n(b, sys.p, sys.n);
            put(b, "\n\n");
            sys.n = 0;
        }
        put_content_trim(b, m[i].content);
        put(b, "<end_of_turn>\n");
    }
    if (sys.oom)
        b->oom = true;
    free(sys.p);
    if (add_ass)
        put(b, "<start_of_turn>model\n");
}

static void
render(struct sbuf *b, enum chat_family f, const struct chat_msg *m, size_t n, bool add_ass)
{
    size_t i;

    switch (f) {
    case CHAT_CHATML:
        for (i = 0; i < n; i++) {
            put(b, "<|im_start|>");
            put(b, m[i].role);
            put(b, "\n");
            put_content(b, m[i].content);
            put(b, "<|im_end|>\n");
        }
        if (add_ass)
            put(b, "<|im_start|>assistant\n");
        break;
    case CHAT_LLAMA2:
    case CHAT_LLAMA2_SYS:
    case CHAT_LLAMA2_SYS_BOS:
    case CHAT_LLAMA2_SYS_STRIP:
        render_llama2(b, f, m, n);
        break;
    case CHAT_MISTRAL_V1:
    case CHAT_MISTRAL_V3:
    case CHAT_MISTRAL_V3_TEKKEN:
    case CHAT_MISTRAL_V7:
    case CHAT_MISTRAL_V7_TEKKEN:
        render_mistral(b, f, m, n);
        break;
    case CHAT_PHI3:
        for (i = 0; i < n; i++) {
            put(b, "<|");
            put(b, m[i].role);
            put(b, "|>\n");
            put_content(b, m[i].content);
            put(b, "<|end|>\n");
        }
        if (add_ass)
            put(b, "<|assistant|>\n");
        break;
    case CHAT_PHI4:
        for (i = 0; i < n; i++) {
            put(b, "<|im_start|>");
            put(b, m[i].role);
            put(b, "<|im_sep|>");
            put_content(b, m[i].content);
            put(b, "<|im_end|>");
        }
        if (add_ass)
            put(b, "<|im_start|>assistant<|im_sep|>");
        break;
    case CHAT_FALCON3:
        for (i = 0; i < n; i++) {
            put(b, "<|");
            put(b, m[i].role);
            put(b, "|>\n");
            put_content(b, m[i].content);
            put(b, "\n");
        }
        if (add_ass)
            put(b, "<|assistant|>\n");
        break;
    case CHAT_ZEPHYR:
        for (i = 0; i < n; i++) {
            put(b, "<|");
            put(b, m[i].role);
            put(b, "|>\n");
            put_content(b, m[i].content);
            put(b, "<|endoftext|>\n");
        }
        if (add_ass)
            put(b, "<|assistant|>\n");
        break;
    case CHAT_MONARCH:
        for (i = 0; i < n; i++) {
            put(b, i ? "<s>" : "");         /* no BOS before the first message */
            put(b, m[i].role);
            put(b, "\n");
            put_content(b, m[i].content);
            put(b, "</s>\n");
        }
        if (add_ass)
            put(b, "<s>assistant\n");
        break;
    case CHAT_GEMMA:
        render_gemma(b, m, n, add_ass);
        break;
    case CHAT_ORION: {
        struct sbuf sys = {0};

        for (i = 0; i < n; i++) {
            if (role_is(&m[i], "system")) {
                put(&sys, m[i].content);
            } else if (role_is(&m[i], "user")) {
                put(b, "Human: ");
                if (sys.n) {
                    put_content_n(b, sys.p, sys.n);
                    put(b, "\n\n");
                    sys.n = 0;
                }
                put_content(b, m[i].content);
                put(b, "\n\nAssistant: </s>");
            } else {
                put_content(b, m[i].content);
                put(b, "</s>");
            }
        }
        if (sys.oom)
            b->oom = true;
        free(sys.p);
        break;
    }
    case CHAT_OPENCHAT:
        for (i = 0; i < n; i++) {
            if (role_is(&m[i], "system")) {
                put_content(b, m[i].content);
            } else {
                char first[2] = {m[i].role[0], 0};

                if (first[0] >= 'a' && first[0] <= 'z')
                    first[0] = (char)(first[0] - 32);
                put(b, "GPT4 Correct ");
                put(b, first);
                put(b, m[i].role[0] ? m[i].role + 1 : "");
                put(b, ": ");
                put_content(b, m[i].content);
            }
            put(b, "<|end_of_turn|>");
        }
        if (add_ass)
            put(b, "GPT4 Correct Assistant:");
        break;
    case CHAT_VICUNA:
    case CHAT_VICUNA_ORCA:
        for (i = 0; i < n; i++) {
            if (role_is(&m[i], "system")) {
                if (f == CHAT_VICUNA_ORCA) {
                    put(b, "SYSTEM: ");
                    put_content(b, m[i].content);
                    put(b, "\n");
                } else {
                    put_content(b, m[i].content);
                    put(b, "\n\n");
                }
            } else if (role_is(&m[i], "user")) {
                put(b, "USER: ");
                put_content(b, m[i].content);
                put(b, "\n");
            } else if (role_is(&m[i], "assistant")) {
                put(b, "ASSISTANT: ");
                put_content(b, m[i].content);
                put(b, "</s>\n");
            }
        }
        if (add_ass)
            put(b, "ASSISTANT:");
        break;
    case CHAT_DEEPSEEK:
        for (i = 0; i < n; i++) {
            if (role_is(&m[i], "system")) {
                put_content(b, m[i].content);
            } else if (role_is(&m[i], "user")) {
                put(b, "### Instruction:\n");
                put_content(b, m[i].content);
                put(b, "\n");
            } else if (role_is(&m[i], "assistant")) {
                put(b, "### Response:\n");
                put_content(b, m[i].content);
                put(b, "\n<|EOT|>\n");
            }
        }
        if (add_ass)
            put(b, "### Response:\n");
        break;
    case CHAT_DEEPSEEK3:
        for (i = 0; i < n; i++) {
            if (role_is(&m[i], "system")) {
                put_content(b, m[i].content);
                put(b, "\n\n");
            } else if (role_is(&m[i], "user")) {
                put(b, "<" FULLWIDTH_BAR "User" FULLWIDTH_BAR ">");
                put_content(b, m[i].content);
            } else if (role_is(&m[i], "assistant")) {
                put(b, "<" FULLWIDTH_BAR "Assistant" FULLWIDTH_BAR ">");
                put_content(b, m[i].content);
                put(b, "<" FULLWIDTH_BAR "end" SP_MARK "of" SP_MARK "sentence" FULLWIDTH_BAR ">");
            }
        }
        if (add_ass)
            put(b, "<" FULLWIDTH_BAR "Assistant" FULLWIDTH_BAR ">");
        break;
    case CHAT_COMMAND_R:
        for (i = 0; i < n; i++) {
            const char *tag = role_is(&m[i], "system") ? "<|SYSTEM_TOKEN|>"
                            : role_is(&m[i], "user") ? "<|USER_TOKEN|>"
                            : role_is(&m[i], "assistant") ? "<|CHATBOT_TOKEN|>" : NULL;
            if (!tag)
                continue;
            put(b, "<|START_OF_TURN_TOKEN|>");
            put(b, tag);
            put_content_trim(b, m[i].content);
            put(b, "<|END_OF_TURN_TOKEN|>");
        }
        if (add_ass)
            put(b, "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
        break;
    case CHAT_LLAMA3:
    case CHAT_LLAMA4: {
        bool l4 = f == CHAT_LLAMA4;

        for (i = 0; i < n; i++) {
            put(b, l4 ? "<|header_start|>" : "<|start_header_id|>");
            put(b, m[i].role);
            put(b, l4 ? "<|header_end|>\n\n" : "<|end_header_id|>\n\n");
            put_content_trim(b, m[i].content);
            put(b, l4 ? "<|eot|>" : "<|eot_id|>");
        }
        if (add_ass)
            put(b, l4 ? "<|header_start|>assistant<|header_end|>\n\n"
                      : "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    }
    case CHAT_CHATGLM4:
    case CHAT_GLMEDGE:
        if (f == CHAT_CHATGLM4)
            put(b, "[gMASK]<sop>");
        for (i = 0; i < n; i++) {
            put(b, "<|");
            put(b, m[i].role);
            put(b, "|>\n");
            put_content(b, m[i].content);
        }
        if (add_ass)
            put(b, f == CHAT_CHATGLM4 ? "<|assistant|>\n" : "<|assistant|>");
        break;
    case CHAT_GRANITE:
        for (i = 0; i < n; i++) {
            put(b, "<|start_of_role|>");
            put(b, m[i].role);
            put(b, "<|end_of_role|>");
            if (role_is(&m[i], "assistant_tool_call"))
                put(b, "<|tool_call|>");
            put_content(b, m[i].content);
            put(b, "<|end_of_text|>\n");
        }
        if (add_ass)
            put(b, "<|start_of_role|>assistant<|end_of_role|>\n");
        break;
    case CHAT_SMOLVLM:
        put(b, "<|im_start|>");
        for (i = 0; i < n; i++) {
            if (role_is(&m[i], "system")) {
                put_content(b, m[i].content);
                put(b, "\n\n");
            } else if (role_is(&m[i], "user")) {
                put(b, "User: ");
                put_content(b, m[i].content);
                put(b, "<end_of_utterance>\n");
            } else {
                put(b, "Assistant: ");
                put_content(b, m[i].content);
                put(b, "<end_of_utterance>\n");
            }
        }
        if (add_ass)
            put(b, "Assistant:");
        break;
    case CHAT_N_FAMILIES:
        break;
    }
}

int
chat_apply(const struct chat_template *ct, const struct chat_msg *msgs, size_t n,
           bool add_generation_prompt, unsigned flags, char **out, size_t *len, struct diag *d)
{
    return chat_apply_spans(ct, msgs, n, add_generation_prompt, flags, out, len, NULL, NULL, d);
}

int
chat_apply_spans(const struct chat_template *ct, const struct chat_msg *msgs, size_t n,
                 bool add_generation_prompt, unsigned flags, char **out, size_t *len,
                 struct tok_span **spans, size_t *n_spans, struct diag *d)
{
    struct sbuf b = {0};
    struct chat_msg *all = NULL;
    const struct chat_msg *m = msgs;
    size_t i;

    *out = NULL;
    *len = 0;
    if (spans) {
        *spans = NULL;
        *n_spans = 0;
    }
    for (i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return diag_set(d, ST_RANGE, "chat message %zu has no %s", i,
                            msgs[i].role ? "content" : "role");
    if ((unsigned)ct->family >= CHAT_N_FAMILIES)
        return diag_set(d, ST_RANGE, "unknown chat template family %d", (int)ct->family);
    if ((flags & CHAT_JINJA_DEFAULTS) && ct->default_system &&
        (n == 0 || strcmp(msgs[0].role, "system"))) {
        all = malloc((n + 1) * sizeof(*all));
        if (!all)
            return diag_set(d, ST_NOMEM, "out of memory");
        all[0] = (struct chat_msg){"system", ct->default_system};
        if (n)
            memcpy(all + 1, msgs, n * sizeof(*all));
        m = all;
        n++;
    }
    put(&b, "");                              /* an empty result is still a string */
    render(&b, ct->family, m, n, add_generation_prompt);
    free(all);
    if (b.oom) {
        free(b.p);
        free(b.spans);
        return diag_set(d, ST_NOMEM, "out of memory rendering %zu chat messages", n);
    }
    *out = b.p;
    *len = b.n;
    if (spans) {
        *spans = b.spans;
        *n_spans = b.n_spans;
    } else {
        free(b.spans);
    }
    return 0;
}

int
chat_encode(const struct chat_template *ct, const struct tokenizer *tok,
            const struct chat_msg *msgs, size_t n, bool parse_special, struct tok_ids *ids,
            struct diag *d)
{
    struct tok_span *spans = NULL;
    size_t n_spans = 0, len;
    char *text;
    int rc;

    if ((rc = chat_apply_spans(ct, msgs, n, true, 0, &text, &len, &spans, &n_spans, d)) < 0)
        return rc;
    rc = tok_encode_spans(tok, text, len, true, spans, parse_special ? 0 : n_spans, ids, d);
    free(spans);
    free(text);
    return rc;
}
