/*
 * backward.h - the trainer's kernel table: the forward and backward of the
 * ops of one llama decoder layer and of the EAGLE losses, on dense f32
 * activations (struct backend_ops.backward, backend.h).
 *
 * The forward pass of inference (ops.h) mirrors llama.cpp bit for bit over
 * quantized weights and a paged cache; training needs neither: its weights
 * are f32, its sequences are whole (causal attention over the n tokens of
 * one call) and every intermediate the backward needs is kept by the caller.
 * So the trainer's forward ops live here, beside their backward.
 *
 * Conventions.  Matrices are row-major; a weight W [m][k] maps k inputs to
 * m outputs (y = x W^T), as GGUF stores it.  Every backward op ACCUMULATES
 * into its gradient outputs (dx += ..., dw += ...): the caller zeroes them,
 * and a tensor read by two branches (the residual stream) gets both
 * contributions without a copy.  A NULL gradient output is not computed.
 * RoPE's backward is the one exception: it rotates dy in place into dx.
 *
 * The scalar reference (cpu/backward_ref.c, table backward_ops_ref) is the
 * specification: plain loops, sums in the element type.  The same source is
 * compiled once more in double (the bw_*_ref64 functions below), which the
 * tests check against central finite differences; backward_ops_blas (when
 * built with OpenBLAS) computes matmul and attention with sgemm and the
 * element-wise ops as the reference does, and is tested against it.
 */
#ifndef LLMKIT_BACKWARD_H
#define LLMKIT_BACKWARD_H

#include <stddef.h>
#include <stdint.h>

struct backend_backward_ops {
    const char *name;           /* "ref", "blas" */

    /* y[n][m] = x[n][k] W[m][k]^T (+ b[m]; b may be NULL) */
    void (*matmul_fwd)(float *y, const float *x, const float *w, const float *b, int64_t n,
                       int64_t m, int64_t k);
    /* dx[n][k] += dy W; dw[m][k] += dy^T x; db[m] += sum over rows of dy */
    void (*matmul_bwd)(float *dx, float *dw, float *db, const float *dy, const float *x,
                       const float *w, int64_t n, int64_t m, int64_t k);

    /* y[t] = x[t] r_t * w, r_t = 1 / sqrt(mean(x[t]^2) + eps), rows of dim;
     * w may be NULL (no weight) */
    void (*rmsnorm_fwd)(float *y, const float *x, const float *w, int64_t n, int64_t dim,
                        float eps);
    void (*rmsnorm_bwd)(float *dx, float *dw, const float *dy, const float *x, const float *w,
                        int64_t n, int64_t dim, float eps);

    /* y[i] = silu(g[i]) * u[i] over n elements (SwiGLU) */
    void (*silu_mul_fwd)(float *y, const float *g, const float *u, int64_t n);
    void (*silu_mul_bwd)(float *dg, float *du, const float *dy, const float *g, const float *u,
                         int64_t n);

    /* RoPE in place on x [n_tok][n_heads * head_dim]: row t rotated by the
     * angles cs + t * n_rot (cos at [i], sin at [n_rot/2 + i], as
     * ops_rope_angles writes them); style ROPE_NORM (pairs 2i, 2i+1) or
     * ROPE_NEOX (i, i + n_rot/2).  bwd rotates dy [n_tok][...] in place by
     * the inverse rotation, leaving dx. */
    void (*rope_fwd)(float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim, const float *cs,
                     int64_t n_rot, int style);
    void (*rope_bwd)(float *dy, int64_t n_tok, int64_t n_heads, int64_t head_dim, const float *cs,
                     int64_t n_rot, int style);

    /* Causal attention over one sequence of n tokens: q [n][n_head * hd],
     * k and v [n][n_head_kv * hd] (query head h reads KV head h / (n_head /
     * n_head_kv)), out [n][n_head * hd];
     * p [n_head][n][n] receives the probabilities (row i: columns 0..i, the
     * rest 0), which bwd reads.  scratch: n * n floats (bwd). */
    void (*attn_fwd)(float *out, float *p, const float *q, const float *k, const float *v,
                     int64_t n, int64_t n_head, int64_t n_head_kv, int64_t hd, float scale);
    void (*attn_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *p,
                     const float *q, const float *k, const float *v, int64_t n, int64_t n_head,
                     int64_t n_head_kv, int64_t hd, float scale, float *scratch);

    /* EAGLE-3's training-time-test attention at unrolled step s >= 0
     * (algorithms.md §6.9): q [n][n_head * hd] are step s's queries, k and
     * v [s + 1][n][n_head_kv * hd] the keys and values of steps 0..s.  Query
     * i reads step 0's rows 0..i (causal) and row i of each step 1..s (the
     * diagonal the unrolled steps add).  p [n_head][n][n + s]: columns
     * 0..n-1 the causal part (0 past i), column n + t - 1 step t's key; s = 0
     * is attn_fwd.  bwd accumulates into dk, dv [s + 1][n][...]; scratch:
     * n * (n + s) floats. */
    void (*attn_ttt_fwd)(float *out, float *p, const float *q, const float *k, const float *v,
                         int64_t n, int64_t s, int64_t n_head, int64_t n_head_kv, int64_t hd,
                         float scale);
    void (*attn_ttt_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *p,
                         const float *q, const float *k, const float *v, int64_t n, int64_t s,
                         int64_t n_head, int64_t n_head_kv, int64_t hd, float scale,
                         float *scratch);

    /* Soft cross-entropy: loss[r] = -sum_j t[r][j] log softmax(z[r])_j over
     * n rows of v classes (t: target probabilities); bwd: dz[r] += wr[r] *
     * (softmax(z[r]) * sum_j t[r][j] - t[r]) (wr NULL: 1). */
    void (*xent_fwd)(float *loss, const float *z, const float *t, int64_t n, int64_t v);
    void (*xent_bwd)(float *dz, const float *z, const float *t, const float *wr, int64_t n,
                     int64_t v);

    /* SmoothL1 (beta 1) averaged over dim: loss[r] = mean_j l(a[r][j] -
     * b[r][j]), l(d) = d^2 / 2 for |d| < 1, else |d| - 1/2; bwd: da[r] +=
     * wr[r] / dim * clamp(a - b, -1, 1) (wr NULL: 1). */
    void (*smoothl1_fwd)(float *loss, const float *a, const float *b, int64_t n, int64_t dim);
    void (*smoothl1_bwd)(float *da, const float *a, const float *b, const float *wr, int64_t n,
                         int64_t dim);
};

/* The scalar reference, always available. */
extern const struct backend_backward_ops backward_ops_ref;
/* OpenBLAS sgemm for matmul and attention, the reference's element-wise
 * ops; when built without OpenBLAS its matmul and attention are the
 * reference's too (name "ref"). */
extern const struct backend_backward_ops backward_ops_blas;
/* backward_ops_blas with the soft cross-entropy in AVX2 (cpu/backward_avx2.c):
 * the CPU backend's table where its kernels are avx2 or avx512 */
extern const struct backend_backward_ops backward_ops_blas_avx2;

/* ---- the reference in double, for the finite-difference tests ---- */
void bw_matmul_fwd_ref64(double *y, const double *x, const double *w, const double *b, int64_t n,
                         int64_t m, int64_t k);
void bw_matmul_bwd_ref64(double *dx, double *dw, double *db, const double *dy, const double *x,
                         const double *w, int64_t n, int64_t m, int64_t k);
void bw_rmsnorm_fwd_ref64(double *y, const double *x, const double *w, int64_t n, int64_t dim,
                          double eps);
void bw_rmsnorm_bwd_ref64(double *dx, double *dw, const double *dy, const double *x,
                          const double *w, int64_t n, int64_t dim, double eps);
void bw_silu_mul_fwd_ref64(double *y, const double *g, const double *u, int64_t n);
void bw_silu_mul_bwd_ref64(double *dg, double *du, const double *dy, const double *g,
                           const double *u, int64_t n);
void bw_rope_fwd_ref64(double *x, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                       const double *cs, int64_t n_rot, int style);
void bw_rope_bwd_ref64(double *dy, int64_t n_tok, int64_t n_heads, int64_t head_dim,
                       const double *cs, int64_t n_rot, int style);
void bw_attn_fwd_ref64(double *out, double *p, const double *q, const double *k, const double *v,
                       int64_t n, int64_t n_head, int64_t n_head_kv, int64_t hd, double scale);
void bw_attn_bwd_ref64(double *dq, double *dk, double *dv, const double *dout, const double *p,
                       const double *q, const double *k, const double *v, int64_t n,
                       int64_t n_head, int64_t n_head_kv, int64_t hd, double scale,
                       double *scratch);
void bw_attn_ttt_fwd_ref64(double *out, double *p, const double *q, const double *k,
                           const double *v, int64_t n, int64_t s, int64_t n_head,
                           int64_t n_head_kv, int64_t hd, double scale);
void bw_attn_ttt_bwd_ref64(double *dq, double *dk, double *dv, const double *dout,
                           const double *p, const double *q, const double *k, const double *v,
                           int64_t n, int64_t s, int64_t n_head, int64_t n_head_kv, int64_t hd,
                           double scale, double *scratch);
void bw_xent_fwd_ref64(double *loss, const double *z, const double *t, int64_t n, int64_t v);
void bw_xent_bwd_ref64(double *dz, const double *z, const double *t, const double *wr, int64_t n,
                       int64_t v);
void bw_smoothl1_fwd_ref64(double *loss, const double *a, const double *b, int64_t n,
                           int64_t dim);
void bw_smoothl1_bwd_ref64(double *da, const double *a, const double *b, const double *wr,
                           int64_t n, int64_t dim);

#endif
