/*
 * backward_ref.c - the trainer's scalar reference kernels (backward.h):
 * backward_ref.inc compiled in float (table backward_ops_ref) and in double
 * (the bw_*_ref64 functions the finite-difference tests use).
 */
#include <math.h>
#include <stdint.h>

#include "backward.h"
#include "backward_ref.h"
#include "ops.h"

#define R float
#define REPS float
#define F(name) name##_ref
#define SQRT sqrtf
#define EXP expf
#define LOG logf
#include "backward_ref.inc"
#undef R
#undef REPS
#undef F
#undef SQRT
#undef EXP
#undef LOG

#define R double
#define REPS double
#define F(name) name##_ref64
#define SQRT sqrt
#define EXP exp
#define LOG log
#include "backward_ref.inc"

const struct backend_backward_ops backward_ops_ref = {
    .name = "ref",
    .matmul_fwd = bw_matmul_fwd_ref,
    .matmul_bwd = bw_matmul_bwd_ref,
    .rmsnorm_fwd = bw_rmsnorm_fwd_ref,
    .rmsnorm_bwd = bw_rmsnorm_bwd_ref,
    .silu_mul_fwd = bw_silu_mul_fwd_ref,
    .silu_mul_bwd = bw_silu_mul_bwd_ref,
    .rope_fwd = bw_rope_fwd_ref,
    .rope_bwd = bw_rope_bwd_ref,
    .attn_fwd = bw_attn_fwd_ref,
    .attn_bwd = bw_attn_bwd_ref,
    .attn_ttt_fwd = bw_attn_ttt_fwd_ref,
    .attn_ttt_bwd = bw_attn_ttt_bwd_ref,
    .xent_fwd = bw_xent_fwd_ref,
    .xent_bwd = bw_xent_bwd_ref,
    .smoothl1_fwd = bw_smoothl1_fwd_ref,
    .smoothl1_bwd = bw_smoothl1_bwd_ref,
};
