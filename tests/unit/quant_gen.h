/*
 * quant_gen.h - deterministic quantizer inputs shared by tests/unit/
 * test_quantize.c and the golden-file driver scripts/llamacpp-quant.c (which
 * compiles common/base/rng.c next to the llama.cpp peer), so that both quantize
 * the very same floats.
 *
 * Only +, -, *, / on doubles and one final rounding to float are used (no
 * libm), so the values are identical on every IEEE-754 platform.  A
 * "gaussian" is the Irwin-Hall sum of 12 uniforms minus 6 (mean 0, variance
 * 1, tails cut at +-6): good enough for weights, exact everywhere.
 *
 * All rows of one input come from one xoshiro256** stream (rng_seed(seed)),
 * drawn row after row in the order given.
 */
#ifndef LLMKIT_QUANT_GEN_H
#define LLMKIT_QUANT_GEN_H

#include <stdint.h>
#include <string.h>

#include "rng.h"

enum qgen_kind {
    QGEN_GAUSS,         /* N(0, 1) */
    QGEN_GAUSS_SMALL,   /* 0.02 N(0, 1), like trained weights */
    QGEN_OUTLIERS,      /* 0.05 N(0, 1) with one element in 64 at +-(3..6) */
    QGEN_ZERO,          /* all 0 */
    QGEN_TINY,          /* 1e-20 N(0, 1): squares underflow to subnormals */
    QGEN_DENORMAL,      /* 1e-39 N(0, 1): subnormal floats, scales overflow */
    QGEN_ONE_HUGE,      /* 0.01 N(0, 1) and one element at 1000 */
    QGEN_NEGATIVE,      /* -|N(0, 1)| */
    QGEN_UNIFORM_POS,   /* U[0, 1) */
    QGEN_SPARSE_GROUPS, /* N(0, 1) with random 16-element groups zeroed */
    QGEN_CONSTANT,      /* 0.375 everywhere: flat groups */
    QGEN_GRID,          /* k/8 for k in -8..7: exact rounding ties */
    QGEN_LARGE,         /* 1e5 N(0, 1): fp16 scales overflow */
    QGEN_MIXED_SCALE,   /* N(0, 1) * 2^e, e in -10..10 per 32-element group */
    QGEN_NAN,           /* N(0, 1) with one element in 50 a quiet NaN */
    QGEN_INF,           /* N(0, 1) with one element in 50 +-Inf */
    QGEN_KIND_COUNT
};

static const char *const qgen_kind_names[QGEN_KIND_COUNT] = {
    "gauss", "gauss-small", "outliers", "zero", "tiny", "denormal", "one-huge",
    "negative", "uniform-pos", "sparse-groups", "constant", "grid", "large",
    "mixed-scale", "nan", "inf",
};

static inline int
qgen_kind_by_name(const char *name)
{
    for (int k = 0; k < QGEN_KIND_COUNT; k++)
        if (strcmp(qgen_kind_names[k], name) == 0)
            return k;
    return -1;
}

static inline double
qgen_gauss(struct rng *r)
{
    double s = 0;

    for (int i = 0; i < 12; i++)
        s += rng_uniform(r);
    return s - 6.0;
}

/* qgen_row() : n floats of the given kind into x, drawn from r. */
static inline void
qgen_row(struct rng *r, int kind, int64_t n, float *x)
{
    switch (kind) {
    case QGEN_GAUSS:
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)qgen_gauss(r);
        break;
    case QGEN_GAUSS_SMALL:
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)(0.02 * qgen_gauss(r));
        break;
    case QGEN_OUTLIERS:
        for (int64_t i = 0; i < n; i++) {
            double g = qgen_gauss(r);
            double u = rng_uniform(r);
            if (u < 1.0 / 64)
                x[i] = (float)((g < 0 ? -3.0 : 3.0) * (1.0 + 64.0 * u));
            else
                x[i] = (float)(0.05 * g);
        }
        break;
    case QGEN_ZERO:
        memset(x, 0, (size_t)n * sizeof *x);
        break;
    case QGEN_TINY:
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)(1e-20 * qgen_gauss(r));
        break;
    case QGEN_DENORMAL:
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)(1e-39 * qgen_gauss(r));
        break;
    case QGEN_ONE_HUGE: {
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)(0.01 * qgen_gauss(r));
        x[(int64_t)(rng_uniform(r) * (double)n)] = 1000.0f;
        break;
    }
    case QGEN_NEGATIVE:
        for (int64_t i = 0; i < n; i++) {
            double g = qgen_gauss(r);
            x[i] = (float)(g < 0 ? g : -g);
        }
        break;
    case QGEN_UNIFORM_POS:
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)rng_uniform(r);
        break;
    case QGEN_SPARSE_GROUPS:
        for (int64_t i = 0; i < n; i += 16) {
            int zero = rng_uniform(r) < 0.4;
            for (int64_t j = i; j < i + 16 && j < n; j++)
                x[j] = zero ? 0.0f : (float)qgen_gauss(r);
        }
        break;
    case QGEN_CONSTANT:
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.375f;
        break;
    case QGEN_GRID:
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)((double)((int)(rng_uniform(r) * 16.0) - 8) / 8.0);
        break;
    case QGEN_LARGE:
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)(1e5 * qgen_gauss(r));
        break;
    case QGEN_MIXED_SCALE:
        for (int64_t i = 0; i < n; i += 32) {
            int e = (int)(rng_uniform(r) * 21.0) - 10;
            double s = 1.0;
            for (int k = 0; k < (e < 0 ? -e : e); k++)
                s = e < 0 ? s / 2 : s * 2;
            for (int64_t j = i; j < i + 32 && j < n; j++)
                x[j] = (float)(s * qgen_gauss(r));
        }
        break;
    case QGEN_NAN:
    case QGEN_INF:
        for (int64_t i = 0; i < n; i++) {
            double g = qgen_gauss(r);
            if (rng_uniform(r) >= 1.0 / 50)
                x[i] = (float)g;
            else if (kind == QGEN_NAN)
                x[i] = __builtin_nanf("");
            else
                x[i] = g < 0 ? -__builtin_inff() : __builtin_inff();
        }
        break;
    default:
        memset(x, 0, (size_t)n * sizeof *x);
        break;
    }
}

/* qgen_imatrix() : n importance weights from seed: 4 u^2 (u uniform), with
 * every 53rd weight (i % 53 == 7) exactly zero. */
static inline void
qgen_imatrix(uint64_t seed, int64_t n, float *w)
{
    struct rng r;

    rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) {
        double u = rng_uniform(&r);
        w[i] = i % 53 == 7 ? 0.0f : (float)(4.0 * u * u);
    }
}

#endif
