/*
 * arch_llama.c - the llama layer recipe (general.architecture "llama",
 * "qwen2", "qwen3"): a pre-norm attention block and a SwiGLU feed-forward
 * block, each added to the residual stream, as in llama2.c's forward() and
 * llama.cpp's graphs (src/models/llama.cpp, qwen2.cpp, qwen3.cpp).  Per
 * token row:
 *
 *   xn  = rmsnorm(x) * attn_norm                               [n_embd]
 *   q, k, v = xn Wq^T, xn Wk^T, xn Wv^T   (+ biases: qwen2)    [n_head*hd], [n_kv*hd], [n_kv*hdv]
 *   q, k = rmsnorm of each head * attn_q_norm, attn_k_norm     (qwen3's QK norm, when present)
 *   rope(q), rope(k) at pos (adjacent pairs; NeoX halves for qwen2/3);
 *           k, v -> the sequence's KV slots
 *   att = attention of q over the sequence's slots             [n_head*hdv]
 *   x  += att Wo^T   (+ bias)
 *   xn  = rmsnorm(x) * ffn_norm
 *   x  += (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T              (gate, up: [n_ff])
 *
 * Each step is one executor op over all the chunk's tokens (exec.h); the
 * order of the steps is the order of the floating-point operations.
 */
#include <math.h>

#include "exec.h"

int
arch_llama_layer(struct exec *e, const struct model_layer *L)
{
    const struct model_hparams *hp = &e->m->hp;
    int rc;

    /* attention */
    exec_rmsnorm(e, e->xn, e->x, &L->attn_norm);
    const struct model_weight *wqkv[3] = { &L->wq, &L->wk, &L->wv };
    const struct model_weight *bqkv[3] = { &L->bq, &L->bk, &L->bv };
    float *qkv[3] = { e->q, e->k, e->v };
    if ((rc = exec_matmuls(e, 3, wqkv, bqkv, e->xn, qkv)) < 0)
        return rc;
    if (L->attn_q_norm.data)
        exec_rmsnorm_heads(e, e->q, hp->n_head, &L->attn_q_norm);
    exec_rope(e, e->q, hp->n_head);
    if (L->attn_k_norm.data)
        exec_rmsnorm_heads(e, e->k, hp->n_head_kv, &L->attn_k_norm);
    exec_rope(e, e->k, hp->n_head_kv);
    exec_kv_store(e, e->k, e->v);
    exec_attention(e, e->q, e->att, 1.0f / sqrtf((float)hp->head_dim));
    if ((rc = exec_matmul(e, &L->wo, &L->bo, e->att, e->tmp)) < 0)
        return rc;
    exec_attn_done(e);
    exec_add(e, e->x, e->tmp, hp->n_embd);

    return arch_llama_ffn(e, L);
}

int
arch_llama_ffn(struct exec *e, const struct model_layer *L)
{
    const struct model_hparams *hp = &e->m->hp;
    int rc;

    exec_rmsnorm(e, e->xn, e->x, &L->ffn_norm);
    const struct model_weight *wgu[2] = { &L->ffn_gate, &L->ffn_up };
    float *gu[2] = { e->gate, e->up };
    if ((rc = exec_matmuls(e, 2, wgu, NULL, e->xn, gu)) < 0)
        return rc;
    exec_silu_mul(e, e->gate, e->up, hp->n_ff);
    if ((rc = exec_matmul(e, &L->ffn_down, NULL, e->gate, e->tmp)) < 0)
        return rc;
    exec_add(e, e->x, e->tmp, hp->n_embd);
    return 0;
}
