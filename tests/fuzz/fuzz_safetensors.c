/*
 * fuzz_safetensors.c - libFuzzer harness for the safetensors reader, the
 * index parser and the writer's layout.
 *
 * Every input is parsed (1) as a safetensors file from memory and (2) as the
 * text of a model.safetensors.index.json.  A file that parses is re-laid out
 * with sft_plan_init/sft_plan_header and its tensor bytes, in memory; that
 * must parse again to the same tensors (names, dtypes, shapes, bytes).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"
#include "xio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads every byte of every tensor (ASan checks the bounds). */
static unsigned
touch(const struct sft_file *f)
{
    unsigned x = 0;

    for (size_t i = 0; i < f->n_tensors; i++) {
        const struct sft_tensor *t = &f->t[i];
        for (uint64_t j = 0; j < t->nbytes; j++)
            x += t->data[j];
        if (sft_find(f, t->name) != t)
            abort(); /* every tensor must be found under its own name */
    }
    for (size_t i = 0; i < f->n_meta; i++)
        if (!sft_meta_get(f, f->meta[i].key))
            abort();
    return x;
}

static void
relayout(const struct sft_file *f)
{
    struct sft_wtensor *w = calloc(f->n_tensors + 1, sizeof(*w));
    struct sft_kv *kv = calloc(f->n_meta + 1, sizeof(*kv));
    struct sft_plan p;
    struct diag d;
    char *hdr = NULL;
    size_t hlen;

    if (!w || !kv)
        abort();
    for (size_t i = 0; i < f->n_tensors; i++) {
        w[i].name = f->t[i].name;
        w[i].dtype = f->t[i].dtype;
        w[i].n_dims = f->t[i].n_dims;
        memcpy(w[i].shape, f->t[i].shape, sizeof(w[i].shape));
    }
    for (size_t i = 0; i < f->n_meta; i++) {
        kv[i].key = f->meta[i].key;
        kv[i].value = f->meta[i].value; /* stops at an embedded NUL: fine */
    }
    if (sft_plan_init(&p, w, f->n_tensors, 0, kv, f->n_meta, &d) != 0)
        abort(); /* what the reader accepts, the writer must accept */
    if (p.total_size != f->data_size)
        abort();
    if (sft_plan_header(&p, 0, &hdr, &hlen, &d) == 0) {
        size_t len = 8 + hlen + (size_t)p.total_size;
        uint8_t *buf = malloc(len);
        size_t off = 8 + hlen;
        struct src s;
        struct sft_file g;

        if (!buf)
            abort();
        for (int b = 0; b < 8; b++)
            buf[b] = (uint8_t)((uint64_t)hlen >> (8 * b));
        memcpy(buf + 8, hdr, hlen);
        for (size_t k = 0; k < p.n; k++) {
            size_t i = p.order[k];
            memcpy(buf + off, f->t[i].data, (size_t)p.nbytes[i]);
            off += (size_t)p.nbytes[i];
        }
        src_open_mem(&s, buf, len, "relayout");
        if (sft_read(&g, &s, &d) != 0) {
            fprintf(stderr, "relayout does not parse: %s\n", d.msg);
            abort();
        }
        if (g.n_tensors != f->n_tensors)
            abort();
        for (size_t i = 0; i < f->n_tensors; i++) {
            const struct sft_tensor *a = &f->t[i], *b = sft_find(&g, a->name);
            if (!b || b->dtype != a->dtype || b->n_dims != a->n_dims || b->nbytes != a->nbytes ||
                memcmp(a->shape, b->shape, sizeof(a->shape)) ||
                (a->nbytes && memcmp(a->data, b->data, (size_t)a->nbytes)))
                abort();
        }
        sft_close(&g);
        src_close(&s);
        free(buf);
        free(hdr);
    }
    sft_plan_release(&p);
    free(w);
    free(kv);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct src s;
    struct sft_file f;
    struct sft_index ix;
    struct diag d;

    src_open_mem(&s, data, size, "fuzz");
    if (sft_read(&f, &s, &d) == 0) {
        (void)touch(&f);
        relayout(&f);
        sft_close(&f);
    }
    src_close(&s);

    if (sft_index_parse(&ix, (const char *)data, size, &d) == 0) {
        for (size_t i = 0; i < ix.n; i++)
            if (ix.e[i].shard >= ix.n_shards || (i && strcmp(ix.e[i - 1].name, ix.e[i].name) >= 0))
                abort();
        sft_index_release(&ix);
    }
    return 0;
}
