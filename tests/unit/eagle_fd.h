/*
 * eagle_fd.h - the directional finite-difference check of one tensor of an
 * EAGLE head, shared by test_eagle.c and test_eagle3.c.
 *
 * The heads compute in f32, so the check is along one direction u (the
 * normalised sum of the gradient's direction and a random one), where the
 * change of the loss is large against f32 rounding: the relative error of
 * g.u against (L(p + eps u) - L(p - eps u)) / 2 eps.
 */
#ifndef LLMKIT_EAGLE_FD_H
#define LLMKIT_EAGLE_FD_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
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

#endif
