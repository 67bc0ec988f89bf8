/*
 * backward_blas.c - the trainer's kernel table over OpenBLAS (backward.h):
 * matmul and attention as sgemm calls, the element-wise ops the
 * reference's.  OpenBLAS runs its own threads; callers must not call this
 * table from inside a threadpool job (threadpool.h).  Built without
 * OpenBLAS, the table is the reference under another name.
 */
#include <math.h>
#include <stdint.h>

#include "backward.h"
#include "backward_ref.h"
#include "ops.h"

#ifdef LLMKIT_HAVE_OPENBLAS
#include <cblas.h>

static void
matmul_fwd_blas(float *y, const float *x, const float *w, const float *b, int64_t n, int64_t m,
                int64_t k)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)m, (int)k, 1.0f, x, (int)k,
                w, (int)k, 0.0f, y, (int)m);
    if (b)
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < m; r++)
                y[t * m + r] += b[r];
}

static void
matmul_bwd_blas(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                int64_t n, int64_t m, int64_t k)
{
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)k, (int)m, 1.0f, dy,
                    (int)m, w, (int)k, 1.0f, dx, (int)k);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)k, (int)n, 1.0f, dy,
                    (int)m, x, (int)k, 1.0f, dw, (int)k);
    if (db)
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < m; r++)
                db[r] += dy[t * m + r];
}

/* per head: P = softmax_causal(scale Q K^T) (the upper triangle computed
 * by sgemm, then masked), out = P V */
static void
attn_fwd_blas(float *out, float *p, const float *q, const float *k, const float *v, int64_t n,
              int64_t n_head, int64_t n_head_kv, int64_t hd, float scale)
{
    int grp = (int)(n_head / n_head_kv), ldq = (int)(n_head * hd), ldk = (int)(n_head_kv * hd);
    for (int h = 0; h < n_head; h++) {
        int g = h / grp;
        float *ph = p + (int64_t)h * n * n;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)hd, scale,
                    q + h * hd, ldq, k + g * hd, ldk, 0.0f, ph, (int)n);
        for (int64_t i = 0; i < n; i++) {
            float *pi = ph + i * n, max = -INFINITY, sum = 0.0f;
            for (int64_t j = 0; j <= i; j++)
                if (pi[j] > max)
                    max = pi[j];
            for (int64_t j = 0; j <= i; j++) {
                pi[j] = expf(pi[j] - max);
                sum += pi[j];
            }
            for (int64_t j = 0; j <= i; j++)
                pi[j] /= sum;
            for (int64_t j = i + 1; j < n; j++)
                pi[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f, ph,
                    (int)n, v + g * hd, ldk, 0.0f, out + h * hd, ldq);
    }
}

static void
attn_bwd_blas(float *dq, float *dk, float *dv, const float *dout, const float *p, const float *q,
              const float *k, const float *v, int64_t n, int64_t n_head, int64_t n_head_kv,
              int64_t hd, float scale, float *scratch)
{
    int grp = (int)(n_head / n_head_kv), ldq = (int)(n_head * hd), ldk = (int)(n_head_kv * hd);
    for (int h = 0; h < n_head; h++) {
        int g = h / grp;
        const float *ph = p + (int64_t)h * n * n;
        float *ds = scratch;
        /* dP = dO V^T, then dS = P (dP - rowsum(P dP)) scale in place */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)hd, 1.0f,
                    dout + h * hd, ldq, v + g * hd, ldk, 0.0f, ds, (int)n);
        for (int64_t i = 0; i < n; i++) {
            const float *pi = ph + i * n;
            float *di = ds + i * n, rs = 0.0f;
            for (int64_t j = 0; j <= i; j++)
                rs += pi[j] * di[j];
            for (int64_t j = 0; j < n; j++)
                di[j] = j <= i ? pi[j] * (di[j] - rs) * scale : 0.0f;
        }
        if (dv)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f, ph,
                        (int)n, dout + h * hd, ldq, 1.0f, dv + g * hd, ldk);
        if (dq)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f,
                        ds, (int)n, k + g * hd, ldk, 1.0f, dq + h * hd, ldq);
        if (dk)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f, ds,
                        (int)n, q + h * hd, ldq, 1.0f, dk + g * hd, ldk);
    }
}

#define BLAS_NAME "blas"
#else
#define matmul_fwd_blas bw_matmul_fwd_ref
#define matmul_bwd_blas bw_matmul_bwd_ref
#define attn_fwd_blas bw_attn_fwd_ref
#define attn_bwd_blas bw_attn_bwd_ref
#define BLAS_NAME "ref"
#endif

const struct backend_backward_ops backward_ops_blas = {
    .name = BLAS_NAME,
    .matmul_fwd = matmul_fwd_blas,
    .matmul_bwd = matmul_bwd_blas,
    .rmsnorm_fwd = bw_rmsnorm_fwd_ref,
    .rmsnorm_bwd = bw_rmsnorm_bwd_ref,
    .silu_mul_fwd = bw_silu_mul_fwd_ref,
    .silu_mul_bwd = bw_silu_mul_bwd_ref,
    .rope_fwd = bw_rope_fwd_ref,
    .rope_bwd = bw_rope_bwd_ref,
    .attn_fwd = attn_fwd_blas,
    .attn_bwd = attn_bwd_blas,
    .attn_ttt_fwd = bw_attn_ttt_fwd_ref,
    .attn_ttt_bwd = bw_attn_ttt_bwd_ref,
    .xent_fwd = bw_xent_fwd_ref,
    .xent_bwd = bw_xent_bwd_ref,
    .smoothl1_fwd = bw_smoothl1_fwd_ref,
    .smoothl1_bwd = bw_smoothl1_bwd_ref,
};
