/*
 * model.c - model loading: hyperparameters and tensors as the architecture
 * table describes them (arch.h: llama.cpp's keys with their exact types,
 * tensor names and shapes), tensor views into the mapping with their types
 * and shapes checked, kernels and threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model.h"
#include "qtypes.h"

/* ---- metadata ---- */

/* gemma3's extras, as llama.cpp's loader sets them (src/models/gemma3.cpp):
 * embeddings times sqrtf(n_embd); queries times 1 / sqrtf(key_length), or
 * 1 / sqrtf(n_embd / n_head) for the 27B (62 layers), Gemma's
 * query_pre_attn_scalar; the sliding window, with RoPE base
 * rope.freq_base_swa (llama.cpp's default 10000 when absent) and no
 * scaling in its layers; the final logit softcap when the file has one. */
static void
gemma3_hparams(struct model_hparams *hp)
{
    const struct arch_hparams *a = &hp->keys;

    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->attn_scale = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                       : 1.0f / sqrtf((float)hp->head_dim);
    hp->n_swa = a->sliding_window;
    hp->logit_softcap = arch_has(a, ARCH_HP_FINAL_SOFTCAP) ? (float)a->final_softcap : 0.0f;
    hp->rope_swa = hp->rope;
    hp->rope_swa.freq_base = arch_has(a, ARCH_HP_ROPE_FREQ_BASE_SWA)
                                 ? (float)a->rope_freq_base_swa : 10000.0f;
    hp->rope_swa.freq_scale = 1.0f;
}

/* deepseek2's MLA as llama.cpp's current converter writes it: the cache
 * geometry of the absorbed form in key_length (kv_lora_rank + n_rot) and
 * value_length (kv_lora_rank) with one KV head, the per-head sizes in
 * key_length_mla / value_length_mla (older files without them carry the
 * unsplit attn_kv_b, which llama.cpp runs unabsorbed); dense layers only.
 * Score scale mscale^2 / sqrt(key_length_mla), mscale 1 without YaRN
 * (src/models/deepseek2.cpp). */
static int
deepseek2_hparams(const struct gguf *g, struct model_hparams *hp, struct diag *d)
{
    const struct arch_hparams *a = &hp->keys;
    char k1[256], k2[256], t[96];

    if (!arch_has(a, ARCH_HP_KEY_LENGTH_MLA) || !arch_has(a, ARCH_HP_VALUE_LENGTH_MLA))
        return diag_set(d, ST_FORMAT, "missing key '%s' or '%s': an older MLA layout (the "
                        "unsplit attn_kv_b) that llmkit does not run; convert the model with a "
                        "current llama.cpp",
                        arch_hp_key(a, ARCH_HP_KEY_LENGTH_MLA, k1, sizeof(k1)),
                        arch_hp_key(a, ARCH_HP_VALUE_LENGTH_MLA, k2, sizeof(k2)));
    if (a->n_expert > 0 || (arch_has(a, ARCH_HP_LEADING_DENSE) && a->n_layer_dense_lead < a->n_layer)) {
        /* the first MoE layer's router, as llama.cpp would load it */
        int64_t il = arch_has(a, ARCH_HP_LEADING_DENSE) && a->n_layer_dense_lead < a->n_layer
                         ? a->n_layer_dense_lead : 0;
        snprintf(t, sizeof(t), "blk.%lld.ffn_gate_inp.weight", (long long)il);
        return diag_set(d, ST_FORMAT, "layer %lld is a mixture-of-experts layer (%s%s%s, %lld "
                        "experts; key '%s' = %lld of %lld layers dense): not supported, dense "
                        "deepseek2 models only", (long long)il,
                        gguf_find_tensor(g, t) >= 0 ? "tensor '" : "no dense FFN",
                        gguf_find_tensor(g, t) >= 0 ? t : "",
                        gguf_find_tensor(g, t) >= 0 ? "'" : "", (long long)a->n_expert,
                        arch_hp_key(a, ARCH_HP_LEADING_DENSE, k1, sizeof(k1)),
                        (long long)(arch_has(a, ARCH_HP_LEADING_DENSE) ? a->n_layer_dense_lead : 0),
                        (long long)a->n_layer);
    }
    if (!arch_has(a, ARCH_HP_LEADING_DENSE))
        return diag_set(d, ST_FORMAT, "missing key '%s': without it every layer is "
                        "mixture-of-experts (not supported: dense deepseek2 models only)",
                        arch_hp_key(a, ARCH_HP_LEADING_DENSE, k1, sizeof(k1)));
    hp->mla = true;
    hp->kv_lora_rank = a->kv_lora_rank;
    hp->q_lora_rank = a->q_lora_rank;
    hp->mla_k = a->head_dim_mla;
    hp->mla_v = a->head_dim_v_mla;
    hp->mla_nope = hp->mla_k - a->n_rot;
    if (hp->kv_lora_rank < 1 || hp->mla_nope < 1 || a->n_rot % 2)
        return diag_set(d, ST_FORMAT, "key '%s' = %lld, '%s' = %lld, rope dimension %lld: no "
                        "latent or non-RoPE part, or an odd RoPE part",
                        arch_hp_key(a, ARCH_HP_KV_LORA_RANK, k1, sizeof(k1)),
                        (long long)hp->kv_lora_rank,
                        arch_hp_key(a, ARCH_HP_KEY_LENGTH_MLA, k2, sizeof(k2)),
                        (long long)hp->mla_k, (long long)a->n_rot);
    if (hp->n_head_kv != 1 || hp->head_dim != hp->kv_lora_rank + a->n_rot ||
        hp->head_dim_v != hp->kv_lora_rank)
        return diag_set(d, ST_FORMAT, "key '%s' = %lld, '%s' = %lld, %lld KV heads: expected "
                        "the absorbed MLA cache (kv_lora_rank + rope = %lld, kv_lora_rank = "
                        "%lld, 1 KV head)",
                        arch_hp_key(a, ARCH_HP_KEY_LENGTH, k1, sizeof(k1)), (long long)hp->head_dim,
                        arch_hp_key(a, ARCH_HP_VALUE_LENGTH, k2, sizeof(k2)),
                        (long long)hp->head_dim_v, (long long)hp->n_head_kv,
                        (long long)(hp->kv_lora_rank + a->n_rot), (long long)hp->kv_lora_rank);
    return 0;
}

/* MLA's score scale, once the RoPE scaling is known: mscale^2 /
 * sqrt(key_length_mla), mscale from llama.cpp's YaRN attention factor
 * (yarn_hparams) and the log multiplier (stored as 0.1 * mscale_all_dim);
 * 1 without scaling. */
static void
mla_kq_scale(struct model_hparams *hp)
{
    const struct arch_hparams *a = &hp->keys;
    float fs = hp->rope.freq_scale;
    float log_mul = arch_has(a, ARCH_HP_YARN_LOG_MUL) ? (float)a->yarn_log_mul / 0.1f : 0.0f;
    float af = hp->rope.ext_factor != 0.0f ? hp->rope.attn_factor : 1.0f;
    float af_org = af * (1.0f + 0.1f * logf(1.0f / fs));
    float mscale = af_org * (1.0f + 0.1f * log_mul * logf(1.0f / fs));
    hp->kq_scale = 1.0f * mscale * mscale / sqrtf((float)hp->mla_k);
}

/* YaRN as llama.cpp sets it up (llama-context.cpp, ggml
 * ggml_rope_yarn_corr_dims): ext_factor 1 unless the file says, beta fast
 * 32 and slow 1 unless the file says, the original context from
 * rope.scaling.original_context_length (else context_length); the
 * attention factor get_mscale(s, m) / get_mscale(s, m_all) (deepseek2's
 * log multiplier m_all, m = m_all) or get_mscale(s, 1), divided by 1 + 0.1
 * ln s, which rope_yarn multiplies back. */
static void
yarn_hparams(struct model_hparams *hp)
{
    const struct arch_hparams *a = &hp->keys;
    struct rope_params *rp = &hp->rope;
    float factor = 1.0f / rp->freq_scale;
    float bf = arch_has(a, ARCH_HP_YARN_BETA_FAST) ? (float)a->yarn_beta_fast : 32.0f;
    float bs = arch_has(a, ARCH_HP_YARN_BETA_SLOW) ? (float)a->yarn_beta_slow : 1.0f;
    float n_orig = (float)(arch_has(a, ARCH_HP_ROPE_ORIG_CTX) ? a->rope_orig_ctx : a->n_ctx_train);
    float nd = (float)rp->n_rot, base = rp->freq_base;
    const float pi = 3.14159265358979323846f;

    rp->ext_factor = arch_has(a, ARCH_HP_YARN_EXT_FACTOR) ? (float)a->yarn_ext_factor : 1.0f;
    rp->attn_factor = 1.0f;
    if (rp->ext_factor == 0.0f)
        return;
    float lo = floorf(nd * logf(n_orig / (bf * 2 * pi)) / (2 * logf(base)));
    float hi = ceilf(nd * logf(n_orig / (bs * 2 * pi)) / (2 * logf(base)));
    rp->corr_dims[0] = lo > 0 ? lo : 0;
    rp->corr_dims[1] = hi < nd - 1 ? hi : nd - 1;
#define GET_MSCALE(s, m) ((s) <= 1.0f ? 1.0f : (0.1f * (m) * logf(s) + 1.0f))
    if (arch_has(a, ARCH_HP_YARN_LOG_MUL) && a->yarn_log_mul != 0.0) {
        float m_all = (float)a->yarn_log_mul / 0.1f;
        float m = hp->arch == MODEL_ARCH_DEEPSEEK2 && m_all != 1.0f ? m_all : 1.0f;
        rp->attn_factor = GET_MSCALE(factor, m) / GET_MSCALE(factor, m_all);
    } else {
        rp->attn_factor = GET_MSCALE(factor, 1.0f);
    }
#undef GET_MSCALE
    rp->attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
}

/* The hyperparameters through the architecture table (arch.h): its reader
 * and rules (required keys with llama.cpp's exact types, ranges, defaults),
 * then what the recipe cannot run. */
static int
load_hparams(struct model *m, struct diag *d)
{
    static const enum arch_hp per_layer[] = { ARCH_HP_FEED_FORWARD_LENGTH, ARCH_HP_HEAD_COUNT,
                                              ARCH_HP_HEAD_COUNT_KV };
    struct model_hparams *hp = &m->hp;
    struct arch_hparams *a = &hp->keys;
    struct rope_params *rp = &hp->rope;
    char key[256];
    size_t i;
    int rc;

    if ((rc = arch_read_hparams(&m->gguf, 0, a, d)) < 0)
        return rc;
    if (!a->arch)
        return diag_set(d, ST_FORMAT, "unknown architecture '%.64s'", a->name);
    if (a->arch->recipe == ARCH_RECIPE_NONE)
        return diag_set(d, ST_FORMAT, "architecture '%.64s' is not supported yet", a->name);
    if ((rc = arch_check_types(a, d)) < 0 || (rc = arch_check_hparams(a, d)) < 0)
        return rc;
    for (i = 0; i < sizeof(per_layer) / sizeof(per_layer[0]); i++)
        if (a->varies & ARCH_BIT(per_layer[i]))
            return diag_set(d, ST_FORMAT, "key '%s': per-layer values differ (not supported)",
                            arch_hp_key(a, per_layer[i], key, sizeof(key)));
    if (a->n_expert > 0 && a->arch->id != ARCH_ID_DEEPSEEK2)
        return diag_set(d, ST_FORMAT, "mixture-of-experts models are not supported");

    hp->arch = (enum model_arch)a->arch->id;
    hp->recipe = a->arch->recipe;
    hp->arch_name = a->name;
    hp->n_layer = a->n_layer;
    hp->n_ctx_train = a->n_ctx_train;
    hp->n_embd = a->n_embd;
    hp->n_ff = a->n_ff;
    hp->n_head = a->n_head;
    hp->n_head_kv = a->n_head_kv;
    hp->head_dim = a->head_dim;
    hp->head_dim_v = a->head_dim_v;
    hp->rms_eps = (float)a->rms_eps;

    /* rope: over the whole head, the normal (adjacent-pair) layout, or
     * NeoX's (halves) as the table says (llama_model_rope_type: qwen2,
     * qwen3, gemma3) */
    rp->style = a->arch->rope_neox ? ROPE_NEOX : ROPE_NORM;
    rp->n_rot = a->n_rot;
    if (hp->arch == MODEL_ARCH_DEEPSEEK2 && (rc = deepseek2_hparams(&m->gguf, hp, d)) < 0)
        return rc;
    if (rp->n_rot != hp->head_dim && !hp->mla)
        return diag_set(d, ST_FORMAT, "key '%s': %lld, expected key_length %lld",
                        arch_hp_key(a, ARCH_HP_ROPE_DIM, key, sizeof(key)), (long long)rp->n_rot,
                        (long long)hp->head_dim);
    if (rp->n_rot % 2 != 0)
        return diag_set(d, ST_FORMAT, "key '%s': odd value %lld",
                        arch_hp_key(a, ARCH_HP_ROPE_DIM, key, sizeof(key)), (long long)rp->n_rot);
    rp->freq_base = (float)a->rope_freq_base;
    rp->freq_scale = 1.0f;
    /* no rope.scaling.type: linear with rope.scaling.factor or rope.scale_linear */
    const char *stype = a->rope_scaling ? a->rope_scaling : "linear";
    if (strcmp(stype, "linear") == 0 ||
        (strcmp(stype, "yarn") == 0 && hp->arch == MODEL_ARCH_DEEPSEEK2)) {
        float factor = (float)a->rope_factor;
        if (factor > 0.0f)
            rp->freq_scale = 1.0f / factor;
        if (stype[0] == 'y')
            yarn_hparams(hp);
    } else if (strcmp(stype, "none") != 0) {
        return diag_set(d, ST_FORMAT, "rope scaling '%s' is not supported%s", stype,
                        strcmp(stype, "yarn") == 0 ? " (for this architecture)" : "");
    }
    if (hp->mla)
        mla_kq_scale(hp);
    if (hp->arch == MODEL_ARCH_GEMMA3)
        gemma3_hparams(hp);
    return 0;
}

/* ---- tensors ---- */

static int
find_tensor(struct model *m, struct model_weight *w, const char *name, int64_t rows,
            int64_t cols, int is_matrix, int required, int64_t heads, struct diag *d)
{
    int64_t i = gguf_find_tensor(&m->gguf, name);
    const struct gguf_tensor *t;

    memset(w, 0, sizeof(*w));
    if (i < 0) {
        if (required)
            return diag_set(d, ST_FORMAT, "missing tensor '%s'", name);
        return 0;
    }
    t = &m->gguf.t[i];
    /* rows x cols; a stack of heads matrices (ARCH_T_HEADS) may be stored as
     * [heads][rows / heads][cols] */
    int64_t nrows = is_matrix ? rows : 1, ne1 = nrows, ne2 = 1;
    if (heads > 1 && t->ne[2] == heads && rows % heads == 0) {
        ne1 = rows / heads;
        ne2 = heads;
    }
    if (t->ne[0] != cols || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1) {
        if (is_matrix)
            return diag_set(d, ST_FORMAT,
                            "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                            name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                            (long long)t->ne[3], (long long)cols, (long long)rows);
        return diag_set(d, ST_FORMAT, "tensor '%s': shape [%lld, %lld, %lld, %lld], expected [%lld]",
                        name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)t->ne[3], (long long)cols);
    }
    const struct qtype *qt = qtype_get(t->type);
    if (is_matrix) {
        if (!qt || !m->be->ops->supports(m->be, t->type))
            return diag_set(d, ST_FORMAT, "tensor '%s': type %s is not supported for compute",
                            name, qt ? qt->name : "unknown");
    } else if (t->type != GGML_TYPE_F32) {
        return diag_set(d, ST_FORMAT, "tensor '%s': type %s, expected F32", name,
                        qt ? qt->name : "unknown");
    }
    size_t rb = qtype_row_bytes(t->type, cols);
    if (rb == 0)
        return diag_set(d, ST_FORMAT, "tensor '%s': row of %lld is not a multiple of the %s block",
                        name, (long long)cols, qt->name);
    if (!t->data || t->nbytes / rb < (uint64_t)nrows)
        return diag_set(d, ST_FORMAT, "tensor '%s': data missing or short", name);
    w->name = t->name.p;
    w->data = t->data;
    w->type = t->type;
    w->rows = nrows;
    w->cols = cols;
    w->row_bytes = rb;
    return 0;
}

/* Where the model keeps a table tensor (arch.h); NULL when the recipe does
 * not use it (FFN biases). */
static struct model_weight *
global_slot(struct model *m, enum arch_weight w)
{
    switch (w) {
    case ARCH_W_TOKEN_EMBD: return &m->tok_embd;
    case ARCH_W_OUTPUT_NORM: return &m->output_norm;
    case ARCH_W_OUTPUT: return &m->output;
    case ARCH_W_ROPE_FREQS: return &m->rope_freqs;
    default: return NULL;
    }
}

struct model_weight *
model_layer_weight(struct model_layer *L, enum arch_weight w)
{
    switch (w) {
    case ARCH_W_ATTN_NORM: return &L->attn_norm;
    case ARCH_W_ATTN_Q: return &L->wq;
    case ARCH_W_ATTN_K: return &L->wk;
    case ARCH_W_ATTN_V: return &L->wv;
    case ARCH_W_ATTN_OUT: return &L->wo;
    case ARCH_W_ATTN_Q_BIAS: return &L->bq;
    case ARCH_W_ATTN_K_BIAS: return &L->bk;
    case ARCH_W_ATTN_V_BIAS: return &L->bv;
    case ARCH_W_ATTN_OUT_BIAS: return &L->bo;
    case ARCH_W_FFN_NORM: return &L->ffn_norm;
    case ARCH_W_FFN_GATE: return &L->ffn_gate;
    case ARCH_W_FFN_UP: return &L->ffn_up;
    case ARCH_W_FFN_DOWN: return &L->ffn_down;
    case ARCH_W_ATTN_Q_NORM: return &L->attn_q_norm;
    case ARCH_W_ATTN_K_NORM: return &L->attn_k_norm;
    case ARCH_W_ATTN_POST_NORM: return &L->attn_post_norm;
    case ARCH_W_FFN_POST_NORM: return &L->ffn_post_norm;
    case ARCH_W_ATTN_Q_A: return &L->wq_a;
    case ARCH_W_ATTN_Q_A_NORM: return &L->q_a_norm;
    case ARCH_W_ATTN_Q_B: return &L->wq_b;
    case ARCH_W_ATTN_KV_A_MQA: return &L->wkv_a;
    case ARCH_W_ATTN_KV_A_NORM: return &L->kv_a_norm;
    case ARCH_W_ATTN_K_B: return &L->wk_b;
    case ARCH_W_ATTN_V_B: return &L->wv_b;
    default: return NULL;
    }
}

/* A tensor dimension: the table's, the vocabulary from the embedding. */
static int64_t
dim_of(const struct model_hparams *hp, enum arch_dim dim)
{
    return dim == ARCH_DIM_VOCAB ? hp->n_vocab : arch_dim(&hp->keys, dim);
}

/* An MLA layer has the query weights its q_lora_rank says, and no
 * mixture-of-experts tensors (named in the refusal). */
static int
mla_layer_check(struct model *m, int64_t l, const struct model_layer *L, struct diag *d)
{
    static const char *const moe[] = { "ffn_gate_inp.weight", "ffn_gate_exps.weight",
                                       "ffn_up_exps.weight", "ffn_down_exps.weight",
                                       "ffn_gate_up_exps.weight", "ffn_gate_shexp.weight",
                                       "attn_kv_b.weight" };
    const bool lora = m->hp.q_lora_rank > 0;
    char name[96];

    for (size_t i = 0; i < sizeof(moe) / sizeof(moe[0]); i++) {
        snprintf(name, sizeof(name), "blk.%lld.%s", (long long)l, moe[i]);
        if (gguf_find_tensor(&m->gguf, name) >= 0)
            return diag_set(d, ST_FORMAT, "tensor '%s': %s", name,
                            i + 1 < sizeof(moe) / sizeof(moe[0])
                                ? "a mixture-of-experts layer (not supported: dense deepseek2 "
                                  "models only)"
                                : "the unsplit MLA layout of older GGUFs (not supported)");
    }
    const struct model_weight *need = lora ? (!L->wq_a.data ? &L->wq_a : !L->q_a_norm.data
                                                  ? &L->q_a_norm : !L->wq_b.data ? &L->wq_b : NULL)
                                           : (!L->wq.data ? &L->wq : NULL);
    if (need)
        return diag_set(d, ST_FORMAT, "missing tensor 'blk.%lld.%s' (q_lora_rank %lld)",
                        (long long)l, need == &L->wq ? "attn_q.weight" : need == &L->wq_a
                        ? "attn_q_a.weight" : need == &L->q_a_norm ? "attn_q_a_norm.weight"
                        : "attn_q_b.weight", (long long)m->hp.q_lora_rank);
    return 0;
}

/* The architecture's tensors (arch.h), in the table's order. */
static int
load_tensors(struct model *m, struct diag *d)
{
    struct model_hparams *hp = &m->hp;
    const struct arch_tensor *t;
    char name[96];
    int rc;

    /* vocabulary size: the embedding's rows, checked against the token list */
    int64_t ti = gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (ti < 0)
        return diag_set(d, ST_FORMAT, "missing tensor 'token_embd.weight'");
    hp->n_vocab = m->gguf.t[ti].ne[1];
    const struct gguf_kv *tok = gguf_get(&m->gguf, "tokenizer.ggml.tokens");
    if (tok && tok->type == GGUF_TYPE_ARRAY && tok->n != (uint64_t)hp->n_vocab)
        return diag_set(d, ST_FORMAT, "tensor 'token_embd.weight': %lld rows, but %llu tokens",
                        (long long)hp->n_vocab, (unsigned long long)tok->n);
    if (hp->n_vocab < 1 || hp->n_vocab > INT32_MAX)
        return diag_set(d, ST_FORMAT, "tensor 'token_embd.weight': bad vocabulary size %lld",
                        (long long)hp->n_vocab);
    for (t = hp->keys.arch->tensors; t->gguf; t++) {
        struct model_weight *w = t->flags & ARCH_T_LAYER ? NULL : global_slot(m, t->w);
        if (w && (rc = find_tensor(m, w, t->gguf, dim_of(hp, t->rows), dim_of(hp, t->cols),
                                   (t->flags & ARCH_T_MATRIX) != 0,
                                   (t->flags & ARCH_T_REQUIRED) != 0, 1, d)) < 0)
            return rc;
    }
    /* qwen2's loader takes an LM head bias; no model we know has one */
    if (gguf_find_tensor(&m->gguf, "output.bias") >= 0)
        return diag_set(d, ST_FORMAT, "tensor 'output.bias': an LM head bias is not supported");
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output)
        m->output = m->tok_embd;
    hp->rope.freq_factors = m->rope_freqs.data;

    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    m->swa_layers = calloc((size_t)hp->n_layer, 1);
    if (!m->layers || !m->swa_layers)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (int64_t l = 0; l < hp->n_layer; l++) {
        struct model_layer *L = &m->layers[l];
        L->swa = hp->n_swa > 0 && arch_swa_layer(&hp->keys, l);
        m->swa_layers[l] = L->swa;
        for (t = hp->keys.arch->tensors; t->gguf; t++) {
            struct model_weight *w = t->flags & ARCH_T_LAYER ? model_layer_weight(L, t->w) : NULL;
            if (!w)
                continue;
            snprintf(name, sizeof(name), "blk.%lld.%s", (long long)l, t->gguf);
            if ((rc = find_tensor(m, w, name, dim_of(hp, t->rows), dim_of(hp, t->cols),
                                  (t->flags & ARCH_T_MATRIX) != 0,
                                  (t->flags & ARCH_T_REQUIRED) != 0,
                                  t->flags & ARCH_T_HEADS ? hp->n_head : 1, d)) < 0)
                return rc;
        }
        if (hp->mla && (rc = mla_layer_check(m, l, L, d)) < 0)
            return rc;
        if (gguf_find_tensor(&m->gguf, (snprintf(name, sizeof(name), "blk.%lld.attn_qkv.weight",
                                                 (long long)l), name)) >= 0)
            return diag_set(d, ST_FORMAT, "tensor '%s': fused qkv is not supported", name);
    }
    return 0;
}

/* matmul weight i of the model: 7 per layer, then the output */
static struct model_weight *
mm_weight(struct model *m, int64_t i)
{
    if (i == 7 * m->hp.n_layer)
        return &m->output;
    struct model_layer *L = &m->layers[i / 7];
    struct model_weight *lw[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up,
                                   &L->ffn_down };
    return lw[i % 7];
}

/* bytes of weight w's packed form, 0 when the table keeps it as it is */
static size_t
pack_bytes(const struct model *m, const struct model_weight *w)
{
    return w->data ? m->be->ops->pack_size(m->be, w->type, w->rows, w->cols) : 0;
}

#define PACK_SLICE_BYTES ((size_t)4 << 20)

/* The matmul weights the backend keeps in its own layout (its pack),
 * packed once into one buffer, in slices of about PACK_SLICE_BYTES (the
 * layout is cut by rows: backend.h); the GGUF pages of each slice are
 * dropped from memory once it is packed (the mapping stays valid: a later
 * read faults them back in from the file), so the model costs about its
 * file size, not twice it, at the end and while packing (the largest matrix
 * is not held twice: Gemma 3's 94 MB embedding in Q4_0). */
static int
pack_weights(struct model *m, struct diag *d)
{
    const int64_t n = 7 * m->hp.n_layer + 1;
    const long pg = sysconf(_SC_PAGESIZE);
    size_t total = 0, at = 0;

    for (int64_t i = 0; i < n; i++)
        total += (pack_bytes(m, mm_weight(m, i)) + 63) & ~(size_t)63;
    if (!total)
        return 0;
    m->pack_buf = m->be->ops->alloc(m->be, total);
    if (!m->pack_buf)
        return diag_set(d, ST_NOMEM, "out of memory packing the weights (%zu bytes)", total);
    for (int64_t i = 0; i < n; i++) {
        struct model_weight *w = mm_weight(m, i);
        size_t b = pack_bytes(m, w);
        if (!b)
            continue;
        uint8_t *dst = (uint8_t *)m->pack_buf + at;
        at += (b + 63) & ~(size_t)63;
        struct backend_weight bw = model_weight_view(w);
        const struct backend_ops *bo = m->be->ops;
        int64_t slice = (int64_t)(PACK_SLICE_BYTES / w->row_bytes) / BACKEND_PACK_SLICE *
                        BACKEND_PACK_SLICE;
        if (slice < BACKEND_PACK_SLICE)
            slice = BACKEND_PACK_SLICE;
        /* a layout not cut by rows (the sizes do not add up) packs whole */
        if (slice < w->rows && bo->pack_size(m->be, w->type, slice, w->cols) +
                                       bo->pack_size(m->be, w->type, w->rows - slice, w->cols) != b)
            slice = w->rows;
        /* (pages of a large page-cache folio that the tensor covers only in
         * part stay mapped: with 2 MiB folios, about a quarter of the
         * dropped bytes for SmolLM2's small tensors) */
        uintptr_t a = ((uintptr_t)w->data + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
        for (int64_t r = 0; r < w->rows; r += slice) {
            struct backend_weight sw = bw;
            sw.data = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
            sw.rows = w->rows - r < slice ? w->rows - r : slice;
            bo->pack(m->be, dst + bo->pack_size(m->be, w->type, r, w->cols), &sw);
            uintptr_t e = ((uintptr_t)sw.data + w->row_bytes * (size_t)sw.rows) &
                          ~((uintptr_t)pg - 1);
            if (pg > 0 && e > a) {
                (void)madvise((void *)a, e - a, MADV_DONTNEED);
                a = e;
            }
        }
        w->packed = dst;
    }
    return 0;
}

int
model_load(struct model **out, const char *path, const struct model_opts *o, struct diag *d)
{
    struct model_opts def = MODEL_OPTS_INIT;
    struct model *m;
    int rc;

    *out = NULL;
    if (!o)
        o = &def;
    m = calloc(1, sizeof(*m));
    if (!m)
        return diag_set(d, ST_NOMEM, "out of memory");
    struct backend_config bc = { o->n_threads, o->kernel };
    char why[DIAG_MSG_MAX];
    if ((rc = backend_open(&m->be, o->device, &bc, why, sizeof(why))) < 0) {
        free(m);
        return diag_errno(d, rc, why);
    }
    /* a FIFO, device or socket: refused (4, as for a directory), not waited on */
    rc = gguf_open_file(&m->gguf, path, d);
    if (rc < 0) {
        backend_close(m->be);
        free(m);
        return rc;
    }
    if (!m->gguf.src || !m->gguf.src->map) {
        rc = diag_set(d, ST_IO, "a model must be a regular file (it is mapped, not streamed)");
        goto err;
    }
    if ((rc = load_hparams(m, d)) < 0 || (rc = load_tensors(m, d)) < 0 ||
        (rc = pack_weights(m, d)) < 0)
        goto err;
    m->max_batch = o->max_batch;
    *out = m;
    return 0;
err:
    model_unload(m);
    return rc;
}

void
model_unload(struct model *m)
{
    if (!m)
        return;
    free(m->layers);
    free(m->swa_layers);
    if (m->pack_buf)
        m->be->ops->free(m->be, m->pack_buf);
    gguf_release(&m->gguf);
    backend_close(m->be);
    free(m);
}

void
model_kv_config(const struct model *m, size_t mem, uint32_t dtype, struct kv_config *c)
{
    struct kv_config def = KV_CONFIG_INIT;

    *c = def;
    c->n_layer = m->hp.n_layer;
    c->n_head_kv = m->hp.n_head_kv;
    c->head_dim_k = m->hp.head_dim;
    c->head_dim_v = m->hp.head_dim_v;
    c->dtype = dtype;
    c->mem = mem;
    if (m->hp.n_swa > 0) {
        c->swa = m->swa_layers;
        c->swa_window = m->hp.n_swa;
    }
    c->v_in_k = m->hp.mla;
    /* a device backend keeps the pool in its memory */
    c->be = m->be->host ? NULL : m->be;
}

double
model_attn_slots(const struct model *m, int64_t pos)
{
    int64_t n_win = 0, all = pos + 1;

    for (int64_t l = 0; m->hp.n_swa > 0 && l < m->hp.n_layer; l++)
        n_win += m->layers[l].swa;
    double win = all < m->hp.n_swa ? (double)all : (double)m->hp.n_swa;
    return ((double)(m->hp.n_layer - n_win) * (double)all + (double)n_win * win) /
           (double)m->hp.n_layer;
}

size_t
model_kv_bytes_per_token(const struct model *m, uint32_t dtype)
{
    return (size_t)m->hp.n_layer * (size_t)m->hp.n_head_kv *
           (kv_dtype_row_bytes(dtype, m->hp.head_dim) +
            (m->hp.mla ? 0 : kv_dtype_row_bytes(dtype, m->hp.head_dim_v)));
}
