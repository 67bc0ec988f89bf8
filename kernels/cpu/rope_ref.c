/*
 * rope_ref.c - reference rotary position embedding (normal and NeoX
 * layouts, frequency base, linear scaling, llama3 frequency factors).
 *
 * The angle of pair i is computed as ggml_rope_cache_init does:
 * theta starts at pos and is multiplied by base^(-2/n_rot) once per pair
 * (in f32), divided by the pair's frequency factor, then scaled by
 * freq_scale.  The same angles therefore come out as in llama.cpp.  The
 * rotation is x0' = fma(x0, cos, -(x1 sin)), x1' = fma(x0, sin, x1 cos),
 * which is what ggml's x86 (FMA) build computes: with it our rotated q and k
 * are bit-identical to llama.cpp's.
 */
#include <math.h>
#include <stdint.h>

#include "ops.h"

void
ops_rope_angles(float *cs, int32_t pos, const struct rope_params *p)
{
    int64_t half = p->n_rot / 2;
    float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    float theta_extrap = (float)pos;

    for (int64_t i = 0; i < half; i++) {
        float ff = p->freq_factors ? p->freq_factors[i] : 1.0f;
        float theta = p->freq_scale * (theta_extrap / ff);
        if (p->ext_factor != 0.0f) {
            /* ggml's rope_yarn: the ramp over pair i (i0 / 2), the angle
             * mixed with the unscaled one, the magnitude scaled */
            float lo = p->corr_dims[0], hi = p->corr_dims[1];
            float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);
            float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * p->ext_factor;
            float te = theta_extrap / ff;
            float th = theta * (1.0f - ramp_mix) + te * ramp_mix;
            float ms = p->attn_factor * (1.0f + 0.1f * logf(1.0f / p->freq_scale));
            cs[i] = cosf(th) * ms;
            cs[half + i] = sinf(th) * ms;
        } else {
            cs[i] = cosf(theta);
            cs[half + i] = sinf(theta);
        }
        theta_extrap *= theta_scale;
    }
}

void
ops_rope_pairs_ref(float *x, int64_t n_heads, int64_t head_dim, const float *cs,
                   const struct rope_params *p, int64_t i0)
{
    int64_t half = p->n_rot / 2;

    for (int64_t i = i0; i < half; i++) {
        float c = cs[i], s = cs[half + i];
        /* offsets of the two elements of pair i within a head */
        int64_t a = p->style == ROPE_NEOX ? i : 2 * i;
        int64_t b = p->style == ROPE_NEOX ? i + half : 2 * i + 1;

        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + h * head_dim;
            float x0 = xh[a], x1 = xh[b];
            xh[a] = fmaf(x0, c, -(x1 * s));
            xh[b] = fmaf(x0, s, x1 * c);
        }
    }
}

void
ops_rope_ref(float *x, int64_t n_heads, int64_t head_dim, const float *cs,
             const struct rope_params *p)
{
    ops_rope_pairs_ref(x, n_heads, head_dim, cs, p, 0);
}
