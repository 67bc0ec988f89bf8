/*
 * kvmodel.c - KV-cache memory arithmetic (see kvmodel.h for the formulas).
 *
 * Every product of model dimensions stays below 2^63 because kv_model_check()
 * bounds them (4096 layers * 2 * 4096 heads * 65536 dims * 4 bytes = 2^51);
 * products with user-sized quantities (context, batch, budgets) go through
 * kv_mul(), which reports overflow instead of wrapping.
 */
#include "kvmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kvcache.h"

/* ---- KV dtypes ---- */

static const struct kv_dtype_info dtypes[KV_DTYPE_COUNT] = {
    [KV_DTYPE_F32] = { "f32", 1, 4 },
    [KV_DTYPE_F16] = { "f16", 1, 2 },
    [KV_DTYPE_BF16] = { "bf16", 1, 2 },
    [KV_DTYPE_FP8] = { "fp8", 1, 1 },
    /* ggml block_q8_0: f16 d + int8 qs[32]; block_q4_0: f16 d + uint8 qs[16] */
    [KV_DTYPE_Q8_0] = { "q8_0", 32, 34 },
    [KV_DTYPE_Q4_0] = { "q4_0", 32, 18 },
};

const struct kv_dtype_info *
kv_dtype_get(enum kv_dtype t)
{
    if ((int)t < 0 || t >= KV_DTYPE_COUNT)
        return NULL;
    return &dtypes[t];
}

int
kv_dtype_parse(const char *s)
{
    static const struct { const char *alias; enum kv_dtype t; } aliases[] = {
        { "fp32", KV_DTYPE_F32 }, { "float", KV_DTYPE_F32 },
        { "fp16", KV_DTYPE_F16 }, { "half", KV_DTYPE_F16 },
        { "fp8_e4m3", KV_DTYPE_FP8 }, { "fp8_e5m2", KV_DTYPE_FP8 },
    };
    int i;

    if (!s)
        return -1;
    for (i = 0; i < KV_DTYPE_COUNT; i++)
        if (!strcasecmp(s, dtypes[i].name))
            return i;
    for (i = 0; i < (int)(sizeof(aliases) / sizeof(aliases[0])); i++)
        if (!strcasecmp(s, aliases[i].alias))
            return (int)aliases[i].t;
    return -1;
}

double
kv_dtype_bits(enum kv_dtype t)
{
    const struct kv_dtype_info *i = kv_dtype_get(t);

    return i ? 8.0 * (double)i->bytes / (double)i->blck : 0.0;
}

int64_t
kv_row_bytes(enum kv_dtype t, int64_t n)
{
    const struct kv_dtype_info *i = kv_dtype_get(t);

    if (!i || n < 0)
        return -1;
    return kv_mul((n + i->blck - 1) / i->blck, i->bytes);
}

int64_t
kv_mul(int64_t a, int64_t b)
{
    int64_t r;

    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return -1;
    return r;
}

/* ---- models ---- */

const char *
kv_attn_name(enum kv_attn a)
{
    static const char *const names[KV_ATTN_COUNT] = { "MHA", "GQA", "MQA", "MLA" };

    return ((int)a >= 0 && a < KV_ATTN_COUNT) ? names[a] : "?";
}

void
kv_model_init(struct kv_model *m)
{
    memset(m, 0, sizeof(*m));
}

void
kv_model_release(struct kv_model *m)
{
    if (!m)
        return;
    free(m->layer_kv_heads);
    m->layer_kv_heads = NULL;
    free(m->layer_window);
    m->layer_window = NULL;
}

static int
in_range(int64_t v, int64_t lo, int64_t hi)
{
    return v >= lo && v <= hi;
}

int
kv_model_check(const struct kv_model *m, struct diag *d)
{
    /* MLA caches a latent and a RoPE key per layer: heads and head sizes
     * may be unknown (0) */
    int64_t i, lo = m->kv_lora_rank != 0 || m->rope_dim != 0 ? 0 : 1;

    if (!in_range(m->n_layers, 1, KV_MAX_LAYERS))
        return diag_set(d, ST_FORMAT, "layer count %lld out of range [1, %d]",
                        (long long)m->n_layers, KV_MAX_LAYERS);
    if (!in_range(m->n_heads, lo, KV_MAX_HEADS))
        return diag_set(d, ST_FORMAT, "attention head count %lld out of range [%lld, %d]",
                        (long long)m->n_heads, (long long)lo, KV_MAX_HEADS);
    if (!in_range(m->head_dim_k, lo, KV_MAX_HEAD_DIM) || !in_range(m->head_dim_v, lo, KV_MAX_HEAD_DIM))
        return diag_set(d, ST_FORMAT, "head size %lld/%lld out of range [%lld, %d]",
                        (long long)m->head_dim_k, (long long)m->head_dim_v, (long long)lo,
                        KV_MAX_HEAD_DIM);
    if (!in_range(m->n_ctx_train, 0, KV_MAX_LEN))
        return diag_set(d, ST_FORMAT, "context length %lld out of range [0, %lld]",
                        (long long)m->n_ctx_train, (long long)KV_MAX_LEN);
    if (!in_range(m->sliding_window, 0, KV_MAX_LEN) || !in_range(m->n_swa_layers, 0, m->n_layers))
        return diag_set(d, ST_FORMAT, "sliding window %lld over %lld layers out of range",
                        (long long)m->sliding_window, (long long)m->n_swa_layers);
    for (i = 0; m->layer_window && i < m->n_layers; i++)
        if (!in_range(m->layer_window[i], 0, KV_MAX_LEN))
            return diag_set(d, ST_FORMAT, "layer %lld: sliding window %lld out of range",
                            (long long)i, (long long)m->layer_window[i]);
    if (m->kv_lora_rank != 0 || m->rope_dim != 0) {
        if (!in_range(m->kv_lora_rank, 1, KV_MAX_RANK))
            return diag_set(d, ST_FORMAT, "kv_lora_rank %lld out of range [1, %d]",
                            (long long)m->kv_lora_rank, KV_MAX_RANK);
        if (!in_range(m->rope_dim, 0, KV_MAX_HEAD_DIM))
            return diag_set(d, ST_FORMAT, "rope head size %lld out of range [0, %d]",
                            (long long)m->rope_dim, KV_MAX_HEAD_DIM);
        return 0;
    }
    if (!in_range(m->n_kv_heads, 1, m->n_heads))
        return diag_set(d, ST_FORMAT, "key/value head count %lld out of range [1, %lld]",
                        (long long)m->n_kv_heads, (long long)m->n_heads);
    if (!m->layer_kv_heads && m->n_heads % m->n_kv_heads)
        return diag_set(d, ST_FORMAT, "%lld attention heads do not divide into %lld key/value heads",
                        (long long)m->n_heads, (long long)m->n_kv_heads);
    if (m->layer_kv_heads) {
        for (i = 0; i < m->n_layers; i++) {
            int64_t k = m->layer_kv_heads[i];
            /* 0 = a layer without attention (hybrid recurrent models);
             * query heads may vary by layer too, so no divisibility here */
            if (!in_range(k, 0, m->n_kv_heads))
                return diag_set(d, ST_FORMAT, "layer %lld: key/value head count %lld invalid",
                                (long long)i, (long long)k);
        }
    }
    return 0;
}

int
kv_model_from_hparams(const struct arch_hparams *hp, struct kv_model *m, struct diag *d)
{
    const bool gguf = hp->src == ARCH_SRC_GGUF;
    char k1[600], k2[600];
    int64_t i;

    if (!arch_has(hp, ARCH_HP_BLOCK_COUNT))
        return gguf ? diag_set(d, ST_FORMAT, "no %s",
                               arch_hp_key(hp, ARCH_HP_BLOCK_COUNT, k1, sizeof(k1)))
                    : diag_set(d, ST_FORMAT, "no layer count (num_hidden_layers)");
    m->n_layers = hp->n_layer;
    if (gguf && !in_range(m->n_layers, 1, KV_MAX_LAYERS))
        return diag_set(d, ST_FORMAT, "%s = %lld out of range [1, %d]",
                        arch_hp_key(hp, ARCH_HP_BLOCK_COUNT, k1, sizeof(k1)),
                        (long long)m->n_layers, KV_MAX_LAYERS);
    if (!arch_has(hp, ARCH_HP_HEAD_COUNT))
        return gguf ? diag_set(d, ST_FORMAT, "no %s",
                               arch_hp_key(hp, ARCH_HP_HEAD_COUNT, k1, sizeof(k1)))
                    : diag_set(d, ST_FORMAT, "no attention head count (num_attention_heads)");
    /* per-layer query heads: the largest (the cache does not depend on them) */
    m->n_heads = hp->n_head;
    m->n_kv_heads = arch_has(hp, ARCH_HP_HEAD_COUNT_KV) ? hp->n_head_kv : hp->n_head;
    free(m->layer_kv_heads);
    m->layer_kv_heads = NULL;
    if (hp->varies & ARCH_BIT(ARCH_HP_HEAD_COUNT_KV)) {
        m->layer_kv_heads = malloc((size_t)m->n_layers * sizeof(*m->layer_kv_heads));
        if (!m->layer_kv_heads)
            return diag_set(d, ST_NOMEM, "out of memory");
        for (i = 0; i < m->n_layers; i++)
            m->layer_kv_heads[i] = arch_hp_layer(hp, ARCH_HP_HEAD_COUNT_KV, i);
    }

    if (arch_has(hp, ARCH_HP_KEY_LENGTH)) {
        m->head_dim_k = hp->head_dim;
    } else {
        if (hp->n_embd <= 0 || m->n_heads <= 0 || hp->n_embd % m->n_heads)
            return diag_set(d, ST_FORMAT, "no %s and %s %lld is not a multiple of %lld heads",
                            arch_hp_key(hp, ARCH_HP_KEY_LENGTH, k1, sizeof(k1)),
                            gguf ? "embedding length" : "hidden size", (long long)hp->n_embd,
                            (long long)m->n_heads);
        m->head_dim_k = hp->n_embd / m->n_heads;
    }
    m->head_dim_v = arch_has(hp, ARCH_HP_VALUE_LENGTH) ? hp->head_dim_v : m->head_dim_k;

    /* MLA: the cache holds kv_lora_rank + the RoPE key per layer; the MHA
     * equivalent uses the V head for K and V (newer GGUFs keep the absorbed
     * sizes in key/value_length, the per-head ones in *_mla) */
    m->kv_lora_rank = hp->kv_lora_rank;
    if (m->kv_lora_rank > 0) {
        if (!arch_has(hp, ARCH_HP_ROPE_DIM))
            return diag_set(d, ST_FORMAT, "%s without %s",
                            arch_hp_key(hp, ARCH_HP_KV_LORA_RANK, k1, sizeof(k1)),
                            arch_hp_key(hp, ARCH_HP_ROPE_DIM, k2, sizeof(k2)));
        m->rope_dim = hp->n_rot;
        if (arch_has(hp, ARCH_HP_VALUE_LENGTH_MLA))
            m->head_dim_v = hp->head_dim_v_mla;
        else if (arch_has(hp, ARCH_HP_QK_NOPE_DIM))
            m->head_dim_v = hp->qk_nope_dim;
        m->head_dim_k = m->head_dim_v;
        free(m->layer_kv_heads);
        m->layer_kv_heads = NULL;
        m->n_kv_heads = m->n_heads;
    } else {
        m->kv_lora_rank = 0;
    }

    m->n_ctx_train = hp->n_ctx_train > KV_MAX_LEN ? KV_MAX_LEN : hp->n_ctx_train;
    m->n_ctx_stated = hp->n_ctx_train > KV_MAX_LEN ? hp->n_ctx_train : 0;
    m->sliding_window = hp->sliding_window > 0 ? hp->sliding_window : 0;
    m->n_swa_layers = m->sliding_window ? hp->n_swa_layers : 0;
    free(m->layer_window);
    m->layer_window = NULL;
    if (m->sliding_window > 0 && m->sliding_window <= KV_MAX_LEN && m->n_layers > 0 &&
        m->n_layers <= KV_MAX_LAYERS) {
        if (!(m->layer_window = calloc((size_t)m->n_layers, sizeof(*m->layer_window))))
            return diag_set(d, ST_NOMEM, "out of memory");
        for (int64_t il = 0; il < m->n_layers; il++)
            m->layer_window[il] = arch_swa_layer(hp, il) ? m->sliding_window : 0;
    }
    return kv_model_check(m, d);
}

enum kv_attn
kv_model_attn(const struct kv_model *m)
{
    if (m->kv_lora_rank > 0)
        return KV_ATTN_MLA;
    if (m->n_kv_heads >= m->n_heads)
        return KV_ATTN_MHA;
    if (m->n_kv_heads == 1)
        return KV_ATTN_MQA;
    return KV_ATTN_GQA;
}

/* One layer of K and V rows for kv heads. */
static int64_t
layer_bytes(enum kv_dtype t, int64_t kv, int64_t hdk, int64_t hdv)
{
    return kv_row_bytes(t, kv * hdk) + kv_row_bytes(t, kv * hdv);
}

int64_t
kv_elems_per_token(const struct kv_model *m)
{
    int64_t i, sum = 0;

    if (m->kv_lora_rank > 0)
        return m->n_layers * (m->kv_lora_rank + m->rope_dim);
    if (!m->layer_kv_heads)
        return m->n_layers * m->n_kv_heads * (m->head_dim_k + m->head_dim_v);
    for (i = 0; i < m->n_layers; i++)
        sum += m->layer_kv_heads[i] * (m->head_dim_k + m->head_dim_v);
    return sum;
}

int64_t
kv_bytes_per_token(const struct kv_model *m, enum kv_dtype t)
{
    int64_t i, sum = 0;

    if (!kv_dtype_get(t))
        return -1;
    if (m->kv_lora_rank > 0)
        return m->n_layers * kv_row_bytes(t, m->kv_lora_rank + m->rope_dim);
    if (!m->layer_kv_heads)
        return m->n_layers * layer_bytes(t, m->n_kv_heads, m->head_dim_k, m->head_dim_v);
    for (i = 0; i < m->n_layers; i++)
        sum += layer_bytes(t, m->layer_kv_heads[i], m->head_dim_k, m->head_dim_v);
    return sum;
}

int64_t
kv_seq_tokens(const struct kv_model *m, int64_t il, int64_t len, int64_t block_size)
{
    int64_t w = m->layer_window && il >= 0 && il < m->n_layers ? m->layer_window[il] : 0;

    if (len <= 0)
        return 0;
    if (block_size <= 0)
        return w > 0 && w < len ? w : len;
    if (w <= 0 || w >= len)
        return kv_blocks_for(len, block_size) * block_size;
    /* what generate's pool holds at most (kvcache.h) */
    return kv_swa_slots(w, len, KV_CHUNK_DEFAULT, block_size);
}

int64_t
kv_seq_bytes(const struct kv_model *m, enum kv_dtype t, int64_t len, int64_t block_size)
{
    int64_t il, sum = 0, row, b;

    if (!kv_dtype_get(t))
        return -1;
    if (!m->layer_window)
        return kv_mul(kv_bytes_per_token(m, t), block_size > 0
                      ? kv_blocks_for(len, block_size) * block_size : (len > 0 ? len : 0));
    for (il = 0; il < m->n_layers; il++) {
        if (m->kv_lora_rank > 0)
            row = kv_row_bytes(t, m->kv_lora_rank + m->rope_dim);
        else
            row = layer_bytes(t, m->layer_kv_heads ? m->layer_kv_heads[il] : m->n_kv_heads,
                              m->head_dim_k, m->head_dim_v);
        b = kv_mul(row, kv_seq_tokens(m, il, len, block_size));
        if (b < 0 || sum > INT64_MAX - b)
            return -1;
        sum += b;
    }
    return sum;
}

/* ---- comparison ---- */

static void
variant_kv(struct kv_variant *v, enum kv_attn a, const struct kv_model *m, enum kv_dtype t,
           int64_t kv, int64_t hdk, int64_t hdv)
{
    memset(v, 0, sizeof(*v));
    v->attn = a;
    v->n_kv_heads = kv;
    v->elems_per_token = m->n_layers * kv * (hdk + hdv);
    v->bytes_per_token = m->n_layers * layer_bytes(t, kv, hdk, hdv);
}

int
kv_compare(const struct kv_model *m, enum kv_dtype t, int64_t groups, int64_t rank,
           int64_t rope, struct kv_variant out[KV_ATTN_COUNT], struct diag *d)
{
    enum kv_attn own = kv_model_attn(m);
    int64_t hdk = m->head_dim_k, hdv = m->head_dim_v, g = 0, c;
    int n = 0, i;

    if (!kv_dtype_get(t))
        return diag_set(d, ST_RANGE, "unknown KV type");
    if (m->n_heads < 1 || hdv < 1)
        return diag_set(d, ST_RANGE, "the MHA, GQA and MQA rows need the head count and head size");
    if (own == KV_ATTN_MLA)
        hdk = hdv;           /* the paper's MHA equivalent: d_h for K and V */
    if (groups) {
        if (groups < 1 || groups > m->n_heads || m->n_heads % groups)
            return diag_set(d, ST_RANGE, "--groups %lld does not divide %lld attention heads",
                            (long long)groups, (long long)m->n_heads);
        g = groups;
    } else if (own == KV_ATTN_GQA) {
        g = m->n_kv_heads;
    } else {
        for (c = m->n_heads > 8 ? 8 : m->n_heads - 1; c > 1; c--)
            if (m->n_heads % c == 0) {
                g = c;
                break;
            }
    }
    if (rank <= 0)
        rank = m->kv_lora_rank > 0 ? m->kv_lora_rank : 4 * hdv;
    if (rope <= 0)
        rope = m->kv_lora_rank > 0 ? m->rope_dim : hdv / 2;

    variant_kv(&out[n], KV_ATTN_MHA, m, t, m->n_heads, hdk, hdv);
    snprintf(out[n].label, sizeof(out[n].label), "MHA");
    out[n].is_own = own == KV_ATTN_MHA;
    n++;
    if (g > 1) {
        variant_kv(&out[n], KV_ATTN_GQA, m, t, g, hdk, hdv);
        snprintf(out[n].label, sizeof(out[n].label), "GQA-%lld", (long long)g);
        out[n].is_own = own == KV_ATTN_GQA && g == m->n_kv_heads && !m->layer_kv_heads;
        n++;
    }
    variant_kv(&out[n], KV_ATTN_MQA, m, t, 1, hdk, hdv);
    snprintf(out[n].label, sizeof(out[n].label), "MQA");
    out[n].is_own = own == KV_ATTN_MQA && !m->layer_kv_heads;
    n++;

    memset(&out[n], 0, sizeof(out[n]));
    out[n].attn = KV_ATTN_MLA;
    out[n].kv_lora_rank = rank;
    out[n].rope_dim = rope;
    out[n].elems_per_token = m->n_layers * (rank + rope);
    out[n].bytes_per_token = m->n_layers * kv_row_bytes(t, rank + rope);
    snprintf(out[n].label, sizeof(out[n].label), "MLA-%lld+%lld", (long long)rank, (long long)rope);
    out[n].is_own = own == KV_ATTN_MLA && rank == m->kv_lora_rank && rope == m->rope_dim;
    n++;

    for (i = 0; i < n; i++)
        out[i].reduction = out[i].bytes_per_token > 0
            ? (double)out[0].bytes_per_token / (double)out[i].bytes_per_token : 0.0;
    return n;
}

/* ---- memory budgets ---- */

int64_t
kv_blocks_for(int64_t tokens, int64_t block_size)
{
    if (tokens <= 0 || block_size <= 0)
        return 0;
    return tokens / block_size + (tokens % block_size != 0);
}

int64_t
kv_fit_seqs(int64_t budget, int64_t bytes_per_token, int64_t ctx, int64_t block_size)
{
    int64_t block_bytes = kv_mul(bytes_per_token, block_size);
    int64_t per_seq = kv_blocks_for(ctx, block_size);

    if (budget <= 0 || block_bytes <= 0 || per_seq <= 0)
        return 0;
    return budget / block_bytes / per_seq;
}

int64_t
kv_fit_ctx(int64_t budget, int64_t bytes_per_token, int64_t batch, int64_t block_size)
{
    int64_t block_bytes = kv_mul(bytes_per_token, block_size);

    if (budget <= 0 || block_bytes <= 0 || batch <= 0)
        return 0;
    return kv_mul(budget / block_bytes / batch, block_size);
}

int64_t
kv_fit_seqs_model(const struct kv_model *m, enum kv_dtype t, int64_t budget, int64_t ctx,
                  int64_t block_size)
{
    int64_t per_seq = kv_seq_bytes(m, t, ctx, block_size);

    if (budget <= 0 || per_seq <= 0 || block_size <= 0)
        return 0;
    return budget / per_seq;
}

int64_t
kv_fit_ctx_model(const struct kv_model *m, enum kv_dtype t, int64_t budget, int64_t batch,
                 int64_t block_size)
{
    int64_t lo = 0, hi, mid, b;

    if (budget <= 0 || batch <= 0 || block_size <= 0)
        return 0;
    /* blocks per sequence: the cost grows with them (a window layer's
     * stops growing), so the largest count that fits is found by bisection */
    hi = KV_MAX_LEN / block_size;
    while (lo < hi) {
        mid = lo + (hi - lo + 1) / 2;
        b = kv_mul(kv_seq_bytes(m, t, mid * block_size, block_size), batch);
        if (b >= 0 && b <= budget)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * block_size;
}

/* ---- workloads ---- */

const char *
kv_policy_name(enum kv_policy p)
{
    static const char *const names[KV_POLICY_COUNT] = {
        "contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged",
    };

    return ((int)p >= 0 && p < KV_POLICY_COUNT) ? names[p] : "?";
}

/* sum_{y=1}^{x} ceil(y / b) for x >= 0: q full blocks contribute
 * b * (1 + 2 + ... + q), the r values past them q + 1 each.  x <= 2^30 keeps
 * it below 2^60. */
static int64_t
ceil_prefix(int64_t x, int64_t b)
{
    int64_t q = x / b, r = x % b;

    return b * (q * (q + 1) / 2) + r * (q + 1);
}

static int64_t
pow2_at_least(int64_t x)
{
    int64_t p = 1;

    while (p < x)
        p <<= 1;
    return p;
}

static int
cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n). */
static int64_t
pct(const int64_t *v, size_t n, int q)
{
    size_t k = (size_t)ceil((double)q / 100.0 * (double)n);

    if (k < 1)
        k = 1;
    return v[k - 1];
}

int
kv_simulate(const struct kv_req *r, size_t n, int64_t max_len, int64_t block_size,
            struct kv_workload *w, struct diag *d)
{
    double sum_p = 0, sum_o = 0;
    int64_t *lens;
    size_t i;
    int p;

    memset(w, 0, sizeof(*w));
    if (n == 0)
        return diag_set(d, ST_RANGE, "empty workload");
    if (!in_range(max_len, 1, KV_MAX_LEN))
        return diag_set(d, ST_RANGE, "maximum length %lld out of range [1, %lld]",
                        (long long)max_len, (long long)KV_MAX_LEN);
    if (!in_range(block_size, 1, 65536))
        return diag_set(d, ST_RANGE, "block size %lld out of range [1, 65536]", (long long)block_size);
    lens = malloc(n * sizeof(*lens));
    if (!lens)
        return diag_set(d, ST_NOMEM, "out of memory");
    w->n = (int64_t)n;
    w->max_len = max_len;
    w->block_size = block_size;
    for (p = 0; p < KV_POLICY_COUNT; p++)
        w->pol[p].policy = (enum kv_policy)p;

    for (i = 0; i < n; i++) {
        int64_t pr = r[i].prompt, o = r[i].output, len, x0, c, stored, blocks, af, fx;
        double dc;

        if (pr < 0 || o < 0 || pr > max_len || o > max_len || pr + o < 1 || pr + o > max_len) {
            free(lens);
            return diag_set(d, ST_RANGE, "request %zu: prompt %lld + output %lld not in [1, %lld]",
                            i + 1, (long long)pr, (long long)o, (long long)max_len);
        }
        len = pr + o;
        lens[i] = len;
        sum_p += (double)pr;
        sum_o += (double)o;
        /* Stored tokens run over x0..len, one value per step. */
        x0 = o > 0 ? pr + 1 : pr;
        c = len - x0 + 1;
        dc = (double)c;
        stored = (x0 + len) * c / 2;   /* (x0 + len) * c is even */
        w->steps += dc;

        for (p = 0; p < KV_POLICY_PAGED; p++) {
            int64_t res = p == KV_POLICY_MAX ? max_len
                        : p == KV_POLICY_POW2 ? pow2_at_least(len) : len;
            struct kv_waste *k = &w->pol[p];
            if (res > max_len)
                res = max_len;
            k->slot_steps += (double)res * dc;
            k->stored_steps += (double)stored;
            k->frag_steps += (double)(res - len) * dc;
            k->reserved_steps += (double)(len * c - stored);
            k->final_slots += (double)res;
        }

        /* Paged: B * ceil(x / B) slots at x stored tokens.  The slots past len
         * in the last block are never written; they are held from the step
         * the last block is allocated (x > af - B) to the end. */
        blocks = ceil_prefix(len, block_size) - ceil_prefix(x0 - 1, block_size);
        af = kv_blocks_for(len, block_size) * block_size;
        fx = af - block_size + 1 > x0 ? af - block_size + 1 : x0;
        {
            struct kv_waste *k = &w->pol[KV_POLICY_PAGED];
            double slots = (double)blocks * (double)block_size;
            double frag = (double)(len - fx + 1) * (double)(af - len);
            k->slot_steps += slots;
            k->stored_steps += (double)stored;
            k->frag_steps += frag;
            k->reserved_steps += slots - (double)stored - frag;
            k->final_slots += (double)af;
        }
    }

    w->mean_prompt = sum_p / (double)n;
    w->mean_output = sum_o / (double)n;
    w->mean_len = (sum_p + sum_o) / (double)n;
    for (p = 0; p < KV_POLICY_COUNT; p++) {
        struct kv_waste *k = &w->pol[p];
        k->waste = 1.0 - k->stored_steps / k->slot_steps;
        k->reservation = k->reserved_steps / k->slot_steps;
        k->fragmentation = k->frag_steps / k->slot_steps;
        k->mean_slots = k->slot_steps / w->steps;
        k->final_waste = 1.0 - (sum_p + sum_o) / k->final_slots;
    }
    qsort(lens, n, sizeof(*lens), cmp_i64);
    w->longest = lens[n - 1];
    w->p50 = pct(lens, n, 50);
    w->p90 = pct(lens, n, 90);
    w->p99 = pct(lens, n, 99);
    free(lens);
    return 0;
}

int64_t
kv_concurrency(const struct kv_workload *w, enum kv_policy p, int64_t budget,
               int64_t bytes_per_token)
{
    double slots, c;

    if ((int)p < 0 || p >= KV_POLICY_COUNT || budget <= 0 || bytes_per_token <= 0 ||
        w->pol[p].mean_slots <= 0)
        return 0;
    if (p == KV_POLICY_PAGED) {
        int64_t bb = kv_mul(bytes_per_token, w->block_size);
        if (bb <= 0)
            return 0;
        slots = (double)(budget / bb) * (double)w->block_size;
    } else {
        slots = (double)(budget / bytes_per_token);
    }
    c = floor(slots / w->pol[p].mean_slots);
    return c >= 9.2e18 ? INT64_MAX : (int64_t)c;
}

/* ---- distributions ---- */

static const char *const dist_names[KV_DIST_COUNT] = {
    "fixed", "uniform", "geometric", "lognormal", "zipf",
};

int
kv_dist_parse(const char *s)
{
    int i;

    if (!s)
        return -1;
    for (i = 0; i < KV_DIST_COUNT; i++)
        if (!strcasecmp(s, dist_names[i]))
            return i;
    if (!strcasecmp(s, "exponential"))
        return KV_DIST_GEOMETRIC;
    if (!strcasecmp(s, "pareto"))
        return KV_DIST_ZIPF;
    return -1;
}

const char *
kv_dist_name(enum kv_dist k)
{
    return ((int)k >= 0 && k < KV_DIST_COUNT) ? dist_names[k] : "?";
}

static int64_t
to_len(double x)
{
    if (!(x >= 1.0))
        return 1;               /* also NaN */
    if (x >= (double)KV_MAX_LEN)
        return KV_MAX_LEN;
    return (int64_t)llround(x);
}

int64_t
kv_dist_sample(enum kv_dist k, double mean, double shape, struct rng *r)
{
    double u = rng_unit_open(r);

    if (!(mean >= 1.0))
        mean = 1.0;
    switch (k) {
    case KV_DIST_FIXED:
        return to_len(mean);
    case KV_DIST_UNIFORM: {
        /* integers 1..hi with hi = 2 * mean - 1: mean (1 + hi) / 2 */
        int64_t hi = to_len(2.0 * mean - 1.0);
        int64_t v = 1 + (int64_t)(u * (double)hi);
        return v > hi ? hi : v;
    }
    case KV_DIST_GEOMETRIC:
        /* P(X = k) = p (1 - p)^(k - 1), k >= 1, mean 1 / p */
        if (mean <= 1.0)
            return 1;
        return to_len(1.0 + floor(log(u) / log1p(-1.0 / mean)));
    case KV_DIST_LOGNORMAL: {
        /* E[exp(N(mu, s^2))] = exp(mu + s^2 / 2) */
        double s = shape > 0 ? shape : 1.0;
        double u2 = rng_unit_open(r);
        double z = sqrt(-2.0 * log(u)) * cos(6.283185307179586 * u2);
        return to_len(exp(log(mean) - 0.5 * s * s + s * z));
    }
    case KV_DIST_ZIPF: {
        /* Pareto(xm, a) has mean a xm / (a - 1); inverse CDF xm u^(-1/a) */
        double a = shape > 1.0 ? shape : 2.0;
        double xm = mean * (a - 1.0) / a;
        return to_len(xm * pow(u, -1.0 / a));
    }
    default:
        return 1;
    }
}

void
kv_workload_generate(enum kv_dist k, double mean_prompt, double mean_output, double shape,
                     int64_t max_len, uint64_t seed, struct kv_req *out, size_t n,
                     size_t *clipped)
{
    struct rng rng;
    size_t i, nc = 0;

    if (max_len < 2)
        max_len = 2;
    rng_seed(&rng, seed);
    for (i = 0; i < n; i++) {
        int64_t p = kv_dist_sample(k, mean_prompt, shape, &rng);
        int64_t o = mean_output > 0 ? kv_dist_sample(k, mean_output, shape, &rng) : 0;
        int c = 0;
        if (p > max_len - 1) {
            p = max_len - 1;
            c = 1;
        }
        if (p + o > max_len) {
            o = max_len - p;
            c = 1;
        }
        out[i].prompt = p;
        out[i].output = o;
        nc += (size_t)c;
    }
    if (clipped)
        *clipped = nc;
}
