/*
 * fuzz_gguf.c - libFuzzer harness for the GGUF reader and writer.
 *
 * Parses the input as a GGUF file from memory (as if mapped) and as a
 * stream, reads every typed value through the getters, and writes the parsed
 * container back out; a successful parse must re-serialise to a header of the
 * size gguf_header_size() predicts and parse again.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "xio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
touch_values(const struct gguf *g)
{
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        uint64_t u;
        int64_t s;
        double f;
        (void)gguf_kv_uint(kv, &u);
        (void)gguf_kv_int(kv, &s);
        (void)gguf_kv_float(kv, &f);
        if (kv->type == GGUF_TYPE_ARRAY && kv->n)
            (void)gguf_arr_float(kv, kv->n - 1, &f);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        (void)gguf_tensor_nelements(&g->t[i]);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct src s, s2;
    struct gguf g, again;
    struct diag d;
    char *buf = NULL;
    size_t len = 0;
    FILE *fp;

    src_open_mem(&s, data, size, "fuzz");
    if (gguf_read(&g, &s, &d) == 0) {
        touch_values(&g);
        fp = open_memstream(&buf, &len);
        if (fp) {
            if (gguf_write_header(&g, fp, &d) == 0) {
                for (uint64_t i = 0; i < g.n_tensors; i++)
                    if (gguf_write_tensor(&g, fp, i, g.t[i].data, &d))
                        abort();
            }
            fclose(fp);
            if (len < gguf_header_size(&g))
                abort(); /* the writer wrote less than it promised */
            src_open_mem(&s2, buf, len, "again");
            if (gguf_read(&again, &s2, &d) != 0)
                abort(); /* what we write must read back */
            if (again.n_kv != g.n_kv || again.n_tensors != g.n_tensors)
                abort();
            gguf_release(&again);
            src_close(&s2);
            free(buf);
        }
        gguf_release(&g);
    }
    src_close(&s);
    return 0;
}
