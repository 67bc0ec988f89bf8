/*
 * fuzz_imatrix.c - libFuzzer harness for the importance-matrix readers
 * (llama.cpp's GGUF imatrix format and the legacy .dat format).
 *
 * Parses the input from memory; a successful parse must give entries whose
 * importance vectors can be computed, survive the include/exclude filter,
 * and write back out in both formats (to a temporary file, removed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "imatrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct imatrix im;
    struct diag d;
    const char *inc[] = { "blk.0" }, *exc[] = { "ffn" };
    char tmp[64];

    if (imatrix_read_mem(&im, data, size, &d) != 0)
        return 0;
    for (size_t i = 0; i < im.n; i++) {
        const struct imatrix_entry *e = &im.e[i];
        float *v = malloc((size_t)(e->ne0 * e->n_mat) * sizeof(float));
        if (!v)
            abort();
        (void)imatrix_values(&im, e, v, &d);
        if (imatrix_find(&im, e->name) != e)
            abort();
        free(v);
    }
    snprintf(tmp, sizeof(tmp), "/tmp/fuzz_imatrix.%ld.out", (long)getpid());
    (void)imatrix_write(&im, tmp, false, true, &d);
    (void)imatrix_write(&im, tmp, true, true, &d);
    unlink(tmp);
    imatrix_filter(&im, inc, 1, exc, 0);
    imatrix_filter(&im, NULL, 0, exc, 1);
    imatrix_release(&im);
    return 0;
}
