/*
 * dispatch.c - the kernel implementations known to this build and the
 * run-time choice between them (--kernel NAME, LLMKIT_KERNEL).
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "cpu/matmul_avx2.h"
#include "cpu/attn_avx512.h"
#include "cpu/matmul_avx512.h"
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
    .gelu_mul = ops_gelu_mul_ref,
    .attn = ops_attn_ref,
    .attn_scratch_floats = ops_attn_scratch_floats_ref,
    .attn_tiled = ops_attn_tiled_ref,
    .attn_tiled_scratch_floats = ops_attn_tiled_scratch_floats_ref,
    .mm_rows_mirror = ops_mm_rows_mirror_ref,
};

/* AVX2 + FMA + F16C (kernels/cpu/ *_avx2.c, compiled with those flags and
 * only ever called when this returns 1; libgcc's check includes the OS
 * saving the YMM registers). */
static int
avx2_available(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#if defined(__clang__)
    /* clang's __builtin_cpu_supports knows no "f16c": CPUID.1:ECX bit 29 */
    unsigned a, b, c, d;
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
#else
    int f16c = __builtin_cpu_supports("f16c");
#endif
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
    return 0;
#endif
}

/* the entries the avx2 and avx512 tables share (all but the one-row
 * attention: the avx512 table's shares its scratch size and its bits) */
#define AVX2_SET_BUT_ATTN                                         \
    .mm_supported = ops_mm_supported_ref,                         \
    .mm_work_size = ops_mm_work_size_avx2,                        \
    .mm_prepare = ops_mm_prepare_avx2,                            \
    .mm_tmp_floats = ops_mm_tmp_floats_ref,                       \
    .get_row = ops_get_row_ref,                                   \
    .rmsnorm = ops_rmsnorm_avx2,                                  \
    .rope = ops_rope_avx2,                                        \
    .softmax = ops_softmax_ref,                                   \
    .silu_mul = ops_silu_mul_avx2,                                \
    .gelu_mul = ops_gelu_mul_avx2,                                \
    .attn_scratch_floats = ops_attn_scratch_floats_avx2,          \
    .attn_tiled = ops_attn_tiled_avx2,                            \
    .attn_tiled_scratch_floats = ops_attn_tiled_scratch_floats_avx2

const struct kernel_ops kernel_ops_avx2 = {
    .name = "avx2",
    .available = avx2_available,
    .mm_rows = ops_mm_rows_avx2,
    .mm_rows_mirror = ops_mm_rows_mirror_avx2,
    .attn = ops_attn_avx2,
    AVX2_SET_BUT_ATTN,
};

/* AVX-512 F/BW/VL/DQ + VNNI on top of the AVX2 set (libgcc's check includes
 * the OS saving the ZMM state), then one real execution of those
 * instructions under a SIGILL guard: CPUID flags have been seen to list
 * extensions a machine then faulted on (llama.cpp's native build died with
 * SIGILL on AMX here); such a CPU falls back to "avx2". */
static sigjmp_buf probe_jmp;
static int avx512_ok;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void
probe_sigill(int sig)
{
    (void)sig;
    siglongjmp(probe_jmp, 1);
}

static void
avx512_check(void)
{
#if defined(__x86_64__)
    if (!avx2_available() || !__builtin_cpu_supports("avx512f") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vnni"))
        return;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = probe_sigill;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGILL, &sa, &old) != 0)
        return;
    if (sigsetjmp(probe_jmp, 1) == 0)
        avx512_ok = ops_avx512_probe();
    sigaction(SIGILL, &old, NULL);
#endif
}

static int
avx512_available(void)
{
    const char *off = getenv("LLMKIT_NO_AVX512");
    if (off && *off && strcmp(off, "0") != 0)
        return 0;
    pthread_once(&avx512_once, avx512_check);
    return avx512_ok;
}

/* The AVX2 table with the AVX-512 batched matmul tiles: the same bits. */
const struct kernel_ops kernel_ops_avx512 = {
    .name = "avx512",
    .available = avx512_available,
    .mm_rows = ops_mm_rows_avx512,
    .mm_rows_mirror = ops_mm_rows_mirror_avx512,
    .mm_pack_size = ops_mm_pack_size_avx512,
    .mm_pack = ops_mm_pack_avx512,
    .attn = ops_attn_avx512,
    AVX2_SET_BUT_ATTN,
};

/* Best first: "auto" takes the first available entry. */
static const struct kernel_ops *const impls[] = {
    &kernel_ops_avx512,
    &kernel_ops_avx2,
    &kernel_ops_ref,
};

static const char *const names[] = { "auto", "avx512", "avx2", "ref", NULL };

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
