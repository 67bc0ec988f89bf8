/*
 * fuzz_hfjson.c - libFuzzer harness for the Hugging Face side of conversion
 * (common/formats/hf.h): config.json, tokenizer.json, tokenizer_config.json, the
 * SentencePiece tokenizer.model reader, pre-tokenizer matching and tensor
 * names.  The low 3 bits of the first byte pick what the rest of the input
 * is:
 *
 *   0  config.json                    -> hf_config_parse, then to GGUF and to
 *                                        config.json and back (same numbers)
 *   1  tokenizer.json                 -> hf_vocab_from_mem (no config)
 *   2  tokenizer.json, byte 1-2 = config vocab_size
 *   3  tokenizer_config.json NUL tokenizer.json
 *   4  tokenizer.model (protobuf)
 *   5  u16 length, tokenizer.model, tokenizer_config.json
 *   6  pre_tokenizer JSON NUL hint  -> hf_pre_match
 *   7  a tensor name                 -> hf_name_to_gguf / hf_name_from_gguf;
 *                                        a mapped name must map back
 *
 * A vocabulary that imports is written to GGUF keys, exported with
 * hf_vocab_to_json (+ hf_spm_write) and imported again: when the export
 * succeeds, the second import must give exactly the same GGUF keys (the
 * round-trip contract of hf.h), or the harness aborts.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "hf.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool
kv_equal(const struct gguf_kv *a, const struct gguf_kv *b)
{
    uint64_t i;

    if (a->type != b->type || a->n != b->n || strcmp(a->key.p, b->key.p))
        return false;
    if (a->type == GGUF_TYPE_STRING)
        return a->v.str.n == b->v.str.n && !memcmp(a->v.str.p, b->v.str.p, a->v.str.n);
    if (a->type != GGUF_TYPE_ARRAY)
        return !memcmp(a->v.raw, b->v.raw, gguf_type_size(a->type));
    if (a->arr_type != b->arr_type)
        return false;
    if (a->arr_type != GGUF_TYPE_STRING)
        return !memcmp(a->v.arr, b->v.arr, a->n * gguf_type_size(a->arr_type));
    for (i = 0; i < a->n; i++)
        if (a->v.strs[i].n != b->v.strs[i].n ||
            memcmp(a->v.strs[i].p, b->v.strs[i].p, a->v.strs[i].n))
            return false;
    return true;
}

static void
check_same(const struct gguf *a, const struct gguf *b)
{
    uint64_t i;

    if (a->n_kv != b->n_kv) {
        fprintf(stderr, "round trip: %llu keys became %llu\n", (unsigned long long)a->n_kv,
                (unsigned long long)b->n_kv);
        abort();
    }
    for (i = 0; i < a->n_kv; i++)
        if (!kv_equal(&a->kv[i], &b->kv[i])) {
            fprintf(stderr, "round trip: key '%s' differs\n", a->kv[i].key.p);
            abort();
        }
}

/* Export v and import it again; the GGUF keys must not change. */
static void
vocab_roundtrip(const struct hf_vocab *v)
{
    struct gguf g1, g2;
    struct hf_vocab w;
    struct hf_vocab_src s;
    struct diag d;
    json_t *tj, *tc;
    uint8_t *spm = NULL;
    int rc;

    gguf_init(&g1);
    if (hf_vocab_to_gguf(&g1, v, &d) < 0)
        abort();
    if (hf_vocab_to_json(v, 0, &tj, &tc, &d) < 0) {
        gguf_release(&g1);
        return;   /* e.g. a token that is not UTF-8: no tokenizer.json possible */
    }
    memset(&s, 0, sizeof(s));
    s.tokenizer_json = hf_json_dump(tj, &s.tokenizer_json_len);
    s.tokenizer_config = hf_json_dump(tc, &s.tokenizer_config_len);
    json_decref(tj);
    json_decref(tc);
    if (!s.tokenizer_json || !s.tokenizer_config)
        abort();
    if (!strcmp(v->model, "llama")) {
        if (hf_spm_write(v, &spm, &s.spm_model_len, &d) < 0)
            abort();
        s.spm_model = spm;
    }
    s.n_vocab = v->n_tokens;
    s.cfg_special = v->special;
    hf_vocab_init(&w);
    rc = hf_vocab_from_mem(&w, &s, &d);
    if (rc < 0) {
        fprintf(stderr, "round trip: re-import failed: %s\n", d.msg);
        abort();
    }
    gguf_init(&g2);
    if (hf_vocab_to_gguf(&g2, &w, &d) < 0)
        abort();
    check_same(&g1, &g2);
    gguf_release(&g1);
    gguf_release(&g2);
    hf_vocab_release(&w);
    free((char *)s.tokenizer_json);
    free((char *)s.tokenizer_config);
    free(spm);
}

static void
vocab(const struct hf_vocab_src *s)
{
    struct hf_vocab v;
    struct diag d;

    hf_vocab_init(&v);
    if (hf_vocab_from_mem(&v, s, &d) == 0) {
        if (v.n_tokens <= 0 || !v.tokens)
            abort();
        vocab_roundtrip(&v);
    }
    hf_vocab_release(&v);
}

static void
config(const char *buf, size_t len)
{
    struct hf_config c, c2;
    struct gguf g;
    struct diag d;
    json_t *o;
    char *s;
    size_t n;

    if (hf_config_parse(&c, buf, len, &d) < 0)
        return;
    gguf_init(&g);
    if (hf_config_to_gguf(&g, &c, 1, &d) < 0)
        abort();
    gguf_release(&g);
    if (c.rope.type == HF_ROPE_LLAMA3) {
        float *f = malloc((size_t)(c.head_dim / 2) * sizeof(float));
        if (!f || hf_rope_freqs(&c, f, c.head_dim / 2, &d) < 0)
            abort();
        for (int64_t k = 0; k < c.head_dim / 2; k++)
            if (!(f[k] > 0) && !isnan(f[k]))
                abort();
        free(f);
    }
    if (hf_config_to_json(&c, NULL, &o, &d) < 0)
        abort();
    s = hf_json_dump(o, &n);
    json_decref(o);
    if (!s)
        abort();
    /* config.json -> hf_config -> config.json keeps the hyperparameters */
    if (hf_config_parse(&c2, s, n, &d) < 0) {
        fprintf(stderr, "config.json written from a parsed config does not parse: %s\n", d.msg);
        abort();
    }
    if (c2.n_embd != c.n_embd || c2.n_layer != c.n_layer || c2.n_head != c.n_head ||
        c2.n_head_kv != c.n_head_kv || c2.head_dim != c.head_dim || c2.n_ff != c.n_ff ||
        c2.n_ctx != c.n_ctx || c2.rope.type != c.rope.type || c2.arch != c.arch ||
        (float)c2.rms_eps != (float)c.rms_eps)
        abort();
    free(s);
}

static void
names(const uint8_t *data, size_t size)
{
    struct hf_config c;
    struct hf_tensor_map m, m2;
    char name[256];

    if (size >= sizeof(name))
        size = sizeof(name) - 1;
    memcpy(name, data, size);
    name[size] = '\0';
    memset(&c, 0, sizeof(c));
    c.arch_name = "llama";
    c.n_layer = 100;
    c.n_head = 8;
    c.n_head_kv = 2;
    c.permute_qk = true;
    if (hf_name_to_gguf(&c, name, &m, NULL) == 1) {
        if (hf_name_from_gguf(&c, m.name, &m2, NULL) != 1 || strcmp(m2.name, name) ||
            m2.perm != m.perm)
            abort();
    }
    if (hf_name_from_gguf(&c, name, &m, NULL) == 1) {
        if (hf_name_to_gguf(&c, m.name, &m2, NULL) != 1 || strcmp(m2.name, name))
            abort();
    }
    (void)hf_tensor_force_f32(name, (uint32_t)size & 3);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct hf_vocab_src s;
    const char *p;
    const uint8_t *nul;
    size_t n;

    if (size < 1)
        return 0;
    memset(&s, 0, sizeof(s));
    p = (const char *)data + 1;
    n = size - 1;
    switch (data[0] & 7) {
    case 0:
        config(p, n);
        break;
    case 1:
    case 2:
        if ((data[0] & 7) == 2) {
            if (n < 2)
                return 0;
            s.n_vocab = (int64_t)(data[1] | data[2] << 8);
            p += 2;
            n -= 2;
        }
        s.tokenizer_json = p;
        s.tokenizer_json_len = n;
        vocab(&s);
        break;
    case 3:
        nul = memchr(p, 0, n);
        s.tokenizer_config = p;
        s.tokenizer_config_len = nul ? (size_t)(nul - (const uint8_t *)p) : n;
        if (nul) {
            s.tokenizer_json = (const char *)nul + 1;
            s.tokenizer_json_len = n - s.tokenizer_config_len - 1;
        }
        vocab(&s);
        break;
    case 4:
        s.spm_model = p;
        s.spm_model_len = n;
        vocab(&s);
        break;
    case 5: {
        size_t l;
        if (n < 2)
            return 0;
        l = (size_t)(data[1] | data[2] << 8);
        p += 2;
        n -= 2;
        if (l > n)
            l = n;
        s.spm_model = p;
        s.spm_model_len = l;
        s.tokenizer_config = p + l;
        s.tokenizer_config_len = n - l;
        vocab(&s);
        break;
    }
    case 6: {
        json_t *j;
        char hint[80] = "";
        nul = memchr(p, 0, n);
        if (nul) {
            size_t hl = n - (size_t)(nul - (const uint8_t *)p) - 1;
            if (hl >= sizeof(hint))
                hl = sizeof(hint) - 1;
            memcpy(hint, nul + 1, hl);
            hint[hl] = '\0';
            n = (size_t)(nul - (const uint8_t *)p);
        }
        if (json_load_mem(p, n, &j, NULL) == 0) {
            const char *r = hf_pre_match(j, nul ? hint : NULL);
            if (r && !*r)
                abort();
            json_decref(j);
        }
        break;
    }
    default:
        names((const uint8_t *)p, n);
        break;
    }
    return 0;
}
