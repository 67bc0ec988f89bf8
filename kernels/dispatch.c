/*
 * dispatch.c - the kernel implementations known to this build and the
 * run-time choice between them (--kernel NAME, LLMKIT_KERNEL).
 */
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "cpu/matmul_avx2.h"
#include "cpu/matmul_mirror_avx2.h"

static int
ref_available(void)
{
    return 1;
}

const struct kernel_ops kernel_ops_ref = {
    .name = "ref",
    .available = ref_available,
    .mm_supported = ops_mm_supported_ref,
    .mm_work_size = ops_mm_work_size_ref,
    .mm_prepare = ops_mm_prepare_ref,
    .mm_rows = ops_mm_rows_ref,
    .mm_tmp_floats = ops_mm_tmp_floats_ref,
    .get_row = ops_get_row_ref,
    .rmsnorm = ops_rmsnorm_ref,
    .rope = ops_rope_ref,
    .softmax = ops_softmax_ref,
    .silu_mul = ops_silu_mul_ref,
    .attn = ops_attn_ref,
    .attn_scratch_floats = ops_attn_scratch_floats_ref,
    .attn_tiled = ops_attn_tiled_ref,
    .attn_tiled_scratch_floats = ops_attn_tiled_scratch_floats_ref,
};

/* AVX2 + FMA + F16C (kernels/cpu/ *_avx2.c, compiled with those flags and
 * only ever called when this returns 1; libgcc's check includes the OS
 * saving the YMM registers). */
static int
avx2_available(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#else
    return 0;
#endif
}

const struct kernel_ops kernel_ops_avx2 = {
    .name = "avx2",
    .available = avx2_available,
    .mm_supported = ops_mm_supported_ref,
    .mm_work_size = ops_mm_work_size_avx2,
    .mm_prepare = ops_mm_prepare_avx2,
    .mm_rows = ops_mm_rows_avx2,
    .mm_tmp_floats = ops_mm_tmp_floats_ref,
    .get_row = ops_get_row_ref,
    .rmsnorm = ops_rmsnorm_avx2,
    .rope = ops_rope_ref,
    .softmax = ops_softmax_ref,
    .silu_mul = ops_silu_mul_avx2,
    .attn = ops_attn_avx2,
    .attn_scratch_floats = ops_attn_scratch_floats_avx2,
    .attn_tiled = ops_attn_tiled_avx2,
    .attn_tiled_scratch_floats = ops_attn_tiled_scratch_floats_avx2,
    .mm_rows_mirror = ops_mm_rows_mirror_avx2,
};

/* Best first: "auto" takes the first available entry. */
static const struct kernel_ops *const impls[] = {
    &kernel_ops_avx2,
    &kernel_ops_ref,
};

static const char *const names[] = { "auto", "avx2", "ref", NULL };

const char *const *
ops_names(void)
{
    return names;
}

const struct kernel_ops *
ops_select(const char *want)
{
    size_t n = sizeof(impls) / sizeof(impls[0]);

    if (!want) {
        want = getenv("LLMKIT_KERNEL");
        if (!want || !*want)
            want = "auto";
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(want, "auto") == 0 ? impls[i]->available()
                                      : strcmp(want, impls[i]->name) == 0)
            return impls[i]->available() ? impls[i] : NULL;
    }
    return NULL;
}
