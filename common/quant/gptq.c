/*
 * gptq.c - GPTQ and RTN into a qgrid (gptq.h).  The solve runs in double
 * (the reference runs in f32): the grid it picks is then a function of the
 * inputs, not of the BLAS's summation order, so that an independent oracle
 * (scripts/gptq-oracle.py, numpy in float64) reproduces it bit for bit.
 */
#include "gptq.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "qconv.h"
#include "threadpool.h"

#ifdef LLMKIT_HAVE_OPENBLAS
#include <cblas.h>
#include <f77blas.h>
#endif

/* ---- the grid (algorithms.md §1.5) ---- */

#define MSE_NORM 2.4
#define MSE_GRID 100
#define MSE_STEPS 80            /* int(maxshrink 0.8 * grid) */
#define FP16_MAX 65504.0f
#define FP16_MIN 5.9604645e-08f /* 2^-24, the smallest subnormal */

/* fp16 of a double through f32 (the oracle does the same), kept positive
 * and finite so that x / scale is defined */
static float
scale_fp16(double s)
{
    float f = qconv_fp16_to_fp32(qconv_fp32_to_fp16((float)s));
    if (!(f >= FP16_MIN))
        f = FP16_MIN;
    if (f > FP16_MAX)
        f = FP16_MAX;
    return f;
}

static inline int
quant1(double x, float scale, int32_t zero, int maxq)
{
    double q = nearbyint(x / (double)scale) + (double)zero;
    return q < 0 ? 0 : q > maxq ? maxq : (int)q;
}

/* the loaders' dequantization: fp16((q - zero) * scale) */
static inline double
dequant1(int q, float scale, int32_t zero)
{
    return (double)qconv_fp16_to_fp32(qconv_fp32_to_fp16((float)(q - zero) * scale));
}

/* min-max parameters of x[0..n) shrunk by p */
static void
minmax_params(double xmin, double xmax, double p, int bits, bool sym, float *scale, int32_t *zero)
{
    const int maxq = (1 << bits) - 1;
    double lo = p * xmin, hi = p * xmax, s;

    s = (hi - lo) / maxq;
    *zero = sym ? (maxq + 1) / 2 : (int32_t)nearbyint(-lo / s);
    *scale = scale_fp16(s);
}

/* find_params of one row's group x[0..n) */
static void
find_params(const double *x, int64_t n, int bits, bool sym, bool mse, float *scale, int32_t *zero)
{
    const int maxq = (1 << bits) - 1;
    double xmin = 0, xmax = 0;

    for (int64_t j = 0; j < n; j++) {
        if (x[j] < xmin)
            xmin = x[j];
        if (x[j] > xmax)
            xmax = x[j];
    }
    if (sym) {
        if (-xmin > xmax)
            xmax = -xmin;
        if (xmin < 0)
            xmin = -xmax;
    }
    if (xmin == 0 && xmax == 0) {
        xmin = -1;
        xmax = 1;
    }
    minmax_params(xmin, xmax, 1.0, bits, sym, scale, zero);
    if (!mse)
        return;
    double best = INFINITY;
    for (int i = 0; i < MSE_STEPS; i++) {
        double p = 1.0 - (double)i / MSE_GRID, err = 0;
        float s;
        int32_t z;
        minmax_params(xmin, xmax, p, bits, sym, &s, &z);
        for (int64_t j = 0; j < n; j++)
            err += pow(fabs(dequant1(quant1(x[j], s, z, maxq), s, z) - x[j]), MSE_NORM);
        if (err < best) {
            best = err;
            *scale = s;
            *zero = z;
        }
    }
}

/* ---- options ---- */

int
gptq_check_opts(const struct gptq_opts *o, struct diag *d)
{
    int64_t g = o->group_size;

    if (o->bits != 2 && o->bits != 3 && o->bits != 4 && o->bits != 8)
        return diag_set(d, ST_RANGE, "--bits %d: need 2, 3, 4 or 8", o->bits);
    if (g != -1 && (g < 16 || g > 1024 || (g & (g - 1))))
        return diag_set(d, ST_RANGE, "--group-size %lld: need -1, 16, 32, 64, 128, 256, 512 or 1024",
                        (long long)g);
    if (!(o->damp > 0 && o->damp < 1))
        return diag_set(d, ST_RANGE, "--damp %g: need a fraction greater than 0 and less than 1",
                        o->damp);
    return 0;
}

/* ---- Hessian ---- */

int
gptq_hessian_init(struct gptq_hessian *h, int64_t cols, struct diag *d)
{
    h->cols = cols;
    h->n = 0;
    h->h = calloc((size_t)(cols * cols), sizeof *h->h);
    if (!h->h)
        return diag_set(d, ST_NOMEM, "out of memory for a %lld x %lld Hessian", (long long)cols,
                        (long long)cols);
    return 0;
}

void
gptq_hessian_release(struct gptq_hessian *h)
{
    free(h->h);
    h->h = NULL;
}

int
gptq_hessian_add(struct gptq_hessian *h, const float *x, int64_t n_tok, int64_t ld, struct diag *d)
{
    const int64_t n = h->cols;
    float keep, alpha;

    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t j = 0; j < n; j++)
            if (!isfinite(x[t * ld + j]))
                return diag_set(d, ST_FORMAT, "non-finite calibration activation");
    /* one sequence: b = 1 (§1.2) */
    keep = (float)((double)h->n / (double)(h->n + 1));
    h->n++;
    alpha = (float)(2.0 / (double)h->n);
#ifdef LLMKIT_HAVE_OPENBLAS
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (blasint)n, (blasint)n_tok, alpha, x,
                (blasint)ld, keep, h->h, (blasint)n);
#else
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i; j < n; j++) {
            float s = 0;
            for (int64_t t = 0; t < n_tok; t++)
                s += x[t * ld + i] * x[t * ld + j];
            h->h[i * n + j] = keep * h->h[i * n + j] + alpha * s;
        }
#endif
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++)
            h->h[i * n + j] = h->h[j * n + i];
    return 0;
}

/* ---- the solve ---- */

void
gptq_dequant(const struct qgrid *g, float *out)
{
    for (int64_t r = 0; r < g->rows; r++)
        qgrid_dequant_row(g, r, out + r * g->cols);
}

#ifdef LLMKIT_HAVE_OPENBLAS
/* U (row-major, upper) with U^T U = (H + lambda I)^-1, or nonzero when a
 * Cholesky fails.  a is scratch [n][n]. */
static int
inverse_factor(const double *H, int64_t n, double lambda, double *a, double *U)
{
    blasint nn = (blasint)n, info = 0;
    char lo = 'L', up = 'U';

    memcpy(a, H, (size_t)(n * n) * sizeof *a);
    for (int64_t i = 0; i < n; i++)
        a[i * n + i] += lambda;
    /* column-major from here: H is symmetric, so the storage is the same */
    dpotrf_(&lo, &nn, a, &nn, &info);
    if (info)
        return 1;
    dpotri_(&lo, &nn, a, &nn, &info);
    if (info)
        return 1;
    for (int64_t j = 0; j < n; j++)         /* lower -> both triangles */
        for (int64_t i = j + 1; i < n; i++)
            a[j + i * n] = a[i + j * n];
    dpotrf_(&up, &nn, a, &nn, &info);
    if (info)
        return 1;
    for (int64_t i = 0; i < n; i++)         /* U(i, j), j >= i, at a[i + j n] */
        for (int64_t j = 0; j < n; j++)
            U[i * n + j] = j >= i ? a[i + j * n] : 0.0;
    return 0;
}
#endif

#ifdef LLMKIT_HAVE_OPENBLAS
/* one block of columns [i1, i2) for rows [r0, r1): each row's columns in
 * order, quantized, their error fed to the row's later columns of the
 * block (§1.4); the rows are independent, so workers take row ranges.
 * Each (row, column)'s loss term goes to lossb so that the caller sums them
 * in the serial order (columns, then rows), and the later blocks' columns
 * get the row range's share of the block's GEMM (one range's at a time
 * under an address-space limit, so that OpenBLAS's primed buffer serves
 * every call: blas.h). */
struct block_job {
    const struct gptq_opts *o;
    struct qgrid *g;
    double *Wd, *Wblk, *Err, *lossb, *tmp;  /* tmp: [nth][gs] */
    const double *U;
    const int64_t *perm;
    uint8_t *Qp;
    float *cur_s, *st_s;
    int32_t *cur_z, *st_z;
    int64_t rows, cols, gs, i1, i2;
    pthread_mutex_t *blas_lock;     /* non-NULL: one GEMM at a time (blas.h) */
};

static void
block_rows(void *arg, int64_t r0, int64_t r1, int ith)
{
    const struct block_job *b = arg;
    const struct gptq_opts *o = b->o;
    const int maxq = (1 << o->bits) - 1;
    const int64_t G = o->group_size, rows = b->rows, cols = b->cols, gs = b->gs;
    const int64_t i1 = b->i1, i2 = b->i2, cnt = i2 - i1;
    double *tmp = b->tmp + ith * gs;

    for (int64_t r = r0; r < r1; r++) {
        double *wr = b->Wd + r * cols;
        for (int64_t j = 0; j < cnt; j++) {
            const int64_t c = i1 + j;
            const double *u = b->U + c * cols;
            const double dc = u[c];
            float sc;
            int32_t zc;

            if (G < 0) {
                sc = b->g->scale[r];
                zc = b->g->zero[r];
            } else if (b->st_s) {
                int64_t k = b->perm[c] / gs;
                sc = b->st_s[k * rows + r];
                zc = b->st_z[k * rows + r];
            } else {
                if (c % gs == 0) {
                    /* the group's weights as they were at the start of this
                     * block (later blocks' columns: as they are) */
                    int64_t n = cols - c < gs ? cols - c : gs, k = c / gs;
                    for (int64_t t = 0; t < n; t++)
                        tmp[t] = c + t < i2 ? b->Wblk[r * cnt + j + t] : wr[c + t];
                    find_params(tmp, n, o->bits, o->sym, o->mse, &b->cur_s[r], &b->cur_z[r]);
                    b->g->scale[k * rows + r] = b->cur_s[r];
                    b->g->zero[k * rows + r] = b->cur_z[r];
                }
                sc = b->cur_s[r];
                zc = b->cur_z[r];
            }
            double w = wr[c], q, e;
            int qi = quant1(w, sc, zc, maxq);
            b->Qp[r * cols + c] = (uint8_t)qi;
            q = dequant1(qi, sc, zc);
            b->lossb[j * rows + r] = (w - q) * (w - q) / (dc * dc) / 2;
            e = (w - q) / dc;
            for (int64_t t = c + 1; t < i2; t++)
                wr[t] -= e * u[t];
            b->Err[r * cnt + j] = e;
        }
    }
    if (i2 < cols && r1 > r0) {
        if (b->blas_lock)
            pthread_mutex_lock(b->blas_lock);
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)(r1 - r0),
                    (blasint)(cols - i2), (blasint)cnt, -1.0, b->Err + r0 * cnt, (blasint)cnt,
                    b->U + i1 * cols + i2, (blasint)cols, 1.0, b->Wd + r0 * cols + i2,
                    (blasint)cols);
        if (b->blas_lock)
            pthread_mutex_unlock(b->blas_lock);
    }
}
#endif

#ifdef LLMKIT_HAVE_OPENBLAS
struct col_order {
    double key;
    int64_t i;
};

static int
cmp_desc(const void *pa, const void *pb)
{
    const struct col_order *a = pa, *b = pb;
    if (a->key != b->key)
        return a->key > b->key ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}
#endif

void
gptq_factor_release(struct gptq_factor *f)
{
    free(f->U);
    free(f->perm);
    free(f->is_dead);
    memset(f, 0, sizeof *f);
}

int
gptq_factor_init(struct gptq_factor *f, const float *h, int64_t cols, const struct gptq_opts *o,
                 struct diag *d)
{
    memset(f, 0, sizeof *f);
#ifndef LLMKIT_HAVE_OPENBLAS
    (void)h; (void)cols; (void)o;
    return diag_set(d, ST_RANGE, "GPTQ needs LAPACK: llmkit was built without OpenBLAS");
#else
    const size_t nn = (size_t)(cols * cols);
    double *Hd = NULL, *a = NULL, damp, mean = 0;
    struct col_order *ord = NULL;
    int rc = 0;

    if ((rc = gptq_check_opts(o, d)) < 0)
        return rc;
    f->cols = cols;
    Hd = malloc(nn * sizeof *Hd);
    a = malloc(nn * sizeof *a);
    ord = malloc((size_t)cols * sizeof *ord);
    f->U = malloc(nn * sizeof *f->U);
    f->perm = malloc((size_t)cols * sizeof *f->perm);
    f->is_dead = calloc((size_t)cols, sizeof *f->is_dead);
    if (!Hd || !a || !ord || !f->U || !f->perm || !f->is_dead) {
        rc = diag_set(d, ST_NOMEM, "out of memory for GPTQ of %lld columns", (long long)cols);
        goto out;
    }
    for (size_t i = 0; i < nn; i++)
        Hd[i] = h[i];
    /* (c) dead columns (their weights are zeroed by gptq_solve) */
    for (int64_t i = 0; i < cols; i++)
        if (Hd[i * cols + i] == 0) {
            Hd[i * cols + i] = 1;
            f->is_dead[i] = true;
            f->dead++;
        }
    /* (e) act-order: columns by decreasing diag(H), ties by index */
    for (int64_t i = 0; i < cols; i++)
        f->perm[i] = i;
    if (o->act_order) {
        for (int64_t i = 0; i < cols; i++) {
            ord[i].key = Hd[i * cols + i];
            ord[i].i = i;
        }
        qsort(ord, (size_t)cols, sizeof *ord, cmp_desc);
        for (int64_t i = 0; i < cols; i++)
            f->perm[i] = ord[i].i;
        for (int64_t i = 0; i < cols; i++)
            for (int64_t j = 0; j < cols; j++)
                a[i * cols + j] = Hd[f->perm[i] * cols + f->perm[j]];
        memcpy(Hd, a, nn * sizeof *a);
    }
    /* (f, g) damping, raised until both Cholesky factorizations succeed */
    for (int64_t i = 0; i < cols; i++)
        mean += Hd[i * cols + i];
    mean /= (double)cols;
    for (damp = o->damp;; damp += GPTQ_DAMP_STEP) {
        if (damp >= 1.0) {
            rc = diag_set(d, ST_RANGE, "the Hessian is not positive definite with any damping "
                          "below 1 (from %g)", o->damp);
            goto out;
        }
        if (!inverse_factor(Hd, cols, damp * mean, a, f->U))
            break;
    }
    f->damp = damp;
out:
    free(Hd);
    free(a);
    free(ord);
    if (rc < 0)
        gptq_factor_release(f);
    return rc;
#endif
}

int
gptq_solve(const float *W, int64_t rows, const struct gptq_factor *f, const struct gptq_opts *o,
           struct threadpool *tp, struct qgrid *g, struct gptq_stats *st, struct diag *d)
{
#ifndef LLMKIT_HAVE_OPENBLAS
    (void)W; (void)rows; (void)f; (void)o; (void)tp; (void)g; (void)st;
    return diag_set(d, ST_RANGE, "GPTQ needs LAPACK: llmkit was built without OpenBLAS");
#else
    const int64_t cols = f->cols, G = o->group_size, B = GPTQ_BLOCK, nth = threadpool_size(tp);
    const size_t rc = (size_t)(rows * cols);
    const int64_t *perm = f->perm;
    double *Wd = NULL, *Wblk = NULL, *Err = NULL, *tmp = NULL, *lossb = NULL;
    uint8_t *Qp = NULL;
    float *cur_s = NULL, *st_s = NULL;
    int32_t *cur_z = NULL, *st_z = NULL;
    struct gptq_stats s = { f->damp, f->dead, 0 };
    int rc_ = 0;

    memset(g, 0, sizeof *g);
    if ((rc_ = gptq_check_opts(o, d)) < 0)
        return rc_;
    if ((rc_ = qgrid_alloc(g, o->bits, G, o->sym, rows, cols, d)) < 0)
        return rc_;
    const int64_t ng = g->n_groups, gs = G < 0 ? cols : G;
    Wd = malloc(rc * sizeof *Wd);
    Wblk = malloc((size_t)(rows * B) * sizeof *Wblk);
    Err = malloc((size_t)(rows * B) * sizeof *Err);
    lossb = malloc((size_t)(rows * B) * sizeof *lossb);
    tmp = malloc((size_t)(cols > nth * gs ? cols : nth * gs) * sizeof *tmp);
    Qp = malloc(rc);
    cur_s = malloc((size_t)rows * sizeof *cur_s);
    cur_z = malloc((size_t)rows * sizeof *cur_z);
    if (o->static_groups && G > 0) {
        st_s = malloc((size_t)(ng * rows) * sizeof *st_s);
        st_z = malloc((size_t)(ng * rows) * sizeof *st_z);
    }
    if (!Wd || !Wblk || !Err || !lossb || !tmp || !Qp || !cur_s || !cur_z ||
        (o->static_groups && G > 0 && (!st_s || !st_z))) {
        rc_ = diag_set(d, ST_NOMEM, "out of memory for GPTQ of a %lld x %lld weight",
                       (long long)rows, (long long)cols);
        goto out;
    }
    for (size_t i = 0; i < rc; i++)
        Wd[i] = W[i];

    /* (b) one group per row: parameters from the whole row as it is */
    if (G < 0)
        for (int64_t r = 0; r < rows; r++)
            find_params(Wd + r * cols, cols, o->bits, o->sym, o->mse, &g->scale[r], &g->zero[r]);
    /* (c) dead columns */
    for (int64_t i = 0; i < cols; i++)
        if (f->is_dead[i])
            for (int64_t r = 0; r < rows; r++)
                Wd[r * cols + i] = 0;
    /* (d) static groups, in the original column order */
    if (st_s)
        for (int64_t k = 0; k < ng; k++) {
            int64_t c0 = k * gs, n = cols - c0 < gs ? cols - c0 : gs;
            for (int64_t r = 0; r < rows; r++)
                find_params(Wd + r * cols + c0, n, o->bits, o->sym, o->mse, &st_s[k * rows + r],
                            &st_z[k * rows + r]);
        }
    /* (e) act-order: the factor's column order */
    if (o->act_order)
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < cols; j++)
                tmp[j] = Wd[r * cols + perm[j]];
            memcpy(Wd + r * cols, tmp, (size_t)cols * sizeof *tmp);
        }

    /* (§1.4) the column loop, rows over the pool */
    struct block_job bj = { o, g, Wd, Wblk, Err, lossb, tmp, f->U, perm, Qp, cur_s, st_s, cur_z,
                            st_z, rows, cols, gs, 0, 0, NULL };
    pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;
    if (blas_one_at_a_time())
        bj.blas_lock = &blas_lock;
    for (int64_t i1 = 0; i1 < cols; i1 += B) {
        const int64_t i2 = cols - i1 < B ? cols : i1 + B, cnt = i2 - i1;
        for (int64_t r = 0; r < rows; r++)
            memcpy(Wblk + r * cnt, Wd + r * cols + i1, (size_t)cnt * sizeof *Wblk);
        bj.i1 = i1;
        bj.i2 = i2;
        threadpool_for(tp, rows, 1, block_rows, &bj);
        for (int64_t k = 0; k < cnt * rows; k++)
            s.loss += lossb[k];
    }
    /* back to the original column order; groups of the permuted order */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            g->q[r * cols + perm[j]] = Qp[r * cols + j];
    if (st_s) {
        memcpy(g->scale, st_s, (size_t)(ng * rows) * sizeof *st_s);
        memcpy(g->zero, st_z, (size_t)(ng * rows) * sizeof *st_z);
    } else if (G > 0 && o->act_order) {
        for (int64_t j = 0; j < cols; j++)
            g->g_idx[perm[j]] = (int32_t)(j / gs);
    }
    if (st)
        *st = s;
out:
    free(Wd);
    free(Wblk);
    free(Err);
    free(lossb);
    free(tmp);
    free(Qp);
    free(cur_s);
    free(cur_z);
    free(st_s);
    free(st_z);
    if (rc_ < 0)
        qgrid_free(g);
    return rc_;
#endif
}

int
gptq_quantize(const float *W, int64_t rows, int64_t cols, const float *h,
              const struct gptq_opts *o, struct threadpool *tp, struct qgrid *g,
              struct gptq_stats *st, struct diag *d)
{
    struct gptq_factor f;
    int rc;

    memset(g, 0, sizeof *g);
    if ((rc = gptq_factor_init(&f, h, cols, o, d)) < 0)
        return rc;
    rc = gptq_solve(W, rows, &f, o, tp, g, st, d);
    gptq_factor_release(&f);
    return rc;
}

int
rtn_quantize(const float *W, int64_t rows, int64_t cols, const struct gptq_opts *o,
             struct qgrid *g, struct diag *d)
{
    const int maxq = (1 << o->bits) - 1;
    double *x;
    int rc;

    memset(g, 0, sizeof *g);
    if ((rc = gptq_check_opts(o, d)) < 0)
        return rc;
    if ((rc = qgrid_alloc(g, o->bits, o->group_size, o->sym, rows, cols, d)) < 0)
        return rc;
    const int64_t gs = o->group_size < 0 ? cols : o->group_size;
    if (!(x = malloc((size_t)gs * sizeof *x))) {
        qgrid_free(g);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    for (int64_t k = 0; k < g->n_groups; k++) {
        int64_t c0 = k * gs, n = cols - c0 < gs ? cols - c0 : gs;
        for (int64_t r = 0; r < rows; r++) {
            float *sp = &g->scale[k * rows + r];
            int32_t *zp = &g->zero[k * rows + r];
            for (int64_t t = 0; t < n; t++)
                x[t] = W[r * cols + c0 + t];
            find_params(x, n, o->bits, o->sym, o->mse, sp, zp);
            for (int64_t t = 0; t < n; t++)
                g->q[r * cols + c0 + t] = (uint8_t)quant1(x[t], *sp, *zp, maxq);
        }
    }
    free(x);
    return 0;
}
