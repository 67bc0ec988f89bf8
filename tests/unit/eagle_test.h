/*
 * eagle_test.h - what test_eagle.c and test_eagle3.c share: the directional
 * finite-difference check of one tensor of an EAGLE head, the top tokens of
 * a logit row, reading a head file of the fuzz corpus.
 *
 * The heads compute in f32, so the check is along one direction u (the
 * normalised sum of the gradient's direction and a random one), where the
 * change of the loss is large against f32 rounding: the relative error of
 * g.u against (L(p + eps u) - L(p - eps u)) / 2 eps.
 */
#ifndef LLMKIT_EAGLE_TEST_H
#define LLMKIT_EAGLE_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "eagle_io.h"
#include "rng.h"

/* tensor i of h; g: the whole gradient; u: scratch of h->n_param floats;
 * loss(ctx): the loss at h's current parameters.  *gn = |g_i|. */
static double
eagle_fd_tensor(struct eagle_head *h, int i, const float *g, float *u, struct rng *r, double eps,
                double (*loss)(void *ctx), void *ctx, double *gn)
{
    int64_t off = h->t[i] - h->param, len = h->rows[i] * h->cols[i];
    double rn = 0, un = 0, an = 0;
    *gn = 0;
    for (int64_t j = 0; j < len; j++)
        *gn += (double)g[off + j] * g[off + j];
    *gn = sqrt(*gn);
    for (int64_t j = 0; j < len; j++) {
        u[j] = (float)(2 * rng_uniform(r) - 1);
        rn += (double)u[j] * u[j];
    }
    rn = sqrt(rn);
    for (int64_t j = 0; j < len; j++) {
        u[j] = (float)(u[j] / rn + (*gn > 0 ? g[off + j] / *gn : 0));
        un += (double)u[j] * u[j];
    }
    un = sqrt(un);
    for (int64_t j = 0; j < len; j++) {
        u[j] = (float)(u[j] / un);
        an += (double)g[off + j] * u[j];
    }
    float *p = h->t[i];
    float *save = malloc((size_t)len * sizeof(float));
    memcpy(save, p, (size_t)len * sizeof(float));
    for (int64_t j = 0; j < len; j++)
        p[j] = save[j] + (float)eps * u[j];
    double lp = loss(ctx);
    for (int64_t j = 0; j < len; j++)
        p[j] = save[j] - (float)eps * u[j];
    double lm = loss(ctx);
    memcpy(p, save, (size_t)len * sizeof(float));
    free(save);
    double fd = (lp - lm) / (2 * eps);
    double rel = fabs(fd - an) / fmax(fmax(fabs(fd), fabs(an)), 1e-12);
    printf("%-26s |g| %.4g  g.u %.6g  fd %.6g  rel %.2g\n", eagle_head_tensor_name(h, i), *gn,
           an, fd, rel);
    return rel;
}

/* best[0 .. k) = the ids of the k largest of z [V], largest first (ties:
 * lower id) */
static void
eagle_top_ids(const float *z, int64_t V, int k, int32_t *best)
{
    for (int j = 0; j < k; j++) {
        best[j] = -1;
        for (int64_t v = 0; v < V; v++) {
            int taken = 0;
            for (int q = 0; q < j; q++)
                taken |= best[q] == v;
            if (!taken && (best[j] < 0 || z[v] > z[best[j]]))
                best[j] = (int32_t)v;
        }
    }
}

/* eagle_head_read() of tests/fuzz/corpus/eagle/f; prints the code and
 * message when it is not want; every failure leaves a message */
static int
eagle_read_corpus(const char *f, int want, struct eagle_head *h, struct eagle_meta *mt)
{
    char p[256];
    struct diag d = { "" };
    snprintf(p, sizeof p, "tests/fuzz/corpus/eagle/%s", f);
    int rc = eagle_head_read(h, mt, NULL, NULL, p, &d);
    if (rc != want || (rc < 0 && !d.msg[0]))
        fprintf(stderr, "%s: %d (%s)\n", f, rc, d.msg);
    return rc < 0 && !d.msg[0] ? 1 : rc;
}

/* max |a * s - b| over n floats; *amax (when not NULL) = max |a| */
static double
eagle_grad_diff(const float *a, float s, const float *b, int64_t n, double *amax)
{
    double dm = 0, am = 0;
    for (int64_t j = 0; j < n; j++) {
        am = fmax(am, fabs(a[j]));
        dm = fmax(dm, fabs(s * a[j] - b[j]));
    }
    if (amax)
        *amax = am;
    return dm;
}

#endif
