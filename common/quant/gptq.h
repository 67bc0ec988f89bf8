/*
 * gptq.h - GPTQ (arXiv:2210.17323) and round-to-nearest on the same grid,
 * one linear at a time, into a struct qgrid (qgrid.h).  The steps are those
 * of ../shared/reference/algorithms.md §1.2-§1.5 (the IST-DASLab reference
 * code, with GPTQModel's damping increments):
 *
 *   Hessian   per calibration sequence of T tokens x [T][cols]:
 *             H <- H * n / (n + 1); n <- n + 1; H <- H + (2 / n) x^T x
 *             (f32, as the reference accumulates it)
 *   solve     in double: dead columns (diag(H) == 0: H[d][d] = 1, W[:, d]
 *             = 0); static groups' parameters (from W after that, groups in
 *             the original column order); act-order (columns by decreasing
 *             diag(H), ties by index); damping lambda = damp * mean(diag(H))
 *             on the diagonal, raised by 0.01 while the Cholesky of H or of
 *             its inverse fails (error at damp >= 1); U = upper Cholesky
 *             factor of H^-1 (LAPACK dpotrf/dpotri); columns in blocks of
 *             128 with the rest of the block updated column by column and
 *             the later columns by one GEMM per block; a dynamic group's
 *             parameters from the weights as they were at the start of the
 *             block its first column falls in.
 *   grid      per row over a group's columns: xmin = min(x, 0), xmax =
 *             max(x, 0); sym: xmax = max(|xmin|, xmax), xmin = -xmax when
 *             xmin < 0; both 0: -1 and +1; scale = (xmax - xmin) / maxq;
 *             zero = round(-xmin / scale) (asym) or 2^(bits-1) (sym); then
 *             scale is rounded to fp16 (through f32), and
 *             q = clamp(round(x / scale) + zero, 0, maxq) with round half to
 *             even.  With mse: 80 shrink factors p = 1 - i/100 of xmin and
 *             xmax, each scored by sum |dequant(q) - x|^2.4 over the group;
 *             the best kept (the first on ties).
 *   error     the error fed back is x - fp16((q - zero) * scale): the
 *             loaders' dequantization (qgrid.h), so the grid written is the
 *             grid the rest of the row was corrected for.
 *
 * group_size -1: one group per row, its parameters from the whole row
 * before the dead columns are zeroed (as the reference computes them).
 * RTN: the same grid on the weights as they are, group by group.
 */
#ifndef LLMKIT_GPTQ_H
#define LLMKIT_GPTQ_H

#include <stdbool.h>
#include <stdint.h>

#include "qgrid.h"
#include "status.h"

struct threadpool;

#define GPTQ_BLOCK 128          /* columns per lazy batch */
#define GPTQ_DAMP_STEP 0.01     /* GPTQModel's damp_auto_increment */

struct gptq_opts {
    int bits;                   /* 2, 3, 4, 8 */
    int64_t group_size;         /* -1 or > 0 */
    bool sym;
    bool act_order;
    bool static_groups;
    bool mse;                   /* scale search */
    double damp;                /* fraction of the mean diagonal, (0, 1) */
};

struct gptq_stats {
    double damp;                /* the damping that worked */
    int64_t dead;               /* dead columns */
    double loss;                /* sum over rows and columns of (w - q)^2 / d^2 / 2 */
};

/* Hessian accumulator of one set of linears sharing an input. */
struct gptq_hessian {
    int64_t cols;
    int64_t n;                  /* sequences added */
    float *h;                   /* [cols][cols], symmetric (both triangles) */
};

/* gptq_hessian_init() : zeros for cols inputs; -ST_NOMEM. */
int gptq_hessian_init(struct gptq_hessian *h, int64_t cols, struct diag *d);
void gptq_hessian_release(struct gptq_hessian *h);

/* gptq_hessian_add() : adds one sequence of n_tok rows x (row t at x + t *
 * ld, cols values) as above.  Returns 0, or -ST_FORMAT if an activation is
 * not finite. */
int gptq_hessian_add(struct gptq_hessian *h, const float *x, int64_t n_tok, int64_t ld,
                     struct diag *d);

/* gptq_check_opts() : -ST_RANGE with the reason when o is not a grid this
 * code makes (bits, group size, damp). */
int gptq_check_opts(const struct gptq_opts *o, struct diag *d);

/* gptq_quantize() : GPTQ of W [rows][cols] (f32) with the Hessian h
 * (cols x cols, f32, symmetric; not changed) into g (allocated here; the
 * caller frees it with qgrid_free).  The rows of each column block are
 * split over tp's workers (NULL: this thread; the grid is the same for any
 * pool).  st may be NULL.  Returns 0; -ST_RANGE
 * (bad options, or no damping below 1 makes H positive definite; message
 * says so), -ST_NOMEM; -ST_RANGE when built without LAPACK. */
int gptq_quantize(const float *W, int64_t rows, int64_t cols, const float *h,
                  const struct gptq_opts *o, struct threadpool *tp, struct qgrid *g,
                  struct gptq_stats *st, struct diag *d);

/* The part of GPTQ that depends on the Hessian and the options alone
 * (dead columns, act-order, damping, the inverse's Cholesky factor): the
 * linears that share an input (q/k/v, gate/up) share it. */
struct gptq_factor {
    int64_t cols;
    double damp;                /* the damping that worked */
    int64_t dead;               /* dead columns */
    bool *is_dead;              /* [cols] */
    int64_t *perm;              /* [cols] the column order */
    double *U;                  /* [cols][cols] upper factor of (H + lambda I)^-1, permuted */
};

/* gptq_factor_init() : f from the Hessian h (cols x cols, f32, symmetric;
 * not changed) and o; released with gptq_factor_release (also after an
 * error).  Returns 0, -ST_RANGE (bad options, no damping below 1 makes H
 * positive definite, or no LAPACK), -ST_NOMEM. */
int gptq_factor_init(struct gptq_factor *f, const float *h, int64_t cols,
                     const struct gptq_opts *o, struct diag *d);
void gptq_factor_release(struct gptq_factor *f);

/* gptq_solve() : GPTQ of W [rows][f->cols] with the factor f (made with
 * the same o) into g, rows over tp as gptq_quantize; the same grid and
 * stats as gptq_quantize with f's Hessian.  Returns 0, -ST_RANGE, -ST_NOMEM. */
int gptq_solve(const float *W, int64_t rows, const struct gptq_factor *f,
               const struct gptq_opts *o, struct threadpool *tp, struct qgrid *g,
               struct gptq_stats *st, struct diag *d);

/* rtn_quantize() : round-to-nearest of W on the grid of o (act_order,
 * static_groups and damp ignored: they do not apply) into g. */
int rtn_quantize(const float *W, int64_t rows, int64_t cols, const struct gptq_opts *o,
                 struct qgrid *g, struct diag *d);

/* gptq_dequant() : the dequantized weight of g (loaders' rounding) into
 * out [rows][cols]. */
void gptq_dequant(const struct qgrid *g, float *out);

#endif
