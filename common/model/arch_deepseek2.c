/*
 * arch_deepseek2.c - the deepseek2 layer recipe (general.architecture
 * "deepseek2", dense layers): multi-head latent attention (MLA) in the
 * absorbed form llama.cpp runs (src/models/deepseek2.cpp, is_mla), over a
 * cache that holds per token only the latent and the RoPE key.  Per token
 * row (R = n_rot, C = kv_lora_rank, hd = mla_k = nope + R):
 *
 *   xn  = rmsnorm(x) * attn_norm                               [n_embd]
 *   q   = xn Wq^T, or rmsnorm(xn Wq_a^T) * q_a_norm Wq_b^T      [n_head][nope | R]
 *   kv  = xn Wkv_a^T                                           [C | R]
 *   kv[0..C)  = rmsnorm(kv[0..C)) * kv_a_norm                  the latent c
 *   kv[C..)   = rope(kv[C..)) at pos                           the RoPE key (one, shared)
 *   Q[h] = (q[h][0..nope) Wk_b[h]^T | rope(q[h][nope..)))      [n_head][C + R]: W_UK absorbed
 *   kv -> the sequence's K slot; V is a view of its first C elements
 *   a[h] = attention of Q[h] over the slots (one KV head), scale
 *          mscale^2 / sqrt(hd)                                 [n_head][C]
 *   o[h] = a[h] Wv_b[h]^T                                      [n_head][mla_v]: W_UV after
 *   x  += o Wo^T
 *   x  += SwiGLU FFN (as llama)
 *
 * The parts are assembled with strided row copies (exec_copy_rows); each
 * step is one executor op over all the chunk's tokens (exec.h).
 */
#include "exec.h"

int
arch_deepseek2_layer(struct exec *e, const struct model_layer *L)
{
    const struct model_hparams *hp = &e->m->hp;
    const int64_t H = hp->n_head, R = hp->rope.n_rot, C = hp->kv_lora_rank;
    const int64_t hd = hp->mla_k, nope = hp->mla_nope, K = hp->head_dim;  /* K = C + R */
    const int64_t n = e->n;
    int rc;

    /* attention: the query (low-rank or not) and the latent + RoPE key */
    exec_rmsnorm(e, e->xn, e->x, &L->attn_norm);
    if (hp->q_lora_rank > 0) {
        const struct model_weight *w2[2] = { &L->wq_a, &L->wkv_a };
        float *y2[2] = { e->mla_qa, e->k };
        if ((rc = exec_matmuls(e, 2, w2, NULL, e->xn, y2)) < 0)
            return rc;
        exec_rmsnorm(e, e->mla_qa, e->mla_qa, &L->q_a_norm);
        if ((rc = exec_matmul(e, &L->wq_b, NULL, e->mla_qa, e->mla_q)) < 0)
            return rc;
    } else {
        const struct model_weight *w2[2] = { &L->wq, &L->wkv_a };
        float *y2[2] = { e->mla_q, e->k };
        if ((rc = exec_matmuls(e, 2, w2, NULL, e->xn, y2)) < 0)
            return rc;
    }

    /* the K row: normed latent (through e->v, [n][C]) and the roped key */
    exec_copy_rows(e, e->v, C, e->k, K, n, C);
    exec_rmsnorm(e, e->v, e->v, &L->kv_a_norm);
    exec_copy_rows(e, e->k, K, e->v, C, n, C);
    exec_copy_rows(e, e->mla_pe, R, e->k + C, K, n, R);
    exec_rope_heads(e, e->mla_pe, 1, R);
    exec_copy_rows(e, e->k + C, K, e->mla_pe, R, n, R);

    /* the absorbed query: each head's RoPE part roped, its other part
     * through W_UK (a row per token and head in the copies) */
    exec_copy_rows(e, e->mla_pe, R, e->mla_q + nope, hd, n * H, R);
    exec_rope_heads(e, e->mla_pe, H, R);
    exec_copy_rows(e, e->q + C, K, e->mla_pe, R, n * H, R);
    if ((rc = exec_matmul_heads(e, &L->wk_b, H, e->mla_q, hd, H * hd, e->q, K, H * K)) < 0)
        return rc;

    exec_kv_store(e, e->k, NULL);
    exec_attention(e, e->q, e->att, hp->kq_scale);
    if ((rc = exec_matmul_heads(e, &L->wv_b, H, e->att, C, H * C, e->mla_o, hp->mla_v,
                                H * hp->mla_v)) < 0)
        return rc;
    if ((rc = exec_matmul(e, &L->wo, NULL, e->mla_o, e->tmp)) < 0)
        return rc;
    exec_attn_done(e);
    exec_add(e, e->x, e->tmp, hp->n_embd);

    /* feed-forward: llama's */
    return arch_llama_ffn(e, L);
}
