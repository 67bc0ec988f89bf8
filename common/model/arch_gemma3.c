/*
 * arch_gemma3.c - the gemma3 layer recipe (general.architecture "gemma3"),
 * as llama.cpp builds its graph (src/models/gemma3.cpp).  Per token row:
 *
 *   xn  = rmsnorm(x) * attn_norm                               [n_embd]
 *   q, k, v = xn Wq^T, xn Wk^T, xn Wv^T                        [n_head*hd], [n_kv*hd], [n_kv*hd]
 *   q, k = rmsnorm of each head * attn_q_norm, attn_k_norm     (QK norm)
 *   rope(q), rope(k) at pos, NeoX layout; the sliding-window layers with
 *           their own base (rope.freq_base_swa)
 *   q  *= attn_scale (1 / sqrt(key_length); ggml_scale before attention)
 *   k, v -> the sequence's KV slots
 *   att = attention of q over the sequence's slots, score scale 1; a
 *         sliding-window layer sees the last n_swa slots only
 *   x  += rmsnorm(att Wo^T) * post_attention_norm
 *   xn  = rmsnorm(x) * ffn_norm
 *   x  += rmsnorm((gelu(xn Wgate^T) * (xn Wup^T)) Wdown^T) * post_ffw_norm
 *
 * The embeddings were multiplied by sqrt(n_embd) (forward.c), the norm
 * weights are stored as 1 + w by llama.cpp's converter.  Each step is one
 * executor op over all the chunk's tokens (exec.h), in the order of ggml's
 * floating-point operations.
 */
#include "exec.h"

int
arch_gemma3_layer(struct exec *e, const struct model_layer *L)
{
    const struct model_hparams *hp = &e->m->hp;
    int rc;

    /* attention */
    exec_rmsnorm(e, e->xn, e->x, &L->attn_norm);
    const struct model_weight *wqkv[3] = { &L->wq, &L->wk, &L->wv };
    float *qkv[3] = { e->q, e->k, e->v };
    if ((rc = exec_matmuls(e, 3, wqkv, NULL, e->xn, qkv)) < 0)
        return rc;
    exec_rmsnorm_heads(e, e->q, hp->n_head, &L->attn_q_norm);
    exec_rope(e, e->q, hp->n_head);
    exec_rmsnorm_heads(e, e->k, hp->n_head_kv, &L->attn_k_norm);
    exec_rope(e, e->k, hp->n_head_kv);
    exec_scale(e, e->q, hp->n_head * hp->head_dim, hp->attn_scale);
    exec_kv_store(e, e->k, e->v);
    exec_attention(e, e->q, e->att, 1.0f);
    if ((rc = exec_matmul(e, &L->wo, NULL, e->att, e->tmp)) < 0)
        return rc;
    exec_attn_done(e);
    exec_rmsnorm(e, e->tmp, e->tmp, &L->attn_post_norm);
    exec_add(e, e->x, e->tmp, hp->n_embd);

    /* feed-forward */
    exec_rmsnorm(e, e->xn, e->x, &L->ffn_norm);
    const struct model_weight *wgu[2] = { &L->ffn_gate, &L->ffn_up };
    float *gu[2] = { e->gate, e->up };
    if ((rc = exec_matmuls(e, 2, wgu, NULL, e->xn, gu)) < 0)
        return rc;
    exec_gelu_mul(e, e->gate, e->up, hp->n_ff);
    if ((rc = exec_matmul(e, &L->ffn_down, NULL, e->gate, e->tmp)) < 0)
        return rc;
    exec_rmsnorm(e, e->tmp, e->tmp, &L->ffn_post_norm);
    exec_add(e, e->x, e->tmp, hp->n_embd);
    return 0;
}
