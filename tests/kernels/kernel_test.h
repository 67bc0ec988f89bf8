/*
 * kernel_test.h - pieces the kernel tests share: hex decoding of the golden
 * files (scripts/mkgolden-*) and one matmul run split over two row ranges.
 */
#ifndef LLMKIT_KERNEL_TEST_H
#define LLMKIT_KERNEL_TEST_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static inline int
kt_hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* hex string -> bytes (malloc'd into *out); the byte count, or -1 (NULL,
 * odd length or a bad digit) */
static inline long
kt_unhex(const char *s, uint8_t **out)
{
    size_t n = s ? strlen(s) : 1;
    if (n % 2)
        return -1;
    uint8_t *b = malloc(n / 2 + 1);
    if (!b)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        int h = kt_hexval(s[2 * i]), l = kt_hexval(s[2 * i + 1]);
        if (h < 0 || l < 0) {
            free(b);
            return -1;
        }
        b[i] = (uint8_t)(h << 4 | l);
    }
    *out = b;
    return (long)(n / 2);
}

/* y (stride ldy) = tokens [t0, t0 + n) of x (stride ldx) through the table's
 * mm_prepare and rows (its mm_rows or mm_rows_mirror), the rows split into
 * [0, split) and [split, rows) as two threads would take them */
static inline void
kt_run_rows(const struct kernel_ops *ko, ops_mm_rows_fn rows_fn, uint32_t t, const void *w,
            size_t rb, int64_t rows, int64_t cols, const float *x, int64_t ldx, int64_t t0,
            int64_t n, int64_t split, float *y, int64_t ldy)
{
    /* t may carry OPS_MM_PACKED (w then a packed matrix): the activations
     * are those of the plain type */
    uint32_t pt = t & ~OPS_MM_PACKED;
    void *work = malloc(ko->mm_work_size(pt, n, cols) + 1);
    float *tmp = malloc((size_t)ko->mm_tmp_floats(cols) * sizeof(float));
    ko->mm_prepare(work, pt, x + t0 * ldx, ldx, n, cols);
    if (split > 0)
        rows_fn(y, ldy, w, rb, t, work, x + t0 * ldx, ldx, n, cols, 0, split, tmp);
    if (split < rows)
        rows_fn(y, ldy, w, rb, t, work, x + t0 * ldx, ldx, n, cols, split, rows, tmp);
    free(work), free(tmp);
}

#endif
