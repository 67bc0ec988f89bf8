/*
 * backward_blas.c - the trainer's kernel table over OpenBLAS (backward.h):
 * matmul and attention as sgemm calls, the element-wise ops the
 * reference's; backward_ops_blas_avx2 the same with the soft cross-entropy
 * of backward_avx2.c (for CPUs with AVX2 and FMA).  OpenBLAS runs its own
 * threads; callers must not call these tables from inside a threadpool job
 * (threadpool.h).  Built without OpenBLAS, matmul and attention are the
 * reference's.
 */
#include <math.h>
#include <stdint.h>

#include "backward.h"
#include "backward_avx2.h"
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

/* EAGLE-3's training-time-test attention at step s (backward.h), per head:
 * the causal part over step 0's keys as sgemm calls (P's row stride n + s;
 * the upper triangle computed, then masked), the s diagonal columns (row i
 * of steps 1..s) as dot products.  s = 0 is plain causal attention. */
static void
attn_ttt_fwd_blas(float *out, float *p, const float *q, const float *k, const float *v, int64_t n,
                  int64_t s, int64_t n_head, int64_t n_head_kv, int64_t hd, float scale)
{
    int64_t grp = n_head / n_head_kv, ldq = n_head * hd, ldk = n_head_kv * hd, w = n + s;
    for (int64_t h = 0; h < n_head; h++) {
        int64_t g = h / grp;
        float *ph = p + h * n * w;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)hd, scale,
                    q + h * hd, (int)ldq, k + g * hd, (int)ldk, 0.0f, ph, (int)w);
        for (int64_t i = 0; i < n; i++) {
            float *pi = ph + i * w, max = -INFINITY, sum = 0.0f;
            const float *qi = q + i * ldq + h * hd;
            for (int64_t t = 1; t <= s; t++) {
                const float *kr = k + (t * n + i) * ldk + g * hd;
                float sc = 0.0f;
                for (int64_t d = 0; d < hd; d++)
                    sc += qi[d] * kr[d];
                pi[n + t - 1] = sc * scale;
            }
            for (int64_t c = i + 1; c < n; c++)
                pi[c] = 0.0f;
            for (int64_t c = 0; c < w; c++)
                if ((c <= i || c >= n) && pi[c] > max)
                    max = pi[c];
            for (int64_t c = 0; c < w; c++)
                if (c <= i || c >= n) {
                    pi[c] = expf(pi[c] - max);
                    sum += pi[c];
                }
            for (int64_t c = 0; c < w; c++)
                pi[c] /= sum;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f, ph,
                    (int)w, v + g * hd, (int)ldk, 0.0f, out + h * hd, (int)ldq);
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 1; t <= s; t++) {
                const float *vr = v + (t * n + i) * ldk + g * hd;
                float pc = ph[i * w + n + t - 1], *oi = out + i * ldq + h * hd;
                for (int64_t d = 0; d < hd; d++)
                    oi[d] += pc * vr[d];
            }
    }
}

/* per head: dP = dO V^T (causal part by sgemm, the diagonal columns as
 * dot products), dS = P (dP - rowsum(P dP)) scale in scratch [n][n + s],
 * then dV += P^T dO, dQ += dS K, dK += dS^T Q, each a causal sgemm plus the
 * diagonal columns' rows */
static void
attn_ttt_bwd_blas(float *dq, float *dk, float *dv, const float *dout, const float *p,
                  const float *q, const float *k, const float *v, int64_t n, int64_t s,
                  int64_t n_head, int64_t n_head_kv, int64_t hd, float scale, float *scratch)
{
    int64_t grp = n_head / n_head_kv, ldq = n_head * hd, ldk = n_head_kv * hd, w = n + s;
    for (int64_t h = 0; h < n_head; h++) {
        int64_t g = h / grp;
        const float *ph = p + h * n * w;
        float *ds = scratch;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)hd, 1.0f,
                    dout + h * hd, (int)ldq, v + g * hd, (int)ldk, 0.0f, ds, (int)w);
        for (int64_t i = 0; i < n; i++) {
            const float *pi = ph + i * w, *doi = dout + i * ldq + h * hd;
            float *di = ds + i * w, rs = 0.0f;
            for (int64_t t = 1; t <= s; t++) {
                const float *vr = v + (t * n + i) * ldk + g * hd;
                float dp = 0.0f;
                for (int64_t d = 0; d < hd; d++)
                    dp += doi[d] * vr[d];
                di[n + t - 1] = dp;
            }
            for (int64_t c = 0; c < w; c++)
                if (c <= i || c >= n)
                    rs += pi[c] * di[c];
            for (int64_t c = 0; c < w; c++)
                di[c] = c <= i || c >= n ? pi[c] * (di[c] - rs) * scale : 0.0f;
        }
        if (dv)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f, ph,
                        (int)w, dout + h * hd, (int)ldq, 1.0f, dv + g * hd, (int)ldk);
        if (dq)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f,
                        ds, (int)w, k + g * hd, (int)ldk, 1.0f, dq + h * hd, (int)ldq);
        if (dk)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)n, (int)hd, (int)n, 1.0f, ds,
                        (int)w, q + h * hd, (int)ldq, 1.0f, dk + g * hd, (int)ldk);
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 1; t <= s; t++) {
                int64_t kr = (t * n + i) * ldk + g * hd, c = n + t - 1;
                const float *qi = q + i * ldq + h * hd, *doi = dout + i * ldq + h * hd;
                float pc = ph[i * w + c], sc = ds[i * w + c];
                for (int64_t d = 0; d < hd; d++) {
                    if (dv)
                        dv[kr + d] += pc * doi[d];
                    if (dq)
                        dq[i * ldq + h * hd + d] += sc * k[kr + d];
                    if (dk)
                        dk[kr + d] += sc * qi[d];
                }
            }
    }
}

static void
attn_fwd_blas(float *out, float *p, const float *q, const float *k, const float *v, int64_t n,
              int64_t n_head, int64_t n_head_kv, int64_t hd, float scale)
{
    attn_ttt_fwd_blas(out, p, q, k, v, n, 0, n_head, n_head_kv, hd, scale);
}

static void
attn_bwd_blas(float *dq, float *dk, float *dv, const float *dout, const float *p, const float *q,
              const float *k, const float *v, int64_t n, int64_t n_head, int64_t n_head_kv,
              int64_t hd, float scale, float *scratch)
{
    attn_ttt_bwd_blas(dq, dk, dv, dout, p, q, k, v, n, 0, n_head, n_head_kv, hd, scale, scratch);
}

#define BLAS_NAME "blas"
#else
#define matmul_fwd_blas bw_matmul_fwd_ref
#define matmul_bwd_blas bw_matmul_bwd_ref
#define attn_fwd_blas bw_attn_fwd_ref
#define attn_bwd_blas bw_attn_bwd_ref
#define attn_ttt_fwd_blas bw_attn_ttt_fwd_ref
#define attn_ttt_bwd_blas bw_attn_ttt_bwd_ref
#define BLAS_NAME "ref"
#endif

#define BLAS_TABLE(NAME, XENT_FWD, XENT_BWD)                                                     \
    {                                                                                              \
        .name = NAME, .matmul_fwd = matmul_fwd_blas, .matmul_bwd = matmul_bwd_blas,               \
        .rmsnorm_fwd = bw_rmsnorm_fwd_ref, .rmsnorm_bwd = bw_rmsnorm_bwd_ref,                      \
        .silu_mul_fwd = bw_silu_mul_fwd_ref, .silu_mul_bwd = bw_silu_mul_bwd_ref,                  \
        .rope_fwd = bw_rope_fwd_ref, .rope_bwd = bw_rope_bwd_ref, .attn_fwd = attn_fwd_blas,       \
        .attn_bwd = attn_bwd_blas, .attn_ttt_fwd = attn_ttt_fwd_blas,                             \
        .attn_ttt_bwd = attn_ttt_bwd_blas, .xent_fwd = XENT_FWD, .xent_bwd = XENT_BWD,            \
        .smoothl1_fwd = bw_smoothl1_fwd_ref, .smoothl1_bwd = bw_smoothl1_bwd_ref,                  \
    }

const struct backend_backward_ops backward_ops_blas =
    BLAS_TABLE(BLAS_NAME, bw_xent_fwd_ref, bw_xent_bwd_ref);
const struct backend_backward_ops backward_ops_blas_avx2 =
    BLAS_TABLE(BLAS_NAME "+avx2", bw_xent_fwd_avx2, bw_xent_bwd_avx2);
