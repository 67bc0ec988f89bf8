/*
 * llama2c.c - llama2.c v0 checkpoints and tokenizer.bin (layout in llama2c.h;
 * sources: karpathy/llama2.c run.c and export.py legacy_export, llama.cpp
 * examples/convert-llama2c-to-ggml).
 *
 * The weights are float32 in host order and are handed out as pointers into
 * the mapping, so this file assumes a little-endian host, like the format.
 */
#include "llama2c.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llama2c.c reads float32 arrays in place: little-endian hosts only"
#endif

static int32_t
rd_i32(const uint8_t *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t r;
    memcpy(&r, &v, sizeof(r));
    return r;
}

/* ---- configuration and size ---- */

/* Adds a*b*c floats to *acc; false on overflow. */
static bool
add3(uint64_t *acc, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x;

    if (__builtin_mul_overflow(a, b, &x) || __builtin_mul_overflow(x, c, &x) ||
        __builtin_add_overflow(*acc, x, acc))
        return false;
    return true;
}

int
llama2c_config_check(const struct llama2c_config *c, uint64_t *size, struct diag *d)
{
    static const char *names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                   "vocab_size", "seq_len"};
    const int32_t v[7] = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                          c->vocab_size, c->seq_len};
    uint64_t D, H, L, V, S, hs, kv, n = 0;

    for (int i = 0; i < 7; i++)
        if (v[i] <= 0)
            return diag_set(d, ST_FORMAT, "%s is %d, not positive", names[i], (int)v[i]);
    if (c->dim % c->n_heads)
        return diag_set(d, ST_FORMAT, "dim %d is not a multiple of n_heads %d", (int)c->dim,
                        (int)c->n_heads);
    if (c->n_heads % c->n_kv_heads)
        return diag_set(d, ST_FORMAT, "n_heads %d is not a multiple of n_kv_heads %d",
                        (int)c->n_heads, (int)c->n_kv_heads);
    if ((c->dim / c->n_heads) % 2)
        return diag_set(d, ST_FORMAT, "head size %d is odd (RoPE needs pairs)",
                        (int)(c->dim / c->n_heads));
    D = (uint64_t)c->dim;
    H = (uint64_t)c->hidden_dim;
    L = (uint64_t)c->n_layers;
    V = (uint64_t)c->vocab_size;
    S = (uint64_t)c->seq_len;
    hs = D / (uint64_t)c->n_heads;
    kv = (uint64_t)c->n_kv_heads * hs;
    /* Floats, in file order. */
    if (!add3(&n, V, D, 1) ||            /* token_embedding */
        !add3(&n, L, D, 1) ||            /* rms_att */
        !add3(&n, L, D, D) ||            /* wq */
        !add3(&n, L, kv, D) ||           /* wk */
        !add3(&n, L, kv, D) ||           /* wv */
        !add3(&n, L, D, D) ||            /* wo */
        !add3(&n, L, D, 1) ||            /* rms_ffn */
        !add3(&n, L, H, D) ||            /* w1 */
        !add3(&n, L, D, H) ||            /* w2 */
        !add3(&n, L, H, D) ||            /* w3 */
        !add3(&n, D, 1, 1) ||            /* rms_final */
        !add3(&n, S, hs / 2, 2) ||       /* freq_cis_real, freq_cis_imag */
        (!c->shared_classifier && !add3(&n, V, D, 1)) || /* wcls */
        !add3(&n, n, 3, 1) ||            /* n *= 4 bytes: n + 3n */
        !add3(&n, LLAMA2C_HEADER_BYTES, 1, 1))
        return diag_set(d, ST_FORMAT, "model size overflows (dim=%d hidden_dim=%d n_layers=%d vocab_size=%d)",
                        (int)c->dim, (int)c->hidden_dim, (int)c->n_layers, (int)c->vocab_size);
    if (size)
        *size = n;
    return 0;
}

/* ---- reading the model ---- */

int
llama2c_read(struct llama2c_model *m, struct src *s, struct diag *d)
{
    const uint8_t *map = s->map;
    struct llama2c_config *c = &m->c;
    uint64_t need, D, H, L, V, kv, off;
    const float *base;
    int32_t raw_vocab;
    int rc;

    memset(m, 0, sizeof(*m));
    m->src = s;
    if (!map && s->size != 0)
        return diag_set(d, ST_RANGE, "llama2.c model input must be a regular file, not a pipe or device");
    if (s->size < LLAMA2C_HEADER_BYTES)
        return diag_set(d, ST_FORMAT, "file too small for a llama2.c header (%llu bytes)",
                        (unsigned long long)s->size);
    if ((uintptr_t)map % 4)
        return diag_set(d, ST_RANGE, "model bytes are not 4-byte aligned");
    c->dim = rd_i32(map);
    c->hidden_dim = rd_i32(map + 4);
    c->n_layers = rd_i32(map + 8);
    c->n_heads = rd_i32(map + 12);
    c->n_kv_heads = rd_i32(map + 16);
    raw_vocab = rd_i32(map + 20);
    c->seq_len = rd_i32(map + 24);
    if (raw_vocab == INT32_MIN)
        return diag_set(d, ST_FORMAT, "vocab_size %d out of range", (int)raw_vocab);
    c->shared_classifier = raw_vocab > 0;
    c->vocab_size = raw_vocab < 0 ? -raw_vocab : raw_vocab;
    rc = llama2c_config_check(c, &need, d);
    if (rc) {
        diag_prefix(d, "bad llama2.c header");
        return rc;
    }
    if (need != s->size)
        return diag_set(d, ST_FORMAT,
                        "file is %llu bytes, but its header (dim=%d hidden_dim=%d n_layers=%d n_heads=%d "
                        "n_kv_heads=%d vocab_size=%d seq_len=%d, %s classifier) implies %llu",
                        (unsigned long long)s->size, (int)c->dim, (int)c->hidden_dim,
                        (int)c->n_layers, (int)c->n_heads, (int)c->n_kv_heads, (int)raw_vocab,
                        (int)c->seq_len, c->shared_classifier ? "shared" : "separate",
                        (unsigned long long)need);
    m->file_size = need;
    m->head_size = c->dim / c->n_heads;
    m->kv_dim = c->n_kv_heads * m->head_size;
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (!m->layers)
        return diag_set(d, ST_NOMEM, "out of memory");
    m->own_layers = true;

    /* Every offset below is within the size just checked. */
    D = (uint64_t)c->dim;
    H = (uint64_t)c->hidden_dim;
    L = (uint64_t)c->n_layers;
    V = (uint64_t)c->vocab_size;
    kv = (uint64_t)m->kv_dim;
    base = (const float *)(const void *)(map + LLAMA2C_HEADER_BYTES);
    off = 0;
    m->token_embedding = base + off;
    off += V * D;
#define PER_LAYER(field, per)                              \
    do {                                                   \
        for (uint64_t l = 0; l < L; l++)                   \
            m->layers[l].field = base + off + l * (per);   \
        off += L * (per);                                  \
    } while (0)
    PER_LAYER(rms_att, D);
    PER_LAYER(wq, D * D);
    PER_LAYER(wk, kv * D);
    PER_LAYER(wv, kv * D);
    PER_LAYER(wo, D * D);
    PER_LAYER(rms_ffn, D);
    PER_LAYER(w1, H * D);
    PER_LAYER(w2, D * H);
    PER_LAYER(w3, H * D);
#undef PER_LAYER
    m->rms_final = base + off;
    off += D;
    m->freq_cis_real = base + off;
    off += (uint64_t)c->seq_len * (uint64_t)(m->head_size / 2);
    m->freq_cis_imag = base + off;
    off += (uint64_t)c->seq_len * (uint64_t)(m->head_size / 2);
    m->wcls = c->shared_classifier ? m->token_embedding : base + off;
    return 0;
}

int
llama2c_open(struct llama2c_model *m, const char *path, struct diag *d)
{
    struct src *s = calloc(1, sizeof(*s));
    int rc;

    memset(m, 0, sizeof(*m));
    if (!s)
        return diag_set(d, ST_NOMEM, "out of memory");
    rc = src_open(s, path, d);
    if (!rc)
        rc = llama2c_read(m, s, d);
    if (rc) {
        llama2c_close(m);
        src_close(s);
        free(s);
        return rc;
    }
    m->own_src = true;
    return 0;
}

void
llama2c_close(struct llama2c_model *m)
{
    if (!m)
        return;
    if (m->own_layers)
        free(m->layers);
    if (m->own_src && m->src) {
        src_close(m->src);
        free(m->src);
    }
    memset(m, 0, sizeof(*m));
}

/* ---- views ---- */

static const char *const kind_names[LLAMA2C_KIND_COUNT] = {
    [LLAMA2C_TOKEN_EMBEDDING] = "token_embedding",
    [LLAMA2C_RMS_ATT] = "rms_att",
    [LLAMA2C_WQ] = "wq",
    [LLAMA2C_WK] = "wk",
    [LLAMA2C_WV] = "wv",
    [LLAMA2C_WO] = "wo",
    [LLAMA2C_RMS_FFN] = "rms_ffn",
    [LLAMA2C_W1] = "w1",
    [LLAMA2C_W2] = "w2",
    [LLAMA2C_W3] = "w3",
    [LLAMA2C_RMS_FINAL] = "rms_final",
    [LLAMA2C_WCLS] = "wcls",
};

const char *
llama2c_kind_name(enum llama2c_kind k)
{
    return (unsigned)k < LLAMA2C_KIND_COUNT ? kind_names[k] : NULL;
}

/* The layer field of kind k (k in RMS_ATT..W3) and its shape. */
static const float *
layer_field(const struct llama2c_model *m, int32_t l, enum llama2c_kind k, int64_t *rows,
            int64_t *cols)
{
    const struct llama2c_layer *y = &m->layers[l];
    int64_t D = m->c.dim, H = m->c.hidden_dim, KV = m->kv_dim;

    switch (k) {
    case LLAMA2C_RMS_ATT: *rows = 1; *cols = D; return y->rms_att;
    case LLAMA2C_WQ: *rows = D; *cols = D; return y->wq;
    case LLAMA2C_WK: *rows = KV; *cols = D; return y->wk;
    case LLAMA2C_WV: *rows = KV; *cols = D; return y->wv;
    case LLAMA2C_WO: *rows = D; *cols = D; return y->wo;
    case LLAMA2C_RMS_FFN: *rows = 1; *cols = D; return y->rms_ffn;
    case LLAMA2C_W1: *rows = H; *cols = D; return y->w1;
    case LLAMA2C_W2: *rows = D; *cols = H; return y->w2;
    case LLAMA2C_W3: *rows = H; *cols = D; return y->w3;
    default: *rows = *cols = 0; return NULL;
    }
}

size_t
llama2c_views(const struct llama2c_model *m, struct llama2c_view *out, size_t cap)
{
    size_t n = 0;

#define EMIT(k_, l_, p_, r_, c_)                                                       \
    do {                                                                              \
        if (n < cap)                                                                  \
            out[n] = (struct llama2c_view){.kind = (k_), .layer = (l_), .data = (p_), \
                                           .rows = (r_), .cols = (c_)};               \
        n++;                                                                          \
    } while (0)
    EMIT(LLAMA2C_TOKEN_EMBEDDING, -1, m->token_embedding, m->c.vocab_size, m->c.dim);
    for (int k = LLAMA2C_RMS_ATT; k <= LLAMA2C_W3; k++) {
        for (int32_t l = 0; l < m->c.n_layers; l++) {
            int64_t r, c;
            const float *p = layer_field(m, l, (enum llama2c_kind)k, &r, &c);
            EMIT((enum llama2c_kind)k, l, p, r, c);
        }
    }
    EMIT(LLAMA2C_RMS_FINAL, -1, m->rms_final, 1, m->c.dim);
    if (!m->c.shared_classifier)
        EMIT(LLAMA2C_WCLS, -1, m->wcls, m->c.vocab_size, m->c.dim);
#undef EMIT
    return n;
}

/* ---- writing the model ---- */

static int
put_floats(FILE *fp, const float *p, uint64_t n, struct diag *d)
{
    if (n > SIZE_MAX / sizeof(float))
        return diag_set(d, ST_RANGE, "array too large");
    return write_all(fp, p, (size_t)(n * sizeof(float)), d);
}

/* freq_cis as llama2.c export.py computes it: freqs_j = 1 / theta^(2j/hs),
 * real = cos(t * freqs_j), imag = sin(t * freqs_j), float32, [seq_len][hs/2]. */
static int
put_freqs(FILE *fp, int32_t seq_len, int32_t hs, bool imag, struct diag *d)
{
    int32_t half = hs / 2;
    float *row = malloc((size_t)half * sizeof(*row));
    int rc = 0;

    if (!row)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (int32_t t = 0; t < seq_len && !rc; t++) {
        for (int32_t j = 0; j < half; j++) {
            float f = 1.0f / powf(10000.0f, (float)(2 * j) / (float)hs);
            float a = (float)t * f;
            row[j] = imag ? sinf(a) : cosf(a);
        }
        rc = put_floats(fp, row, (uint64_t)half, d);
    }
    free(row);
    return rc;
}

int
llama2c_write(const char *path, bool force, const struct llama2c_model *m, struct diag *d)
{
    const struct llama2c_config *c = &m->c;
    uint64_t D, H, L, V, hs, kv;
    uint8_t hdr[LLAMA2C_HEADER_BYTES];
    int32_t v[7];
    struct xout o;
    int rc;

    rc = llama2c_config_check(c, NULL, d);
    if (rc)
        return rc;
    D = (uint64_t)c->dim;
    H = (uint64_t)c->hidden_dim;
    L = (uint64_t)c->n_layers;
    V = (uint64_t)c->vocab_size;
    hs = D / (uint64_t)c->n_heads;
    kv = (uint64_t)c->n_kv_heads * hs;
    if (!m->token_embedding || !m->layers || !m->rms_final ||
        (!c->shared_classifier && !m->wcls) || (!m->freq_cis_real != !m->freq_cis_imag))
        return diag_set(d, ST_RANGE, "llama2.c model to write has a missing array");
    for (uint64_t l = 0; l < L; l++) {
        const struct llama2c_layer *y = &m->layers[l];
        if (!y->rms_att || !y->wq || !y->wk || !y->wv || !y->wo || !y->rms_ffn || !y->w1 ||
            !y->w2 || !y->w3)
            return diag_set(d, ST_RANGE, "llama2.c model to write: layer %llu has a missing array",
                            (unsigned long long)l);
    }
    v[0] = c->dim;
    v[1] = c->hidden_dim;
    v[2] = c->n_layers;
    v[3] = c->n_heads;
    v[4] = c->n_kv_heads;
    v[5] = c->shared_classifier ? c->vocab_size : -c->vocab_size;
    v[6] = c->seq_len;
    for (int i = 0; i < 7; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; b++)
            hdr[4 * i + b] = (uint8_t)(u >> (8 * b));
    }

    rc = xout_open(&o, path, force, d);
    if (rc)
        return rc;
    rc = write_all(o.fp, hdr, sizeof(hdr), d);
    if (!rc)
        rc = put_floats(o.fp, m->token_embedding, V * D, d);
#define ALL_LAYERS(field, per)                                     \
    for (uint64_t l = 0; l < L && !rc; l++)                        \
        rc = put_floats(o.fp, m->layers[l].field, (per), d)
    ALL_LAYERS(rms_att, D);
    ALL_LAYERS(wq, D * D);
    ALL_LAYERS(wk, kv * D);
    ALL_LAYERS(wv, kv * D);
    ALL_LAYERS(wo, D * D);
    ALL_LAYERS(rms_ffn, D);
    ALL_LAYERS(w1, H * D);
    ALL_LAYERS(w2, D * H);
    ALL_LAYERS(w3, H * D);
#undef ALL_LAYERS
    if (!rc)
        rc = put_floats(o.fp, m->rms_final, D, d);
    if (!rc && m->freq_cis_real) {
        uint64_t nf = (uint64_t)c->seq_len * (hs / 2);
        rc = put_floats(o.fp, m->freq_cis_real, nf, d);
        if (!rc)
            rc = put_floats(o.fp, m->freq_cis_imag, nf, d);
    } else if (!rc) {
        rc = put_freqs(o.fp, c->seq_len, (int32_t)hs, false, d);
        if (!rc)
            rc = put_freqs(o.fp, c->seq_len, (int32_t)hs, true, d);
    }
    if (!rc && !c->shared_classifier)
        rc = put_floats(o.fp, m->wcls, V * D, d);
    if (rc) {
        xout_abort(&o);
        return rc;
    }
    return xout_commit(&o, d);
}

/* ---- tokenizer.bin ---- */

void
llama2c_tokenizer_release(struct llama2c_vocab *v)
{
    if (!v)
        return;
    free(v->text);
    free(v->len);
    free(v->score);
    free(v->arena);
    memset(v, 0, sizeof(*v));
}

/* True when another record follows: with a known size, bytes remain; on a
 * pipe, one more byte can be read (it is pushed back). */
static bool
more_input(struct src *s)
{
    int ch;

    if (s->size != UINT64_MAX)
        return src_remaining(s) > 0;
    ch = getc(s->fp);
    if (ch == EOF)
        return false;
    ungetc(ch, s->fp);
    return true;
}

static bool
grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t nc;
    void *np;

    if (need <= *cap)
        return true;
    nc = *cap ? *cap : 256;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / elem)
            return false;
        nc *= 2;
    }
    np = realloc(*p, nc * elem);
    if (!np)
        return false;
    *p = np;
    *cap = nc;
    return true;
}

int
llama2c_tokenizer_read(struct llama2c_vocab *v, struct src *s, int32_t vocab_size,
                       struct diag *d)
{
    size_t cap_len = 0, cap_score = 0, cap_arena = 0, used = 0;
    size_t *off = NULL, cap_off = 0;
    uint8_t b4[4];
    int rc;

    memset(v, 0, sizeof(*v));
    if (vocab_size < 0)
        return diag_set(d, ST_RANGE, "vocab size %d is negative", (int)vocab_size);
    rc = src_read(s, b4, 4, d);
    if (rc) {
        if (rc == -ST_FORMAT)
            diag_set(d, ST_FORMAT, "tokenizer too small: no max_token_length");
        return rc;
    }
    v->max_token_length = (uint32_t)rd_i32(b4);
    if (v->max_token_length > LLAMA2C_MAX_TOKEN_LEN)
        return diag_set(d, ST_FORMAT, "max_token_length %u exceeds %u", v->max_token_length,
                        LLAMA2C_MAX_TOKEN_LEN);
    for (int32_t i = 0; vocab_size ? i < vocab_size : more_input(s); i++) {
        uint8_t rec[8];
        int32_t len;
        float score;

        rc = src_read(s, rec, 8, d);
        if (rc) {
            if (rc == -ST_FORMAT)
                diag_set(d, ST_FORMAT, "token %d: record truncated (file ends after %d of %d tokens)",
                         (int)i, (int)i, (int)vocab_size);
            goto fail;
        }
        memcpy(&score, rec, 4);
        len = rd_i32(rec + 4);
        if (len < 0 || (uint32_t)len > v->max_token_length) {
            rc = diag_set(d, ST_FORMAT, "token %d: length %d outside 0..%u", (int)i, (int)len,
                          v->max_token_length);
            goto fail;
        }
        if ((uint64_t)len > src_remaining(s)) {
            rc = diag_set(d, ST_FORMAT, "token %d: length %d runs past the end of the file",
                          (int)i, (int)len);
            goto fail;
        }
        if (i == INT32_MAX) {
            rc = diag_set(d, ST_FORMAT, "too many tokens");
            goto fail;
        }
        if (!grow((void **)&v->len, &cap_len, (size_t)i + 1, sizeof(*v->len)) ||
            !grow((void **)&v->score, &cap_score, (size_t)i + 1, sizeof(*v->score)) ||
            !grow((void **)&off, &cap_off, (size_t)i + 1, sizeof(*off)) ||
            !grow((void **)&v->arena, &cap_arena, used + (size_t)len + 1, 1)) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto fail;
        }
        rc = src_read(s, v->arena + used, (size_t)len, d);
        if (rc) {
            if (rc == -ST_FORMAT)
                diag_set(d, ST_FORMAT, "token %d: text truncated", (int)i);
            goto fail;
        }
        v->arena[used + (size_t)len] = '\0';
        off[i] = used;
        used += (size_t)len + 1;
        v->len[i] = len;
        v->score[i] = score;
        v->n = i + 1;
    }
    if (v->n == 0) {
        rc = diag_set(d, ST_FORMAT, "tokenizer holds no tokens");
        goto fail;
    }
    if (more_input(s)) {
        if (s->size != UINT64_MAX)
            rc = diag_set(d, ST_FORMAT, "%llu bytes after the last of %d tokens (vocab size mismatch?)",
                          (unsigned long long)src_remaining(s), (int)v->n);
        else
            rc = diag_set(d, ST_FORMAT, "data after the last of %d tokens (vocab size mismatch?)",
                          (int)v->n);
        goto fail;
    }
    v->text = malloc((size_t)v->n * sizeof(*v->text));
    if (!v->text) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < v->n; i++)
        v->text[i] = v->arena + off[i];
    free(off);
    return 0;
fail:
    free(off);
    llama2c_tokenizer_release(v);
    return rc;
}

int
llama2c_tokenizer_open(struct llama2c_vocab *v, const char *path, int32_t vocab_size,
                       struct diag *d)
{
    struct src s;
    int rc;

    memset(v, 0, sizeof(*v));
    rc = src_open(&s, path, d);
    if (!rc)
        rc = llama2c_tokenizer_read(v, &s, vocab_size, d);
    src_close(&s);
    return rc;
}

int
llama2c_tokenizer_write(const char *path, bool force, const struct llama2c_vocab *v,
                        struct diag *d)
{
    uint32_t maxlen = v->max_token_length;
    uint8_t b4[4];
    struct xout o;
    int rc;

    if (v->n < 0)
        return diag_set(d, ST_RANGE, "token count %d is negative", (int)v->n);
    for (int32_t i = 0; i < v->n; i++) {
        if (v->len[i] < 0 || (v->len[i] > 0 && !v->text[i]))
            return diag_set(d, ST_RANGE, "token %d: bad length %d", (int)i, (int)v->len[i]);
        if ((uint32_t)v->len[i] > maxlen)
            maxlen = (uint32_t)v->len[i];
    }
    rc = xout_open(&o, path, force, d);
    if (rc)
        return rc;
    for (int b = 0; b < 4; b++)
        b4[b] = (uint8_t)(maxlen >> (8 * b));
    rc = write_all(o.fp, b4, 4, d);
    for (int32_t i = 0; i < v->n && !rc; i++) {
        uint8_t rec[8];
        uint32_t u = (uint32_t)v->len[i];
        memcpy(rec, &v->score[i], 4);
        for (int b = 0; b < 4; b++)
            rec[4 + b] = (uint8_t)(u >> (8 * b));
        rc = write_all(o.fp, rec, 8, d);
        if (!rc)
            rc = write_all(o.fp, v->text[i], (size_t)v->len[i], d);
    }
    if (rc) {
        xout_abort(&o);
        return rc;
    }
    return xout_commit(&o, d);
}
