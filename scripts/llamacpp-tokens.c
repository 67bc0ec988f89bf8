/*
 * llamacpp-tokens - a small driver over llama.cpp's libllama, used by
 * scripts/mkgolden-generate to record llama.cpp's tokenization, chat
 * formatting and greedy continuations as golden data.  It is llmkit's own
 * code, compiled at golden-generation time against the peer built by
 * scripts/build-llamacpp; its binary is never committed.
 *
 *   llamacpp-tokens MODEL [N_CTX [N_THREADS [N_UBATCH [TEMPLATE]]]]
 *
 * N_CTX 0 loads the vocabulary only (as llama-tokenize does; the vocabulary
 * test files have no weights): then only info and tokenize are answered.
 *
 * N_UBATCH (default N_CTX) is llama.cpp's n_ubatch (n_batch stays N_CTX, so
 * a long prompt is decoded as llama_decode splits it); TEMPLATE is the
 * built-in template name (llama_chat_apply_template's, e.g. "gemma") that
 * chat uses when the model has no chat template of its own.
 *
 * Reads requests from stdin, one per line, and answers each on stdout with
 * lines ended by a line "end".  Every text travels hex-encoded (UTF-8 bytes)
 * so that newlines, quotes and control characters need no escaping.
 *
 *   info
 *       add_bos 0|1 / add_eos 0|1 / bos ID / eos ID / n_vocab N /
 *       desc HEX / template HEX (the model's chat template, "-" if none) /
 *       system HEX (llama_print_system_info)
 *   tokenize ADD_SPECIAL PARSE_SPECIAL HEX
 *       tokens N ID...
 *   chat ADD_ASSISTANT ROLE:HEX...
 *       prompt HEX   (llama_chat_apply_template with the model's template)
 *   generate N_PREDICT HEX [TOP_K [IGNORE_EOG]]
 *       Tokenizes HEX (add_special and parse_special on), decodes the whole
 *       prompt as one batch in a cleared context, then greedily appends up to
 *       N_PREDICT tokens (argmax of the logits, lowest id on ties), stopping
 *       after an end-of-generation token unless IGNORE_EOG is 1.
 *       prompt_tokens N ID... / tokens N ID... / pieces HEX... (one per
 *       generated token, special tokens rendered) / margins M... (top-1 minus
 *       top-2 logit per step) / stop eog|length; with TOP_K (1..64) also
 *       top ID:LOGIT,... per step (the TOP_K largest logits, largest first,
 *       lower id first among equals, %.9g)
 *
 *   logits STRIDE TOPK HEX
 *       Tokenizes HEX (as generate), decodes it as one batch with the logits
 *       of every position: tokens N ID... / per position i, rowI TOP1 then
 *       the logits of ids 0, STRIDE, 2*STRIDE ... then the TOPK best ids
 *       each with its logit (scripts/mkgolden-mla)
 *
 * Errors: a line "error MESSAGE" instead of the answer (the driver stops);
 * exit status 1 on a fatal error (model not loadable, decode failure).
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

struct drv {
    struct llama_model *model;
    struct llama_context *ctx;
    const struct llama_vocab *vocab;
    int n_ctx;
    const char *tmpl_fallback;  /* NULL, or the built-in template for a model without one */
};

static void
quiet_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

static void
put_hex(const char *s, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;

    if (n == 0) {
        fputs("-", stdout);
        return;
    }
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        putchar(digits[c >> 4]);
        putchar(digits[c & 15]);
    }
}

static int
hex_val(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes the hex word at *p (up to a space or the end) into a new
 * NUL-terminated string; "-" is the empty string.  Returns NULL on bad hex. */
static char *
get_hex(const char **p, size_t *len)
{
    const char *s = *p;
    size_t n = 0, i;
    char *out;

    while (s[n] && s[n] != ' ' && s[n] != '\n')
        n++;
    *p = s + n;
    if (n == 1 && s[0] == '-')
        n = 0;
    if (n % 2)
        return NULL;
    out = malloc(n / 2 + 1);
    if (!out)
        return NULL;
    for (i = 0; i < n / 2; i++) {
        int hi = hex_val(s[2 * i]), lo = hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[i] = (char)(hi << 4 | lo);
    }
    out[n / 2] = '\0';
    *len = n / 2;
    return out;
}

/* Tokenizes text; returns a malloc'd array and its length, or NULL. */
static llama_token *
drv_tokenize(const struct drv *d, const char *text, size_t len, int add, int parse,
             int *n_out)
{
    int cap = (int)len + 16, n;
    llama_token *t;

    if (len > INT32_MAX / 2)
        return NULL;
    t = malloc((size_t)cap * sizeof *t);
    if (!t)
        return NULL;
    n = llama_tokenize(d->vocab, text, (int32_t)len, t, cap, add, parse);
    if (n < 0) {
        cap = -n;
        free(t);
        t = malloc((size_t)cap * sizeof *t);
        if (!t)
            return NULL;
        n = llama_tokenize(d->vocab, text, (int32_t)len, t, cap, add, parse);
        if (n < 0) {
            free(t);
            return NULL;
        }
    }
    *n_out = n;
    return t;
}

static void
put_tokens(const char *tag, const llama_token *t, int n)
{
    int i;

    printf("%s %d", tag, n);
    for (i = 0; i < n; i++)
        printf(" %d", t[i]);
    putchar('\n');
}

static int
do_info(const struct drv *d)
{
    char buf[512];
    const char *tmpl = llama_model_chat_template(d->model, NULL);
    const char *sys = llama_print_system_info();
    int n = llama_model_desc(d->model, buf, sizeof buf);

    printf("add_bos %d\n", llama_vocab_get_add_bos(d->vocab) ? 1 : 0);
    printf("add_eos %d\n", llama_vocab_get_add_eos(d->vocab) ? 1 : 0);
    printf("bos %d\n", llama_vocab_bos(d->vocab));
    printf("eos %d\n", llama_vocab_eos(d->vocab));
    printf("n_vocab %d\n", llama_vocab_n_tokens(d->vocab));
    fputs("desc ", stdout);
    put_hex(buf, n > 0 ? strlen(buf) : 0);
    fputs("\ntemplate ", stdout);
    put_hex(tmpl ? tmpl : "", tmpl ? strlen(tmpl) : 0);
    fputs("\nsystem ", stdout);
    put_hex(sys, strlen(sys));
    putchar('\n');
    return 0;
}

static int
do_tokenize(const struct drv *d, const char *args)
{
    int add, parse, consumed = 0, n;
    size_t len;
    char *text;
    llama_token *t;

    if (sscanf(args, "%d %d %n", &add, &parse, &consumed) != 2 || consumed == 0) {
        puts("error tokenize wants ADD_SPECIAL PARSE_SPECIAL HEX");
        return -1;
    }
    args += consumed;
    text = get_hex(&args, &len);
    if (!text) {
        puts("error bad hex");
        return -1;
    }
    t = drv_tokenize(d, text, len, add, parse, &n);
    free(text);
    if (!t) {
        puts("error tokenization failed");
        return -1;
    }
    put_tokens("tokens", t, n);
    free(t);
    return 0;
}

#define MAX_MSG 16

static int
do_chat(const struct drv *d, const char *args)
{
    struct llama_chat_message msg[MAX_MSG];
    char *owned[2 * MAX_MSG];
    int add_ass, consumed = 0, n_msg = 0, n_owned = 0, rc = -1, i, need;
    const char *tmpl = llama_model_chat_template(d->model, NULL);
    char *buf = NULL;

    if (!tmpl)
        tmpl = d->tmpl_fallback;
    if (!tmpl) {
        puts("error the model has no chat template");
        return -1;
    }
    if (sscanf(args, "%d %n", &add_ass, &consumed) != 1 || consumed == 0) {
        puts("error chat wants ADD_ASSISTANT ROLE:HEX...");
        return -1;
    }
    args += consumed;
    while (*args && *args != '\n') {
        const char *colon = strchr(args, ':');
        size_t len;
        char *role, *content;

        if (!colon || n_msg == MAX_MSG) {
            puts("error bad message (ROLE:HEX, at most 16)");
            goto out;
        }
        role = malloc((size_t)(colon - args) + 1);
        if (!role) {
            puts("error out of memory");
            goto out;
        }
        memcpy(role, args, (size_t)(colon - args));
        role[colon - args] = '\0';
        owned[n_owned++] = role;
        args = colon + 1;
        content = get_hex(&args, &len);
        if (!content) {
            puts("error bad hex");
            goto out;
        }
        owned[n_owned++] = content;
        msg[n_msg].role = role;
        msg[n_msg].content = content;
        n_msg++;
        while (*args == ' ')
            args++;
    }
    need = llama_chat_apply_template(tmpl, msg, (size_t)n_msg, add_ass, NULL, 0);
    if (need < 0) {
        puts("error llama_chat_apply_template does not know this template");
        goto out;
    }
    buf = malloc((size_t)need + 1);
    if (!buf) {
        puts("error out of memory");
        goto out;
    }
    if (llama_chat_apply_template(tmpl, msg, (size_t)n_msg, add_ass, buf, need + 1) != need) {
        puts("error llama_chat_apply_template changed its mind");
        goto out;
    }
    fputs("prompt ", stdout);
    put_hex(buf, (size_t)need);
    putchar('\n');
    rc = 0;
out:
    free(buf);
    for (i = 0; i < n_owned; i++)
        free(owned[i]);
    return rc;
}

/* Decodes n tokens at positions pos.. as one batch, logits for the last. */
static int
decode_run(const struct drv *d, const llama_token *t, int n, int pos)
{
    struct llama_batch b = llama_batch_init(n, 0, 1);
    int i, rc;

    for (i = 0; i < n; i++) {
        b.token[i] = t[i];
        b.pos[i] = pos + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == n - 1;
    }
    b.n_tokens = n;
    rc = llama_decode(d->ctx, b);
    llama_batch_free(b);
    return rc;
}

/* The k largest of n logits, largest first, the lower id first among
 * equal values. */
static void
top_logits(const float *logits, int n, int k, llama_token *id, float *v)
{
    int m = 0, t, j;

    for (t = 0; t < n; t++) {
        if (m == k && !(logits[t] > v[k - 1]))
            continue;
        j = m < k ? m++ : k - 1;
        for (; j > 0 && logits[t] > v[j - 1]; j--) {
            id[j] = id[j - 1];
            v[j] = v[j - 1];
        }
        id[j] = t;
        v[j] = logits[t];
    }
}

static int
do_generate(const struct drv *d, const char *args)
{
    int n_predict, consumed = 0, n_prompt, n_vocab = llama_vocab_n_tokens(d->vocab);
    int n_gen = 0, i, eog = 0, top_k = 0, ignore_eog = 0;
    size_t len;
    char *text;
    llama_token *prompt, *gen, *top_id = NULL;
    float *margin, *top_v = NULL;

    if (sscanf(args, "%d %n", &n_predict, &consumed) != 1 || consumed == 0 ||
        n_predict < 1) {
        puts("error generate wants N_PREDICT HEX");
        return -1;
    }
    args += consumed;
    text = get_hex(&args, &len);
    if (!text) {
        puts("error bad hex");
        return -1;
    }
    if (sscanf(args, " %d %d", &top_k, &ignore_eog) >= 1 && (top_k < 1 || top_k > 64)) {
        puts("error TOP_K wants 1..64");
        free(text);
        return -1;
    }
    prompt = drv_tokenize(d, text, len, 1, 1, &n_prompt);
    free(text);
    if (!prompt || n_prompt < 1 || n_prompt + n_predict > d->n_ctx) {
        puts("error prompt empty, untokenizable, or too long for the context");
        free(prompt);
        return -1;
    }
    gen = malloc((size_t)n_predict * sizeof *gen);
    margin = malloc((size_t)n_predict * sizeof *margin);
    if (top_k > 0) {
        top_id = malloc((size_t)n_predict * (size_t)top_k * sizeof *top_id);
        top_v = malloc((size_t)n_predict * (size_t)top_k * sizeof *top_v);
    }
    if (!gen || !margin || (top_k > 0 && (!top_id || !top_v))) {
        fprintf(stderr, "llamacpp-tokens: out of memory\n");
        exit(1);
    }
    llama_memory_clear(llama_get_memory(d->ctx), true);
    if (decode_run(d, prompt, n_prompt, 0) != 0) {
        fprintf(stderr, "llamacpp-tokens: llama_decode failed on the prompt\n");
        exit(1);
    }
    while (n_gen < n_predict) {
        const float *logits = llama_get_logits_ith(d->ctx, -1);
        int best = 0, second = -1;

        for (i = 1; i < n_vocab; i++) {
            if (logits[i] > logits[best]) {
                second = best;
                best = i;
            } else if (second < 0 || logits[i] > logits[second]) {
                second = i;
            }
        }
        gen[n_gen] = best;
        margin[n_gen] = logits[best] - logits[second];
        if (top_k > 0)
            top_logits(logits, n_vocab, top_k, top_id + n_gen * top_k, top_v + n_gen * top_k);
        n_gen++;
        if (!ignore_eog && llama_vocab_is_eog(d->vocab, best)) {
            eog = 1;
            break;
        }
        if (n_gen == n_predict)
            break;
        if (decode_run(d, &gen[n_gen - 1], 1, n_prompt + n_gen - 1) != 0) {
            fprintf(stderr, "llamacpp-tokens: llama_decode failed at step %d\n", n_gen);
            exit(1);
        }
    }
    put_tokens("prompt_tokens", prompt, n_prompt);
    put_tokens("tokens", gen, n_gen);
    fputs("pieces", stdout);
    for (i = 0; i < n_gen; i++) {
        char piece[256];
        int n = llama_token_to_piece(d->vocab, gen[i], piece, sizeof piece, 0, true);

        if (n < 0) {
            fprintf(stderr, "llamacpp-tokens: token %d has a piece over 256 bytes\n", gen[i]);
            exit(1);
        }
        putchar(' ');
        put_hex(piece, (size_t)n);
    }
    fputs("\nmargins", stdout);
    for (i = 0; i < n_gen; i++)
        printf(" %.4f", margin[i]);
    printf("\nstop %s\n", eog ? "eog" : "length");
    if (top_k > 0) {
        fputs("top", stdout);
        for (i = 0; i < n_gen; i++) {
            int j;
            for (j = 0; j < top_k; j++)
                printf("%c%d:%.9g", j ? ',' : ' ', top_id[i * top_k + j],
                       (double)top_v[i * top_k + j]);
        }
        putchar('\n');
    }
    free(top_id);
    free(top_v);
    free(prompt);
    free(gen);
    free(margin);
    return 0;
}

/* logits STRIDE TOPK HEX: the prompt decoded as one batch with the logits
 * of every position; per position i a line "rowI TOP1 L(0) L(STRIDE) ...
 * ID1 L(ID1) ... IDk L(IDk)" (the top-1 id, the logits of every STRIDE-th
 * id, the TOPK largest with their logits, best first). */
static int
do_logits(const struct drv *d, const char *args)
{
    int stride, topk, consumed = 0, n_prompt, n_vocab = llama_vocab_n_tokens(d->vocab), i, j;
    size_t len;
    char *text;
    llama_token *prompt;

    if (sscanf(args, "%d %d %n", &stride, &topk, &consumed) != 2 || consumed == 0 ||
        stride < 1 || topk < 1 || topk > 64) {
        puts("error logits wants STRIDE TOPK HEX");
        return -1;
    }
    args += consumed;
    text = get_hex(&args, &len);
    if (!text) {
        puts("error bad hex");
        return -1;
    }
    prompt = drv_tokenize(d, text, len, 1, 1, &n_prompt);
    free(text);
    if (!prompt || n_prompt < 1 || n_prompt > d->n_ctx) {
        puts("error prompt empty, untokenizable, or too long for the context");
        free(prompt);
        return -1;
    }
    llama_memory_clear(llama_get_memory(d->ctx), true);
    struct llama_batch b = llama_batch_init(n_prompt, 0, 1);
    for (i = 0; i < n_prompt; i++) {
        b.token[i] = prompt[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n_prompt;
    if (llama_decode(d->ctx, b) != 0) {
        fprintf(stderr, "llamacpp-tokens: llama_decode failed\n");
        exit(1);
    }
    llama_batch_free(b);
    put_tokens("tokens", prompt, n_prompt);
    for (i = 0; i < n_prompt; i++) {
        const float *l = llama_get_logits_ith(d->ctx, i);
        int top[64], k, best = 0;

        for (j = 1; j < n_vocab; j++)
            if (l[j] > l[best])
                best = j;
        printf("row%d %d", i, best);
        for (j = 0; j < n_vocab; j += stride)
            printf(" %.6g", l[j]);
        for (k = 0; k < topk; k++) {
            int m = -1;
            for (j = 0; j < n_vocab; j++) {
                int taken = 0;
                for (int q = 0; q < k; q++)
                    taken |= top[q] == j;
                if (!taken && (m < 0 || l[j] > l[m]))
                    m = j;
            }
            top[k] = m;
            printf(" %d %.6g", m, l[m]);
        }
        putchar('\n');
    }
    free(prompt);
    return 0;
}

int
main(int argc, char **argv)
{
    struct llama_model_params mp;
    struct llama_context_params cp;
    struct drv d;
    char *line = NULL;
    size_t cap = 0;
    int n_threads = 2, n_ubatch;

    if (argc < 2 || argc > 6) {
        fprintf(stderr, "usage: llamacpp-tokens MODEL [N_CTX [N_THREADS [N_UBATCH [TEMPLATE]]]]\n");
        return 2;
    }
    d.n_ctx = argc > 2 ? atoi(argv[2]) : 512;
    if (argc > 3)
        n_threads = atoi(argv[3]);
    n_ubatch = argc > 4 ? atoi(argv[4]) : d.n_ctx;
    d.tmpl_fallback = argc > 5 ? argv[5] : NULL;
    if ((d.n_ctx < 16 && d.n_ctx != 0) || n_threads < 1 || (d.n_ctx && n_ubatch < 1) ||
        n_ubatch > d.n_ctx) {
        fprintf(stderr, "llamacpp-tokens: bad N_CTX, N_THREADS or N_UBATCH\n");
        return 2;
    }
    llama_log_set(quiet_log, NULL);
    llama_backend_init();
    mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = d.n_ctx == 0;
    d.model = llama_model_load_from_file(argv[1], mp);
    if (!d.model) {
        fprintf(stderr, "llamacpp-tokens: cannot load '%s'\n", argv[1]);
        return 1;
    }
    d.vocab = llama_model_get_vocab(d.model);
    d.ctx = NULL;
    cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)d.n_ctx;
    cp.n_batch = (uint32_t)d.n_ctx;
    cp.n_ubatch = (uint32_t)n_ubatch;
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.type_k = GGML_TYPE_F16;
    cp.type_v = GGML_TYPE_F16;
    cp.no_perf = true;
    if (d.n_ctx)
        d.ctx = llama_init_from_model(d.model, cp);
    if (d.n_ctx && !d.ctx) {
        fprintf(stderr, "llamacpp-tokens: cannot create a context\n");
        return 1;
    }
    while (getline(&line, &cap, stdin) > 0) {
        int rc;

        if (strncmp(line, "info", 4) == 0 && isspace((unsigned char)line[4]))
            rc = do_info(&d);
        else if (strncmp(line, "tokenize ", 9) == 0)
            rc = do_tokenize(&d, line + 9);
        else if (!d.ctx) {
            puts("error only info and tokenize with N_CTX 0");
            rc = -1;
        } else if (strncmp(line, "chat ", 5) == 0)
            rc = do_chat(&d, line + 5);
        else if (strncmp(line, "generate ", 9) == 0)
            rc = do_generate(&d, line + 9);
        else if (strncmp(line, "logits ", 7) == 0)
            rc = do_logits(&d, line + 7);
        else {
            puts("error unknown request");
            rc = -1;
        }
        puts("end");
        fflush(stdout);
        if (rc < 0)
            break;
    }
    free(line);
    llama_free(d.ctx);
    llama_model_free(d.model);
    llama_backend_free();
    return 0;
}
