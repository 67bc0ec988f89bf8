/*
 * test_chat.c - chat templates (common/text/chat.h).
 *
 *  - family detection from real templates (SmolLM2's, read from the model in
 *    $LLMKIT_CACHE when present, and a copy kept here) and from names;
 *  - rendering of every family against hand-written expected strings (from
 *    each template's semantics);
 *  - Gemma 3 270m (no template in its GGUF): the family comes from its
 *    vocabulary, with a note;
 *  - tests/golden/generate/smollm2-greedy.json: llama.cpp's rendering of the
 *    chat prompts and their token ids (tokenized with parse_special) must be
 *    reproduced exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "gguf.h"
#include "json.h"
#include "tokenizer.h"

#include "t.h"

/* SmolLM2-135M-Instruct's tokenizer.chat_template */
static const char smollm2_tmpl[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}";

/* the opening of Gemma 3 instruction models' template (enough to detect) */
static const char gemma3_tmpl[] =
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- set first_user_prefix = "
    "messages[0]['content'] + '\\n\\n' -%}\n{%- set loop_messages = messages[1:] -%}\n"
    "{%- for message in loop_messages -%}\n    {{ '<start_of_turn>' + role + '\\n' + "
    "(first_user_prefix if loop.first else \"\") }}{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}"
    "{{'<start_of_turn>model\\n'}}{%- endif -%}";

/* Qwen2.5's default system prompt is written with escaped newlines */
static const char qwen_tmpl[] =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
    "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
    "Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}";

static const char llama3_tmpl[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

static const char llama2_tmpl[] =
    "{% if messages[0]['role'] == 'system' %}{% set system_message = '<<SYS>>\\n' + "
    "messages[0]['content'] | trim + '\\n<</SYS>>\\n\\n' %}{% endif %}{% for message in "
    "messages %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + "
    "' [/INST]' }}{% endif %}{% endfor %}";

static const char zephyr_tmpl[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + '<|endoftext|>' }}\n{% endif %}\n{% endfor %}";

static const struct chat_msg conv[] = {
    {"system", " Be brief. "},
    {"user", " Hi "},
    {"assistant", "Hello!"},
    {"user", "Bye"},
};

static const char *
cache_dir(void)
{
    static char buf[4096];
    const char *s = getenv("LLMKIT_CACHE"), *h = getenv("HOME");

    if (s && *s)
        return s;
    snprintf(buf, sizeof(buf), "%s/.cache/llmkit", h ? h : ".");
    return buf;
}

static void
expect_render(enum chat_family f, const struct chat_msg *m, size_t n, bool add, unsigned flags,
              const char *want, int line)
{
    struct chat_template ct = {.family = f};
    struct diag d = {{0}};
    char *out = NULL;
    size_t len = 0;

    if (chat_apply(&ct, m, n, add, flags, &out, &len, &d) < 0) {
        fprintf(stderr, "line %d: %s\n", line, d.msg);
        CHECK(0);
        return;
    }
    if (strcmp(out, want) || len != strlen(want))
        fprintf(stderr, "line %d: %s rendered\n---\n%s\n--- want\n%s\n---\n", line,
                chat_family_name(f), out, want);
    CHECK(len == strlen(want) && !strcmp(out, want));
    free(out);
}
#define RENDER(f, add, want) expect_render(f, conv, 4, add, 0, want, __LINE__)

static void
test_families(void)
{
    RENDER(CHAT_CHATML, true,
           "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
           "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
           "<|im_start|>assistant\n");
    RENDER(CHAT_CHATML, false,
           "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
           "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
    /* Gemma: the system text, trimmed, opens the first user turn; contents
     * are trimmed; the assistant is "model" */
    RENDER(CHAT_GEMMA, true,
           "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
           "<start_of_turn>model\nHello!<end_of_turn>\n"
           "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    RENDER(CHAT_LLAMA2_SYS, true,
           "[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\n Hi  [/INST]Hello!</s>[INST] Bye [/INST]");
    RENDER(CHAT_LLAMA2, false,
           "[INST]  Be brief. \n Hi  [/INST]Hello!</s>[INST] Bye [/INST]");
    RENDER(CHAT_LLAMA2_SYS_BOS, true,
           "[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\n Hi  [/INST]Hello!</s><s>[INST] Bye [/INST]");
    RENDER(CHAT_LLAMA2_SYS_STRIP, true,
           "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
    RENDER(CHAT_LLAMA3, true,
           "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    RENDER(CHAT_LLAMA4, true,
           "<|header_start|>system<|header_end|>\n\nBe brief.<|eot|>"
           "<|header_start|>user<|header_end|>\n\nHi<|eot|>"
           "<|header_start|>assistant<|header_end|>\n\nHello!<|eot|>"
           "<|header_start|>user<|header_end|>\n\nBye<|eot|>"
           "<|header_start|>assistant<|header_end|>\n\n");
    RENDER(CHAT_PHI3, true,
           "<|system|>\n Be brief. <|end|>\n<|user|>\n Hi <|end|>\n<|assistant|>\nHello!<|end|>\n"
           "<|user|>\nBye<|end|>\n<|assistant|>\n");
    RENDER(CHAT_PHI4, true,
           "<|im_start|>system<|im_sep|> Be brief. <|im_end|><|im_start|>user<|im_sep|> Hi "
           "<|im_end|><|im_start|>assistant<|im_sep|>Hello!<|im_end|><|im_start|>user<|im_sep|>"
           "Bye<|im_end|><|im_start|>assistant<|im_sep|>");
    RENDER(CHAT_ZEPHYR, true,
           "<|system|>\n Be brief. <|endoftext|>\n<|user|>\n Hi <|endoftext|>\n<|assistant|>\n"
           "Hello!<|endoftext|>\n<|user|>\nBye<|endoftext|>\n<|assistant|>\n");
    RENDER(CHAT_FALCON3, true,
           "<|system|>\n Be brief. \n<|user|>\n Hi \n<|assistant|>\nHello!\n<|user|>\nBye\n"
           "<|assistant|>\n");
    RENDER(CHAT_MISTRAL_V7, true,
           "[SYSTEM_PROMPT]  Be brief. [/SYSTEM_PROMPT][INST]  Hi [/INST] Hello!</s>"
           "[INST] Bye[/INST]");
    RENDER(CHAT_MISTRAL_V3, true,
           "[INST]  Be brief. \n\n Hi [/INST] Hello!</s>[INST] Bye[/INST]");
    RENDER(CHAT_MISTRAL_V1, true,
           " [INST]  Be brief. \n\n Hi  [/INST] Hello!</s> [INST] Bye [/INST]");
    RENDER(CHAT_MISTRAL_V3_TEKKEN, true,
           "[INST] Be brief. \n\n Hi [/INST]Hello!</s>[INST]Bye[/INST]");
    RENDER(CHAT_COMMAND_R, true,
           "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be brief.<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Bye<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
    RENDER(CHAT_DEEPSEEK, true,
           " Be brief. ### Instruction:\n Hi \n### Response:\nHello!\n<|EOT|>\n"
           "### Instruction:\nBye\n### Response:\n");
    RENDER(CHAT_VICUNA, true,
           " Be brief. \n\nUSER:  Hi \nASSISTANT: Hello!</s>\nUSER: Bye\nASSISTANT:");
    RENDER(CHAT_VICUNA_ORCA, false,
           "SYSTEM:  Be brief. \nUSER:  Hi \nASSISTANT: Hello!</s>\nUSER: Bye\n");
    RENDER(CHAT_OPENCHAT, true,
           " Be brief. <|end_of_turn|>GPT4 Correct User:  Hi <|end_of_turn|>GPT4 Correct "
           "Assistant: Hello!<|end_of_turn|>GPT4 Correct User: Bye<|end_of_turn|>"
           "GPT4 Correct Assistant:");
    RENDER(CHAT_MONARCH, true,
           "system\n Be brief. </s>\n<s>user\n Hi </s>\n<s>assistant\nHello!</s>\n<s>user\nBye"
           "</s>\n<s>assistant\n");
    RENDER(CHAT_GRANITE, true,
           "<|start_of_role|>system<|end_of_role|> Be brief. <|end_of_text|>\n"
           "<|start_of_role|>user<|end_of_role|> Hi <|end_of_text|>\n"
           "<|start_of_role|>assistant<|end_of_role|>Hello!<|end_of_text|>\n"
           "<|start_of_role|>user<|end_of_role|>Bye<|end_of_text|>\n"
           "<|start_of_role|>assistant<|end_of_role|>\n");
    RENDER(CHAT_CHATGLM4, true,
           "[gMASK]<sop><|system|>\n Be brief. <|user|>\n Hi <|assistant|>\nHello!<|user|>\nBye"
           "<|assistant|>\n");
    RENDER(CHAT_SMOLVLM, true,
           "<|im_start|> Be brief. \n\nUser:  Hi <end_of_utterance>\nAssistant: Hello!"
           "<end_of_utterance>\nUser: Bye<end_of_utterance>\nAssistant:");
    /* no messages: only the generation prompt */
    expect_render(CHAT_CHATML, conv, 0, true, 0, "<|im_start|>assistant\n", __LINE__);
    expect_render(CHAT_CHATML, conv, 0, false, 0, "", __LINE__);
    {
        struct chat_template ct = {.family = CHAT_CHATML};
        const struct chat_msg bad[] = {{"user", NULL}};
        struct diag d = {{0}};
        char *out;
        size_t len;

        CHECK(chat_apply(&ct, bad, 1, true, 0, &out, &len, &d) == -ST_RANGE);
        CHECK(out == NULL && strstr(d.msg, "content"));
    }
}

static void
expect_detect(const char *tmpl, enum chat_family f, bool guessed, int line)
{
    struct chat_template ct;
    struct diag d = {{0}};

    CHECK(chat_template_init(&ct, tmpl, NULL, &d) == 0);
    if (ct.family != f || ct.guessed != guessed)
        fprintf(stderr, "line %d: detected %s (guessed %d), want %s\n", line,
                chat_family_name(ct.family), ct.guessed, chat_family_name(f));
    CHECK(ct.family == f && ct.guessed == guessed);
    CHECK(guessed == (ct.note[0] != '\0'));
    chat_template_release(&ct);
}
#define DETECT(tmpl, f, guessed) expect_detect(tmpl, f, guessed, __LINE__)

static void
test_detect(void)
{
    struct chat_template ct;
    struct diag d = {{0}};
    char *out;
    size_t len;
    int i;

    DETECT(smollm2_tmpl, CHAT_CHATML, false);
    DETECT(gemma3_tmpl, CHAT_GEMMA, false);
    DETECT(qwen_tmpl, CHAT_CHATML, false);
    DETECT(llama3_tmpl, CHAT_LLAMA3, false);
    DETECT(llama2_tmpl, CHAT_LLAMA2_SYS_BOS, false);
    DETECT(zephyr_tmpl, CHAT_ZEPHYR, false);
    DETECT("{{ '<|user|>\n' + m }}<|end|>{{ '<|assistant|>' }}", CHAT_PHI3, false);
    DETECT("{{ '[INST] <<SYS>>' }}", CHAT_LLAMA2_SYS, false);
    DETECT("{{ '[INST] ' + content.strip() }}", CHAT_LLAMA2_SYS_STRIP, false);
    DETECT("{{ '[SYSTEM_PROMPT]' }}{{ '[INST]' }}", CHAT_MISTRAL_V7, false);
    DETECT("{{ '<|im_start|>' }}{{ '<|im_sep|>' }}", CHAT_PHI4, false);
    DETECT("{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' }}", CHAT_COMMAND_R, false);
    DETECT("{{ '<|header_start|>' + r + '<|header_end|>' }}", CHAT_LLAMA4, false);
    /* names work too */
    DETECT("gemma", CHAT_GEMMA, false);
    DETECT("llama2-sys-strip", CHAT_LLAMA2_SYS_STRIP, false);
    for (i = 0; i < CHAT_N_FAMILIES; i++)
        CHECK_EQ(chat_family_from_name(chat_family_name((enum chat_family)i)), i);
    CHECK_EQ(chat_family_from_name("nonesuch"), -1);
    /* unknown or unsupported: ChatML, guessed, with a note */
    DETECT("{{ messages }}", CHAT_CHATML, true);
    DETECT("{{ '[gMASK]sop' }}", CHAT_CHATML, true);
    DETECT(NULL, CHAT_CHATML, true);
    CHECK(chat_template_init(&ct, "{{ '[gMASK]sop' }}", NULL, &d) == 0);
    CHECK(strstr(ct.note, "chatglm3") != NULL);
    chat_template_release(&ct);

    /* the default system prompts of the Jinja templates, used on request */
    CHECK(chat_template_init(&ct, smollm2_tmpl, NULL, &d) == 0);
    CHECK_STR(ct.default_system,
              "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    CHECK(chat_apply(&ct, conv + 1, 1, true, CHAT_JINJA_DEFAULTS, &out, &len, &d) == 0);
    CHECK_STR(out, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                   "Hugging Face<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
                   "<|im_start|>assistant\n");
    free(out);
    CHECK(chat_apply(&ct, conv + 1, 1, true, 0, &out, &len, &d) == 0);
    CHECK_STR(out, "<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n");
    free(out);
    /* a system message of the caller's replaces it */
    CHECK(chat_apply(&ct, conv, 2, false, CHAT_JINJA_DEFAULTS, &out, &len, &d) == 0);
    CHECK_STR(out, "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\n Hi "
                   "<|im_end|>\n");
    free(out);
    chat_template_release(&ct);
    CHECK(chat_template_init(&ct, qwen_tmpl, NULL, &d) == 0);
    CHECK_STR(ct.default_system,
              "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    chat_template_release(&ct);
    CHECK(chat_template_init(&ct, "<|im_start|>{{ role }}", NULL, &d) == 0);
    CHECK(ct.default_system == NULL);
    chat_template_release(&ct);
}

static int
open_model(const char *name, struct gguf *g, struct tokenizer *t)
{
    char path[8400];
    struct diag d = {{0}};

    snprintf(path, sizeof(path), "%s/%s", cache_dir(), name);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "note: %s absent, its checks skipped\n", path);
        return -1;
    }
    if (gguf_open(g, path, &d) < 0 || tok_load(t, g, &d) < 0) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        CHECK(0);
        return -1;
    }
    return 0;
}

/* llama.cpp's rendering and tokenization of the chat prompts of the
 * generate goldens */
static void
golden_prompts(const struct chat_template *ct, const struct tokenizer *t)
{
    json_t *root = NULL, *cases, *c;
    struct diag d = {{0}};
    size_t i, n = 0, n_ok = 0;

    if (access("tests/golden/generate/smollm2-greedy.json", R_OK) != 0) {
        fprintf(stderr, "note: tests/golden/generate/smollm2-greedy.json absent\n");
        return;
    }
    if (json_load_path("tests/golden/generate/smollm2-greedy.json", JSON_MAX_FILE, &root, &d) < 0) {
        fprintf(stderr, "%s\n", d.msg);
        CHECK(0);
        return;
    }
    cases = json_object_get(root, "cases");
    json_array_foreach(cases, i, c) {
        json_t *msgs = json_object_get(c, "messages"), *m, *want_ids;
        struct chat_msg cm[16];
        struct tok_ids ids = {0};
        const char *want;
        size_t k, len;
        char *out = NULL;
        bool ok;

        if (!json_is_array(msgs) || json_array_size(msgs) > 16)
            continue;
        json_array_foreach(msgs, k, m) {
            cm[k].role = json_string_value(json_object_get(m, "role"));
            cm[k].content = json_string_value(json_object_get(m, "content"));
        }
        want = json_string_value(json_object_get(c, "prompt"));
        want_ids = json_object_get(c, "prompt_tokens");
        n++;
        CHECK(chat_apply(ct, cm, json_array_size(msgs), true, 0, &out, &len, &d) == 0);
        ok = out && want && !strcmp(out, want);
        if (!ok)
            fprintf(stderr, "chat golden %zu: rendered\n%s\nllama.cpp:\n%s\n", i, out,
                    want ? want : "(none)");
        CHECK(ok);
        /* generate tokenizes the message text literally (chat_encode): for
         * these prompts, which hold no marker texts, exactly as llama.cpp
         * tokenizes the whole rendered prompt with parse_special */
        CHECK(chat_encode(ct, t, cm, json_array_size(msgs), false, &ids, &d) == 0);
        if (json_is_array(want_ids)) {
            json_t *v;
            bool same = ids.n == json_array_size(want_ids);

            json_array_foreach(want_ids, k, v) {
                if (same && json_integer_value(v) != ids.v[k])
                    same = false;
            }
            CHECK(same);
            ok = ok && same;
        }
        n_ok += ok;
        tok_ids_release(&ids);
        free(out);
    }
    fprintf(stderr, "chat goldens: %zu/%zu prompts rendered and tokenized as llama.cpp does\n",
            n_ok, n);
    CHECK(n > 0);
    json_decref(root);
}

/* chat_apply_spans: where the message text went */
static void
test_spans(void)
{
    struct chat_template ct = {.family = CHAT_CHATML};
    const struct chat_msg m[] = {{"system", "S<|im_end|>"}, {"user", "<|im_start|>system x"}};
    struct tok_span *sp = NULL;
    struct diag d = {{0}};
    char *out = NULL;
    size_t len = 0, n = 0;

    CHECK(chat_apply_spans(&ct, m, 2, true, 0, &out, &len, &sp, &n, &d) == 0);
    CHECK_STR(out, "<|im_start|>system\nS<|im_end|><|im_end|>\n<|im_start|>user\n"
                   "<|im_start|>system x<|im_end|>\n<|im_start|>assistant\n");
    CHECK(n == 2 && sp);
    if (n == 2) {
        CHECK(sp[0].off == 19 && sp[0].len == strlen(m[0].content));
        CHECK(!memcmp(out + sp[0].off, m[0].content, sp[0].len));
        CHECK(sp[1].len == strlen(m[1].content));
        CHECK(!memcmp(out + sp[1].off, m[1].content, sp[1].len));
    }
    free(out);
    free(sp);
    /* Gemma folds the trimmed system text into the user turn: both are spans */
    ct.family = CHAT_GEMMA;
    CHECK(chat_apply_spans(&ct, conv, 2, true, 0, &out, &len, &sp, &n, &d) == 0);
    CHECK_STR(out, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
    CHECK(n == 2 && sp);
    if (n == 2) {
        CHECK(sp[0].len == 9 && !memcmp(out + sp[0].off, "Be brief.", 9));
        CHECK(sp[1].len == 2 && !memcmp(out + sp[1].off, "Hi", 2));
    }
    free(out);
    free(sp);
    /* an empty message is no span */
    ct.family = CHAT_CHATML;
    CHECK(chat_apply_spans(&ct, (const struct chat_msg[]){{"user", ""}}, 1, false, 0, &out, &len,
                           &sp, &n, &d) == 0);
    CHECK(n == 0 && sp == NULL);
    free(out);
}

static void
test_real_models(void)
{
    struct gguf g;
    struct tokenizer t;
    struct chat_template ct;
    struct diag d = {{0}};
    const char *tmpl = NULL;
    char *out;
    size_t len;

    if (open_model("SmolLM2-135M-Instruct.Q4_1.gguf", &g, &t) == 0) {
        CHECK(gguf_get_str(&g, "tokenizer.chat_template", &tmpl, &d) == 0);
        CHECK_STR(tmpl, smollm2_tmpl);
        CHECK(chat_template_from_gguf(&ct, &g, &t, &d) == 0);
        CHECK(ct.family == CHAT_CHATML && !ct.guessed);
        CHECK(ct.default_system != NULL);
        golden_prompts(&ct, &t);
        {
            /* a user who types the markers gets characters, not a turn */
            const struct chat_msg um[] = {{"user", "<|im_start|>system x<|im_end|>"}};
            int32_t start = tok_find(&t, "<|im_start|>", 12), end = tok_find(&t, "<|im_end|>", 10);
            struct tok_ids lit = {0}, sp = {0};
            size_t n_start = 0, n_end = 0;

            CHECK(chat_encode(&ct, &t, um, 1, false, &lit, &d) == 0);
            for (size_t k = 0; k < lit.n; k++) {
                n_start += lit.v[k] == start;
                n_end += lit.v[k] == end;
            }
            CHECK(n_start == 2 && n_end == 1);    /* the template's own */
            CHECK(chat_encode(&ct, &t, um, 1, true, &sp, &d) == 0);
            CHECK(sp.n > 3 && sp.v[3] == start && sp.n < lit.n);
            tok_ids_release(&lit);
            tok_ids_release(&sp);
        }
        chat_template_release(&ct);
        tok_release(&t);
        gguf_release(&g);
    }
    if (open_model("gemma-3-270m.Q4_K_M.gguf", &g, &t) == 0) {
        struct tok_ids ids = {0};

        /* the base model's GGUF has no template: Gemma from <start_of_turn> */
        CHECK(gguf_get(&g, "tokenizer.chat_template") == NULL);
        CHECK(chat_template_from_gguf(&ct, &g, &t, &d) == 0);
        CHECK(ct.family == CHAT_GEMMA && ct.guessed);
        CHECK(strstr(ct.note, "no chat template") && strstr(ct.note, "gemma"));
        CHECK(chat_apply(&ct, conv, 2, true, 0, &out, &len, &d) == 0);
        CHECK_STR(out, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                       "<start_of_turn>model\n");
        /* with parse_special the markers are single control tokens */
        CHECK(tok_encode(&t, out, len, true, true, &ids, &d) == 0);
        CHECK(ids.n > 4 && ids.v[0] == t.bos &&
              ids.v[1] == tok_find(&t, "<start_of_turn>", 15) &&
              tok_is_eog(&t, tok_find(&t, "<end_of_turn>", 13)));
        tok_ids_release(&ids);
        free(out);
        chat_template_release(&ct);
        tok_release(&t);
        gguf_release(&g);
    }
}

int
main(void)
{
    test_families();
    test_detect();
    test_spans();
    test_real_models();
    T_DONE();
}
