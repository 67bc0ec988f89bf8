/*
 * norm_ref.c - reference element-wise kernels: RMSNorm, softmax, SwiGLU.
 * Evaluation order follows ggml's CPU ops (sums of squares and softmax
 * denominators in double, the weight multiplied after the scale).
 */
#include <math.h>
#include <stdint.h>

#include "ops.h"

void
ops_rmsnorm_ref(float *y, const float *x, const float *w, int64_t n, float eps)
{
    double sum = 0.0;

    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    float mean = (float)(sum / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] * scale;
        y[i] = w ? v * w[i] : v;
    }
}

void
ops_softmax_ref(float *x, int64_t n)
{
    float max = -INFINITY;
    double sum = 0.0;

    for (int64_t i = 0; i < n; i++)
        if (x[i] > max)
            max = x[i];
    if (max == -INFINITY) {
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.0f;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float e = x[i] == -INFINITY ? 0.0f : expf(x[i] - max);
        x[i] = e;
        sum += (double)e;
    }
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

void
ops_silu_mul_ref(float *y, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
