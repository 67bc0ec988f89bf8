/*
 * fuzz_llama2c.c - libFuzzer harness for the llama2.c model and tokenizer
 * readers.
 *
 * Every input is parsed as a model .bin (from a 4-byte aligned copy, as a
 * mapping would be) and as a tokenizer.bin, both with "records until the end"
 * and with a fixed vocabulary taken from the input's 6th int32 (where a model
 * header keeps vocab_size), clamped to a small range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "llama2c.h"
#include "xio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

static void
model(const uint8_t *data, size_t size)
{
    void *copy = malloc(size ? size : 1);
    struct llama2c_model m;
    struct llama2c_view *v;
    struct src s;
    struct diag d;

    if (!copy)
        abort();
    memcpy(copy, data, size);
    src_open_mem(&s, copy, size, "fuzz");
    if (llama2c_read(&m, &s, &d) == 0) {
        size_t n = llama2c_views(&m, NULL, 0);
        v = calloc(n, sizeof(*v));
        if (!v || llama2c_views(&m, v, n) != n)
            abort();
        for (size_t i = 0; i < n; i++) {
            /* first and last element of every view must be inside the file */
            uint64_t k = (uint64_t)v[i].rows * (uint64_t)v[i].cols;
            if (!k)
                abort();
            sink += v[i].data[0] + v[i].data[k - 1];
        }
        sink += m.freq_cis_imag[0] + m.wcls[0];
        free(v);
        llama2c_close(&m);
    }
    src_close(&s);
    free(copy);
}

static void
tokenizer(const uint8_t *data, size_t size, int32_t vocab)
{
    struct llama2c_vocab v;
    struct src s;
    struct diag d;

    src_open_mem(&s, data, size, "fuzz");
    if (llama2c_tokenizer_read(&v, &s, vocab, &d) == 0) {
        for (int32_t i = 0; i < v.n; i++) {
            if (v.len[i] < 0 || (uint32_t)v.len[i] > v.max_token_length || v.text[i][v.len[i]])
                abort();
            if (v.len[i])
                sink += (float)(unsigned char)v.text[i][v.len[i] - 1];
        }
        llama2c_tokenizer_release(&v);
    }
    src_close(&s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t vocab = 3;

    model(data, size);
    tokenizer(data, size, 0);
    if (size >= 24) {
        memcpy(&vocab, data + 20, 4);
        vocab = (int32_t)((uint32_t)vocab % 64);
    }
    tokenizer(data, size, vocab);
    return 0;
}
