/*
 * fuzz_eagle.c - libFuzzer harness for EAGLE head files (eagle_io.h): the
 * GGUF container, then the head's keys, shapes, draft vocabulary and
 * weights as generate --draft-head reads them.  A head that reads must
 * write back and read again to the same parameters.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eagle_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eagle_head h, h2;
    struct eagle_meta mt, mt2;
    struct diag d;

    if (eagle_head_read_mem(&h, &mt, data, size, &d) != 0)
        return 0;
    char path[] = "/tmp/fuzz_eagle.XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        if (eagle_head_write(&h, &mt, NULL, NULL, path, true, &d) != 0 ||
            eagle_head_read(&h2, &mt2, NULL, NULL, path, &d) != 0)
            abort();
        if (h2.n_param != h.n_param ||
            memcmp(h2.param, h.param, (size_t)h.n_param * sizeof(float)) != 0 ||
            mt2.n_draft != mt.n_draft)
            abort();
        eagle_head_release(&h2);
        free(mt2.draft_ids);
        unlink(path);
    }
    eagle_head_release(&h);
    free(mt.draft_ids);
    return 0;
}
