/*
 * backward_ref.h - the float instances of the trainer's reference kernels
 * (backward_ref.inc), which other tables of backward.h reuse.
 */
#ifndef LLMKIT_BACKWARD_REF_H
#define LLMKIT_BACKWARD_REF_H

#include <stdint.h>

void bw_matmul_fwd_ref(float *y, const float *x, const float *w, const float *b, int64_t n,
                       int64_t m, int64_t k);
void bw_matmul_bwd_ref(float *dx, float *dw, float *db, const float *dy, const float *x,
                       const float *w, int64_t n, int64_t m, int64_t k);
void bw_rmsnorm_fwd_ref(float *y, const float *x, const float *w, int64_t n, int64_t dim,
                        float eps);
void bw_rmsnorm_bwd_ref(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        int64_t n, int64_t dim, float eps);
void bw_silu_mul_fwd_ref(float *y, const float *g, const float *u, int64_t n);
void bw_silu_mul_bwd_ref(float *dg, float *du, const float *dy, const float *g, const float *u,
                         int64_t n);
void bw_rope_fwd_ref(float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim, const float *cs,
                     int64_t n_rot, int style);
void bw_rope_bwd_ref(float *dy, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                     const float *cs, int64_t n_rot, int style);
void bw_attn_fwd_ref(float *out, float *p, const float *q, const float *k, const float *v,
                     int64_t n, int64_t n_head, int64_t n_head_kv, int64_t hd, float scale);
void bw_attn_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *p,
                     const float *q, const float *k, const float *v, int64_t n, int64_t n_head,
                     int64_t n_head_kv, int64_t hd, float scale, float *scratch);
void bw_attn_ttt_fwd_ref(float *out, float *p, const float *q, const float *k, const float *v,
                         int64_t n, int64_t s, int64_t n_head, int64_t n_head_kv, int64_t hd,
                         float scale);
void bw_attn_ttt_bwd_ref(float *dq, float *dk, float *dv, const float *dout, const float *p,
                         const float *q, const float *k, const float *v, int64_t n, int64_t s,
                         int64_t n_head, int64_t n_head_kv, int64_t hd, float scale,
                         float *scratch);
void bw_xent_fwd_ref(float *loss, const float *z, const float *t, int64_t n, int64_t v);
void bw_xent_bwd_ref(float *dz, const float *z, const float *t, const float *wr, int64_t n,
                     int64_t v);
void bw_smoothl1_fwd_ref(float *loss, const float *a, const float *b, int64_t n, int64_t dim);
void bw_smoothl1_bwd_ref(float *da, const float *a, const float *b, const float *wr, int64_t n,
                         int64_t dim);

#endif
