/*
 * quantize_mix.c - the file types of llama-quantize and the per-tensor type
 * rules of its mixes, read from llama.cpp's src/llama-quant.cpp
 * (tensor_allows_quantization, tensor_get_category, llama_tensor_get_type,
 * llama_tensor_get_type_impl, tensor_type_fallback) and written anew.  Only
 * the branches reachable with the file types of the table below are kept;
 * the IQ1/IQ2/IQ3 ftypes are not offered.
 */
#include "quantize.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "gguf.h"
#include "qtypes.h"

/* llama_ftype values (include/llama.h) */
enum {
    FT_F32 = 0, FT_F16 = 1, FT_Q4_0 = 2, FT_Q4_1 = 3, FT_Q8_0 = 7, FT_Q5_0 = 8, FT_Q5_1 = 9,
    FT_Q2_K = 10, FT_Q3_K_S = 11, FT_Q3_K_M = 12, FT_Q3_K_L = 13, FT_Q4_K_S = 14, FT_Q4_K_M = 15,
    FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18, FT_IQ4_NL = 25, FT_IQ4_XS = 30, FT_BF16 = 32,
};

static const struct quant_ftype ftypes[] = {
    { "Q4_0", FT_Q4_0, GGML_TYPE_Q4_0, "4.5 bpw, 32-element blocks with one scale" },
    { "Q4_1", FT_Q4_1, GGML_TYPE_Q4_1, "5.0 bpw, 32-element blocks with scale and minimum" },
    { "Q5_0", FT_Q5_0, GGML_TYPE_Q5_0, "5.5 bpw" },
    { "Q5_1", FT_Q5_1, GGML_TYPE_Q5_1, "6.0 bpw" },
    { "Q8_0", FT_Q8_0, GGML_TYPE_Q8_0, "8.5 bpw, nearly lossless" },
    { "Q2_K", FT_Q2_K, GGML_TYPE_Q2_K, "k-quant mix around 2.6 bpw" },
    { "Q3_K_S", FT_Q3_K_S, GGML_TYPE_Q3_K, "k-quant mix, Q3_K everywhere" },
    { "Q3_K_M", FT_Q3_K_M, GGML_TYPE_Q3_K, "k-quant mix, Q3_K with Q4_K/Q5_K where it matters" },
    { "Q3_K_L", FT_Q3_K_L, GGML_TYPE_Q3_K, "k-quant mix, Q3_K with Q5_K attention and ffn_down" },
    { "Q4_K_S", FT_Q4_K_S, GGML_TYPE_Q4_K, "k-quant mix, mostly Q4_K" },
    { "Q4_K_M", FT_Q4_K_M, GGML_TYPE_Q4_K, "k-quant mix, Q4_K with Q6_K on half of attn_v/ffn_down" },
    { "Q5_K_S", FT_Q5_K_S, GGML_TYPE_Q5_K, "k-quant mix, mostly Q5_K" },
    { "Q5_K_M", FT_Q5_K_M, GGML_TYPE_Q5_K, "k-quant mix, Q5_K with Q6_K on half of attn_v/ffn_down" },
    { "Q6_K", FT_Q6_K, GGML_TYPE_Q6_K, "6.56 bpw k-quant" },
    { "IQ4_NL", FT_IQ4_NL, GGML_TYPE_IQ4_NL, "4.5 bpw non-linear" },
    { "IQ4_XS", FT_IQ4_XS, GGML_TYPE_IQ4_XS, "4.25 bpw non-linear" },
    { "F16", FT_F16, GGML_TYPE_F16, "16-bit float" },
    { "BF16", FT_BF16, GGML_TYPE_BF16, "bfloat16" },
    { "F32", FT_F32, GGML_TYPE_F32, "32-bit float" },
};

const struct quant_ftype *
quant_ftype_list(size_t *n)
{
    *n = sizeof(ftypes) / sizeof(ftypes[0]);
    return ftypes;
}

const struct quant_ftype *
quant_ftype_find(const char *name)
{
    static const char *const alias[][2] = { { "Q3_K", "Q3_K_M" }, { "Q4_K", "Q4_K_M" }, { "Q5_K", "Q5_K_M" } };
    size_t n = sizeof(ftypes) / sizeof(ftypes[0]);
    char *end;
    long v;

    for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++)
        if (!strcasecmp(name, alias[i][0]))
            name = alias[i][1];
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(name, ftypes[i].name))
            return &ftypes[i];
    v = strtol(name, &end, 10);
    if (*name && !*end)
        for (size_t i = 0; i < n; i++)
            if ((long)ftypes[i].ftype == v)
                return &ftypes[i];
    return NULL;
}

int
quant_tensor_type_parse(const char *name)
{
    static const uint32_t ok[] = {
        GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
        GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
        GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    };
    int t = qtype_by_name(name);

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (t >= 0 && (uint32_t)t == ok[i])
            return t;
    return -1;
}

/* ---- which tensors, in which order ---- */

static bool
has(const char *s, const char *sub)
{
    return strstr(s, sub) != NULL;
}

bool
quant_tensor_allowed(const char *name, uint32_t n_dims, bool keep_output)
{
    static const char *const never[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
        "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
        "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
        "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
        "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
        "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
        "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
        "mm.a.code_embd",
    };
    size_t n = strlen(name);

    if (n_dims < 2 || n < 6 || strcmp(name + n - 6, "weight"))
        return false;
    if (keep_output && !strcmp(name, "output.weight"))
        return false;
    /* positional and token-type embeddings (BERT-like; LLM_TN names) */
    if (!strcmp(name, "position_embd.weight") || !strcmp(name, "token_types.weight"))
        return false;
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++)
        if (has(name, never[i]))
            return false;
    return true;
}

static int
layer_of(const char *name)
{
    int l;
    return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

int
quant_layer_cmp(const char *a, const char *b)
{
    int la = layer_of(a), lb = layer_of(b);

    if (la != lb)
        return la < lb ? -1 : 1;
    return strcmp(a, b);
}

/* ---- categories ---- */

enum cat {
    C_TOKEN_EMBD, C_ATTN_Q, C_ATTN_V, C_ATTN_K, C_ATTN_QKV, C_ATTN_KV_B, C_ATTN_OUTPUT,
    C_FFN_UP, C_FFN_GATE, C_FFN_DOWN, C_OUTPUT, C_OTHER,
};

static enum cat
category(const char *name)
{
    if (!strcmp(name, "output.weight"))
        return C_OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight"))
        return C_TOKEN_EMBD;
    if (has(name, "attn_qkv.weight"))
        return C_ATTN_QKV;
    if (has(name, "attn_kv_b.weight"))
        return C_ATTN_KV_B;
    if (has(name, "attn_v.weight"))
        return C_ATTN_V;
    if (has(name, "attn_k.weight"))
        return C_ATTN_K;
    if (has(name, "attn_q.weight"))
        return C_ATTN_Q;
    if (has(name, "attn_output.weight"))
        return C_ATTN_OUTPUT;
    if (has(name, "ffn_up"))
        return C_FFN_UP;
    if (has(name, "ffn_gate"))
        return C_FFN_GATE;
    if (has(name, "ffn_down"))
        return C_FFN_DOWN;
    return C_OTHER;
}

static bool
is_attn_v(enum cat c)
{
    return c == C_ATTN_V || c == C_ATTN_QKV || c == C_ATTN_KV_B;
}

static bool
use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static bool
type_is_quantized(uint32_t t)
{
    return t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16;
}

/* ---- init ---- */

static int
get_hp(const struct gguf *g, const char *arch, const char *key, int64_t def, int64_t *out,
       struct diag *d)
{
    char k[160];
    const struct gguf_kv *kv;
    uint64_t u;
    int64_t v;

    snprintf(k, sizeof(k), "%s.%s", arch, key);
    kv = gguf_get(g, k);
    *out = def;
    if (!kv)
        return 0;
    if (kv->type == GGUF_TYPE_ARRAY) {      /* per-layer values: llama.cpp's n_head(0) */
        if (kv->n < 1 || !gguf_arr_int(kv, 0, &v))
            return diag_set(d, ST_FORMAT, "key '%s' is not an integer array", k);
        *out = v;
        return 0;
    }
    if (!gguf_kv_uint(kv, &u) || u > INT32_MAX)
        return diag_set(d, ST_FORMAT, "key '%s' is not a valid count", k);
    *out = (int64_t)u;
    return 0;
}

int
quant_mix_init(struct quant_mix *m, const struct gguf *g, const struct quant_mix_opts *o,
               struct diag *d)
{
    const struct quant_ftype *ft = NULL;
    const char *arch = "llama";
    int64_t n_head, n_head_kv;
    int rc;

    memset(m, 0, sizeof(*m));
    m->o = *o;
    for (size_t i = 0; i < sizeof(ftypes) / sizeof(ftypes[0]); i++)
        if (ftypes[i].ftype == o->ftype)
            ft = &ftypes[i];
    if (!ft)
        return diag_set(d, ST_RANGE, "unsupported file type %u", o->ftype);
    m->default_type = ft->type;
    if ((rc = gguf_get_str(g, "general.architecture", &arch, d)) < 0)
        return rc;
    if (rc == 1)
        arch = "llama";
    m->falcon = !strcmp(arch, "falcon");
    if ((rc = get_hp(g, arch, "block_count", 0, &m->n_layer, d)) < 0 ||
        (rc = get_hp(g, arch, "attention.head_count", 0, &n_head, d)) < 0 ||
        (rc = get_hp(g, arch, "attention.head_count_kv", n_head, &n_head_kv, d)) < 0 ||
        (rc = get_hp(g, arch, "expert_count", 0, &m->n_expert, d)) < 0)
        return rc;
    m->n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 0;
    /* llama.cpp's LLM_TYPE_70B: an 80-layer llama with grouped KV heads */
    m->is_70b = !strcmp(arch, "llama") && m->n_layer == 80 && n_head != n_head_kv;
    m->tied = true;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        enum cat c = category(g->t[i].name.p);
        if (is_attn_v(c))
            m->n_attn_v++;
        if (c == C_OUTPUT)
            m->tied = false;
    }
    if (o->n_ov) {
        m->re = calloc(o->n_ov, sizeof(*m->re));
        if (!m->re)
            return diag_set(d, ST_NOMEM, "out of memory");
        for (size_t i = 0; i < o->n_ov; i++) {
            char *low = strdup(o->ov[i].pattern);
            int err;
            PCRE2_SIZE off;
            if (!low) {
                quant_mix_release(m);
                return diag_set(d, ST_NOMEM, "out of memory");
            }
            for (char *p = low; *p; p++)    /* llama-quantize lower-cases the pattern */
                *p = (char)tolower((unsigned char)*p);
            m->re[i] = pcre2_compile((PCRE2_SPTR)low, PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
            free(low);
            if (!m->re[i]) {
                PCRE2_UCHAR msg[120];
                pcre2_get_error_message(err, msg, sizeof(msg));
                rc = diag_set(d, ST_RANGE, "--tensor-type pattern '%s': %s at offset %zu",
                              o->ov[i].pattern, (const char *)msg, (size_t)off);
                quant_mix_release(m);
                return rc;
            }
        }
    }
    return 0;
}

void
quant_mix_release(struct quant_mix *m)
{
    if (m->re) {
        for (size_t i = 0; i < m->o.n_ov; i++)
            pcre2_code_free(m->re[i]);
        free(m->re);
        m->re = NULL;
    }
}

static bool
re_search(void *re, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int r;

    if (!md)
        return false;
    r = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return r >= 0;
}

/* ---- the rules ---- */

/* llama_tensor_get_type_impl for the file types of the table. */
static uint32_t
mix_rule(struct quant_mix *m, uint32_t t, const char *name, const int64_t *ne, enum cat c)
{
    const uint32_t ft = m->o.ftype;
    const int n_exp8 = m->n_expert == 8;

    if (c == C_OUTPUT || (m->tied && c == C_TOKEN_EMBD)) {
        if (m->o.output_type >= 0)
            return (uint32_t)m->o.output_type;
        if (m->falcon || ne[0] % qtype_get(t)->blck)
            return GGML_TYPE_Q8_0;
        return t != GGML_TYPE_Q8_0 ? GGML_TYPE_Q6_K : t;
    }
    if (c == C_TOKEN_EMBD)
        return m->o.embd_type >= 0 ? (uint32_t)m->o.embd_type : t;
    if (is_attn_v(c)) {
        if (ft == FT_Q2_K)
            t = m->n_gqa >= 4 ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = m->i_attn_v < 2 ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        else if (ft == FT_Q3_K_L)
            t = GGML_TYPE_Q5_K;
        else if ((ft == FT_IQ4_NL || ft == FT_IQ4_XS) && m->n_gqa >= 4)
            t = GGML_TYPE_Q5_K;
        else if ((ft == FT_Q4_K_M || ft == FT_Q5_K_M) && use_more_bits(m->i_attn_v, m->n_attn_v))
            t = GGML_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && m->i_attn_v < 4)
            t = GGML_TYPE_Q5_K;
        if (m->is_70b && (t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K))
            t = GGML_TYPE_Q5_K;
        if (n_exp8)
            t = GGML_TYPE_Q8_0;
        m->i_attn_v++;
    } else if (c == C_ATTN_K) {
        if (n_exp8)
            t = GGML_TYPE_Q8_0;
    } else if (c == C_FFN_DOWN) {
        int i = m->i_ffn_down, n = (int)m->n_layer;
        if (m->n_expert > 1 && sscanf(name, "blk.%d.", &i) != 1)
            i = m->i_ffn_down;
        if (ft == FT_Q2_K)
            t = GGML_TYPE_Q3_K;
        else if (ft == FT_Q3_K_M)
            t = i < n / 16 ? GGML_TYPE_Q5_K
                : !m->falcon || use_more_bits(i, n) ? GGML_TYPE_Q4_K : GGML_TYPE_Q3_K;
        else if (ft == FT_Q3_K_L)
            t = m->falcon ? GGML_TYPE_Q4_K : GGML_TYPE_Q5_K;
        else if (ft == FT_Q4_K_M) {
            if (m->falcon)
                t = i < n / 16 ? GGML_TYPE_Q6_K : use_more_bits(i, n) ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
            else if (use_more_bits(i, n))
                t = GGML_TYPE_Q6_K;
        } else if (i < n / 8 && (ft == FT_IQ4_NL || ft == FT_IQ4_XS) && !m->o.has_imatrix)
            t = GGML_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M && use_more_bits(i, n))
            t = GGML_TYPE_Q6_K;
        else if (ft == FT_Q4_K_S && !m->falcon && i < n / 8)
            t = GGML_TYPE_Q5_K;
        else if ((ft == FT_Q4_0 || ft == FT_Q5_0) && m->o.has_imatrix && i < n / 8)
            t = ft == FT_Q4_0 ? GGML_TYPE_Q4_1 : GGML_TYPE_Q5_1;
        m->i_ffn_down++;
    } else if (c == C_ATTN_OUTPUT) {
        if (!m->falcon) {
            if (n_exp8) {
                if (ft == FT_Q2_K || ft == FT_Q3_K_S || ft == FT_Q3_K_M || ft == FT_IQ4_NL ||
                    ft == FT_Q4_K_S || ft == FT_Q4_K_M || ft == FT_IQ4_XS)
                    t = GGML_TYPE_Q5_K;
            } else if (ft == FT_Q2_K) {
                t = GGML_TYPE_Q3_K;
            } else if (ft == FT_Q3_K_M) {
                t = GGML_TYPE_Q4_K;
            } else if (ft == FT_Q3_K_L) {
                t = GGML_TYPE_Q5_K;
            }
        } else if (ft == FT_Q3_K_L) {
            t = GGML_TYPE_Q4_K;
        }
    } else if (c == C_ATTN_QKV) {
        if (ft == FT_Q3_K_M || ft == FT_Q3_K_L)
            t = GGML_TYPE_Q4_K;
        else if (ft == FT_Q4_K_M)
            t = GGML_TYPE_Q5_K;
        else if (ft == FT_Q5_K_M)
            t = GGML_TYPE_Q6_K;
    } else if (c == C_FFN_GATE) {
        m->i_ffn_gate++;
    } else if (c == C_FFN_UP) {
        m->i_ffn_up++;
    }
    return t;
}

/* tensor_type_fallback: a row length the type's blocks do not divide. */
static int
fallback(struct quant_mix *m, const char *name, int64_t ne0, uint32_t t, bool *fb, struct diag *d)
{
    const struct qtype *q = qtype_get(t);
    uint32_t r = t;

    if (ne0 % q->blck == 0)
        return (int)t;
    m->n_fallback++;
    *fb = true;
    switch (t) {
    case GGML_TYPE_IQ1_S: case GGML_TYPE_IQ1_M: case GGML_TYPE_IQ2_XXS: case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S: case GGML_TYPE_IQ3_XXS: case GGML_TYPE_IQ3_S: case GGML_TYPE_IQ4_XS:
        r = GGML_TYPE_IQ4_NL;
        break;
    case GGML_TYPE_Q2_0: case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_TQ1_0:
    case GGML_TYPE_TQ2_0:
        r = GGML_TYPE_Q4_0;
        break;
    case GGML_TYPE_Q4_K: r = GGML_TYPE_Q5_0; break;
    case GGML_TYPE_Q5_K: r = GGML_TYPE_Q5_1; break;
    case GGML_TYPE_Q6_K: r = GGML_TYPE_Q8_0; break;
    default:
        if (q->blck > 32)
            return diag_set(d, ST_RANGE, "tensor '%s': no fallback type for %s with rows of %lld",
                            name, q->name, (long long)ne0);
        break;
    }
    if (ne0 % qtype_get(r)->blck)
        r = GGML_TYPE_F16;
    return (int)r;
}

int
quant_mix_type(struct quant_mix *m, const char *name, uint32_t cur_type, uint32_t n_dims,
               const int64_t *ne, bool *fb, struct diag *d)
{
    enum cat c = category(name);
    uint32_t t = m->default_type;

    *fb = false;
    if (!quant_tensor_allowed(name, n_dims, m->o.keep_output))
        return (int)cur_type;
    if (m->o.embd_type >= 0 && c == C_TOKEN_EMBD)
        return m->o.embd_type;
    if (m->o.output_type >= 0 && c == C_OUTPUT)
        return m->o.output_type;
    if (!type_is_quantized(t))
        return (int)t;
    {
        bool manual = false;
        for (size_t i = 0; i < m->o.n_ov && !manual; i++)
            if (re_search(m->re[i], name)) {
                t = m->o.ov[i].type;
                manual = true;
            }
        if (!manual && !m->o.pure)
            t = mix_rule(m, t, name, ne, c);
    }
    return fallback(m, name, ne[0], t, fb, d);
}
