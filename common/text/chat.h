/*
 * chat.h - chat templates: turning a list of {role, content} messages into
 * the prompt text a chat model was trained on.
 *
 * There is no Jinja engine here.  Like llama.cpp's llama_chat_apply_template
 * (src/llama-chat.cpp), the template family is recognised from marker strings
 * in the GGUF's tokenizer.chat_template (or from a family name) and each
 * family is rendered by fixed code that reproduces what its Jinja template
 * produces for plain text messages: ChatML (<|im_start|>, SmolLM2, Qwen),
 * Gemma (<start_of_turn>; system text folded into the first user turn),
 * Llama 2 ([INST], four variants), Llama 3 (<|start_header_id|>), Llama 4,
 * Phi 3, Phi 4, Zephyr, Mistral v1/v3/v3-tekken/v7, Falcon 3, DeepSeek,
 * DeepSeek 3, Command R, Vicuna, Granite, Monarch, OpenChat, Orion, GLM-Edge,
 * ChatGLM 4, SmolVLM.  The output matches llama_chat_apply_template byte for
 * byte.  BOS is never written: the tokenizer adds it (tok_encode with
 * add_special), which is how llama.cpp avoids a double BOS.
 *
 * The rendered text contains control-token texts (<|im_start|>, ...) that
 * must become control tokens, next to message text that must not: a user
 * who writes "<|im_start|>system" would otherwise open a system turn.
 * chat_apply_spans() tells where the message text went, and chat_encode()
 * tokenizes the template's markers as special and the messages literally
 * (tok_encode_spans).
 *
 * A template that is not recognised, or a model without one, gets a guess
 * (the family whose marker tokens the vocabulary has, else ChatML) and
 * ct->guessed with a note for the tool to print as a warning.
 */
#ifndef LLMKIT_CHAT_H
#define LLMKIT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "gguf.h"
#include "status.h"
#include "tokenizer.h"

enum chat_family {
    CHAT_CHATML,
    CHAT_LLAMA2,              /* no system support: system text + "\n" inside [INST] */
    CHAT_LLAMA2_SYS,          /* <<SYS>> ... <</SYS>> */
    CHAT_LLAMA2_SYS_BOS,      /* ... with <s> before each later [INST] */
    CHAT_LLAMA2_SYS_STRIP,    /* ... with contents trimmed */
    CHAT_MISTRAL_V1,
    CHAT_MISTRAL_V3,
    CHAT_MISTRAL_V3_TEKKEN,
    CHAT_MISTRAL_V7,
    CHAT_MISTRAL_V7_TEKKEN,
    CHAT_PHI3,
    CHAT_PHI4,
    CHAT_FALCON3,
    CHAT_ZEPHYR,
    CHAT_MONARCH,
    CHAT_GEMMA,
    CHAT_ORION,
    CHAT_OPENCHAT,
    CHAT_VICUNA,
    CHAT_VICUNA_ORCA,
    CHAT_DEEPSEEK,
    CHAT_DEEPSEEK3,
    CHAT_COMMAND_R,
    CHAT_LLAMA3,
    CHAT_LLAMA4,
    CHAT_CHATGLM4,
    CHAT_GLMEDGE,
    CHAT_GRANITE,
    CHAT_SMOLVLM,
    CHAT_N_FAMILIES
};

struct chat_msg {
    const char *role;         /* "system", "user", "assistant" (others pass through) */
    const char *content;
};

struct chat_template {
    enum chat_family family;
    bool guessed;             /* not recognised from a template: see note */
    char note[200];           /* why the family was guessed, or "" */
    /* The system prompt the Jinja template inserts when the conversation has
     * none (SmolLM2's "You are a helpful AI assistant named SmolLM, ...",
     * Qwen's ...), or NULL.  Used only with CHAT_JINJA_DEFAULTS. */
    char *default_system;
};

/* chat_apply() flags */
enum {
    /* also insert default_system when the first message is not "system", as
     * the Jinja template does; llama_chat_apply_template does not (and the
     * llama.cpp goldens are made without it) */
    CHAT_JINJA_DEFAULTS = 1,
};

/* chat_template_init() : recognises the family of tmpl, which is either a
 * Jinja template's source or a family name ("chatml", "gemma", "llama3", ...
 * as chat_family_name gives them).  tmpl NULL or not recognised: a guess from
 * tok's vocabulary (tok may be NULL), noted in ct->note.  Returns 0 or
 * -ST_NOMEM.  Release with chat_template_release(). */
int chat_template_init(struct chat_template *ct, const char *tmpl, const struct tokenizer *tok,
                       struct diag *d);

/* chat_template_from_gguf() : chat_template_init() with g's
 * tokenizer.chat_template (absent = NULL).  -ST_FORMAT when the key is not a
 * string. */
int chat_template_from_gguf(struct chat_template *ct, const struct gguf *g,
                            const struct tokenizer *tok, struct diag *d);

void chat_template_release(struct chat_template *ct);

/* chat_apply() : renders n messages; add_generation_prompt appends the
 * header of an assistant turn (families without one ignore it, as
 * llama.cpp does).  *out is malloc'd, NUL-terminated, *len excludes the NUL;
 * the caller frees it.  Returns 0, -ST_RANGE (a message without role or
 * content), -ST_NOMEM. */
int chat_apply(const struct chat_template *ct, const struct chat_msg *msgs, size_t n,
               bool add_generation_prompt, unsigned flags, char **out, size_t *len,
               struct diag *d);

/* chat_apply_spans() : chat_apply(), and with spans non-NULL the byte
 * ranges of the output that are message content (what the messages said,
 * after any trimming the family does), in order, adjacent ones merged:
 * *spans is malloc'd (NULL when there are none), the caller frees it. */
int chat_apply_spans(const struct chat_template *ct, const struct chat_msg *msgs, size_t n,
                     bool add_generation_prompt, unsigned flags, char **out, size_t *len,
                     struct tok_span **spans, size_t *n_spans, struct diag *d);

/* chat_encode() : the prompt tokens of n messages with the generation
 * prompt (flags 0, as llama_chat_apply_template), appended to ids: BOS as
 * the vocabulary says, the template's markers as their control tokens, and
 * the message text literally - a control token's text in a message stays
 * plain text - unless parse_special (then the whole text is tokenized with
 * parse_special, as llama.cpp does).  Returns 0, -ST_RANGE, -ST_NOMEM or
 * tok_encode's codes. */
int chat_encode(const struct chat_template *ct, const struct tokenizer *tok,
                const struct chat_msg *msgs, size_t n, bool parse_special, struct tok_ids *ids,
                struct diag *d);

/* chat_family_name() : "chatml", "llama2", "gemma", ... (llama.cpp's names). */
const char *chat_family_name(enum chat_family f);

/* chat_family_from_name() : the family of a name, or -1. */
int chat_family_from_name(const char *name);

#endif
