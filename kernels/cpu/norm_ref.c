/*
 * norm_ref.c - reference element-wise kernels: RMSNorm, softmax, SwiGLU,
 * GeGLU.
 * Evaluation order follows ggml's CPU ops (sums of squares and softmax
 * denominators in double, the weight multiplied after the scale).
 */
#include <math.h>
#include <stdint.h>

#include "ops.h"
#include "qconv.h"

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

/* ggml's GELU table entry for the f16 value h: ggml_gelu_f32 (ggml-cpu/vec.h,
 * the tanh approximation in f32 with libm's tanhf) of fp32(h), rounded to
 * f16.  ggml-cpu.c is compiled as GNU C with -mfma, so GCC contracts the
 * inner 1 + a*x*x into one fused multiply-add (checked against the table of
 * the peer's libggml-cpu.so: all 65536 entries equal; unfused, one
 * differs). */
uint16_t
ops_gelu_f16_ref(uint16_t h)
{
    const float a = 0.044715f, sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    float x = qconv_fp16_to_fp32(h);
    float g = 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * fmaf(a * x, x, 1.0f)));

    return qconv_fp32_to_fp16(g);
}

void
ops_gelu_mul_ref(float *y, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        if (g <= -10.0f)
            y[i] = 0.0f;
        else if (g >= 10.0f)
            y[i] = g * up[i];
        else
            y[i] = qconv_fp16_to_fp32(ops_gelu_f16_ref(qconv_fp32_to_fp16(g))) * up[i];
    }
}
