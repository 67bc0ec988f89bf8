/*
 * gguf.c - GGUF reader and writer.  See gguf.h for the layout.
 *
 * Checks made while reading (those of llama.cpp's gguf_init_from_reader in
 * ggml/src/gguf.cpp, against the GGUF spec, ggml docs/gguf.md; those marked *
 * go beyond llama.cpp):
 *   magic; version 2 or 3 (a byte-swapped file is named as such); counts >= 0
 *   and no larger than the bytes left could hold; every read bounded by the
 *   bytes present; strings <= 1 GiB, arrays <= 2^30 elements, count * size
 *   without overflow; value types 0..12 and no nested arrays; no duplicate
 *   keys; *keys and tensor names valid UTF-8; general.alignment a UINT32 power
 *   of two; tensor names < 64 bytes and unique; n_dims <= 4; *no zero or
 *   negative dimension; element and byte counts without overflow; known type
 *   with ne[0] a multiple of its block; offsets equal the running padded sum
 *   (in order, aligned, no gaps or overlaps); every tensor's data inside the file.
 *
 * On a pipe nothing is allocated ahead of the bytes that arrive: strings and
 * arrays grow as they are read, so a header that claims 1 GiB but ends early
 * costs only what was sent.
 */
#include "gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qtypes.h"

#define PAD(x, a) (((x) + (a) - 1) / (a) * (a))
#define STREAM_CHUNK ((uint64_t)1 << 20)
#define MAX_KEY 65535u

static const size_t type_size[GGUF_TYPE_COUNT] = {
    [GGUF_TYPE_UINT8] = 1, [GGUF_TYPE_INT8] = 1, [GGUF_TYPE_UINT16] = 2, [GGUF_TYPE_INT16] = 2,
    [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4, [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1,
    [GGUF_TYPE_STRING] = 0, [GGUF_TYPE_ARRAY] = 0, [GGUF_TYPE_UINT64] = 8, [GGUF_TYPE_INT64] = 8,
    [GGUF_TYPE_FLOAT64] = 8,
};

static const char *const type_names[GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};

size_t
gguf_type_size(enum gguf_type t)
{
    return (unsigned)t < GGUF_TYPE_COUNT ? type_size[t] : 0;
}

const char *
gguf_type_name(enum gguf_type t)
{
    return (unsigned)t < GGUF_TYPE_COUNT ? type_names[t] : "?";
}

/* ---- little-endian helpers ---- */

static uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void
put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void
put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- UTF-8 ---- */

static bool
utf8_valid(const char *s, uint64_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    uint64_t i = 0;

    while (i < n) {
        uint8_t c = p[i];
        uint32_t cp;
        int k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i <= (uint64_t)k)
            return false;
        for (int j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += (uint64_t)k + 1;
    }
    return true;
}

/* ---- a small string set to catch duplicates in O(n) ---- */

struct strset {
    uint64_t *slots;   /* 0 = empty, else index + 1 */
    uint64_t cap;
};

static uint64_t
hash_bytes(const char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) {
        h ^= (uint8_t)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Returns 1 if (p,n) is already present (found at *dup), 0 if inserted, -1 on ENOMEM.
 * get(i) gives the string of stored index i. */
static int
strset_add(struct strset *ss, const struct gguf_str *strs, size_t stride, uint64_t idx)
{
    const struct gguf_str *s = (const struct gguf_str *)((const char *)strs + stride * idx);
    uint64_t h, j;

    if ((idx + 1) * 2 > ss->cap) {
        uint64_t nc = ss->cap ? ss->cap * 2 : 64, k;
        uint64_t *ns = calloc(nc, sizeof(*ns));
        if (!ns)
            return -1;
        for (k = 0; k < ss->cap; k++) {
            uint64_t v = ss->slots[k];
            const struct gguf_str *o;
            if (!v)
                continue;
            o = (const struct gguf_str *)((const char *)strs + stride * (v - 1));
            j = hash_bytes(o->p, o->n) & (nc - 1);
            while (ns[j])
                j = (j + 1) & (nc - 1);
            ns[j] = v;
        }
        free(ss->slots);
        ss->slots = ns;
        ss->cap = nc;
    }
    h = hash_bytes(s->p, s->n);
    j = h & (ss->cap - 1);
    while (ss->slots[j]) {
        const struct gguf_str *o =
            (const struct gguf_str *)((const char *)strs + stride * (ss->slots[j] - 1));
        if (o->n == s->n && !memcmp(o->p, s->p, s->n))
            return 1;
        j = (j + 1) & (ss->cap - 1);
    }
    ss->slots[j] = idx + 1;
    return 0;
}

/* ---- reading primitives ---- */

static int
rd_u32(struct src *s, uint32_t *v, struct diag *d)
{
    uint8_t b[4];
    int rc = src_read(s, b, 4, d);
    if (!rc)
        *v = le32(b);
    return rc;
}

static int
rd_u64(struct src *s, uint64_t *v, struct diag *d)
{
    uint8_t b[8];
    int rc = src_read(s, b, 8, d);
    if (!rc)
        *v = le64(b);
    return rc;
}

/* Reads n bytes into a fresh buffer (NUL-terminated).  Checks n against the
 * bytes left before allocating; on a stream the buffer grows as data arrives. */
static int
rd_alloc(struct src *s, uint64_t n, char **out, struct diag *d)
{
    char *buf = NULL;
    uint64_t have = 0;

    *out = NULL;
    if (n > src_remaining(s))
        return diag_set(d, ST_FORMAT, "length %llu at offset %llu runs past end of file",
                        (unsigned long long)n, (unsigned long long)s->pos);
    if (s->map || n <= STREAM_CHUNK) {
        buf = malloc(n + 1);
        if (!buf)
            return diag_set(d, ST_NOMEM, "out of memory");
        if (src_read(s, buf, n, d)) {
            free(buf);
            return -ST_FORMAT;
        }
        buf[n] = '\0';
        *out = buf;
        return 0;
    }
    while (have < n) {
        uint64_t k = n - have < STREAM_CHUNK ? n - have : STREAM_CHUNK;
        char *nb = realloc(buf, have + k + 1);
        int rc;
        if (!nb) {
            free(buf);
            return diag_set(d, ST_NOMEM, "out of memory");
        }
        buf = nb;
        rc = src_read(s, buf + have, k, d);
        if (rc) {
            free(buf);
            return rc;
        }
        have += k;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static int
rd_str(struct src *s, struct gguf_str *str, uint64_t max, const char *what, struct diag *d)
{
    uint64_t n;
    uint64_t at = s->pos;
    int rc = rd_u64(s, &n, d);

    str->p = NULL;
    str->n = 0;
    if (rc)
        return rc;
    if (n > max)
        return diag_set(d, ST_FORMAT, "%s at offset %llu: length %llu exceeds limit %llu", what,
                        (unsigned long long)at, (unsigned long long)n, (unsigned long long)max);
    rc = rd_alloc(s, n, &str->p, d);
    if (rc)
        return rc;
    str->n = n;
    return 0;
}

static void
str_free(struct gguf_str *s)
{
    free(s->p);
    s->p = NULL;
    s->n = 0;
}

static void
kv_free_value(struct gguf_kv *kv)
{
    if (kv->type == GGUF_TYPE_STRING) {
        str_free(&kv->v.str);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_type == GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < kv->n && kv->v.strs; i++)
                str_free(&kv->v.strs[i]);
            free(kv->v.strs);
        } else {
            free(kv->v.arr);
        }
    }
    memset(&kv->v, 0, sizeof(kv->v));
    kv->n = 0;
}

static int
rd_value(struct src *s, struct gguf_kv *kv, struct diag *d)
{
    uint32_t t32;
    uint64_t n;
    int rc;

    if (kv->type == GGUF_TYPE_STRING) {
        kv->n = 1;
        return rd_str(s, &kv->v.str, GGUF_MAX_STRING, "string", d);
    }
    if (kv->type != GGUF_TYPE_ARRAY) {
        kv->n = 1;
        return src_read(s, kv->v.raw, type_size[kv->type], d);
    }
    if ((rc = rd_u32(s, &t32, d)))
        return rc;
    if (t32 >= GGUF_TYPE_COUNT || t32 == GGUF_TYPE_ARRAY)
        return diag_set(d, ST_FORMAT, "invalid array element type %u", t32);
    kv->arr_type = (enum gguf_type)t32;
    if ((rc = rd_u64(s, &n, d)))
        return rc;
    if (n > GGUF_MAX_ARRAY)
        return diag_set(d, ST_FORMAT, "array of %llu elements exceeds limit 2^30",
                        (unsigned long long)n);
    if (kv->arr_type == GGUF_TYPE_STRING) {
        uint64_t cap = 0;
        if (n > src_remaining(s) / 8)
            return diag_set(d, ST_FORMAT, "array of %llu strings runs past end of file",
                            (unsigned long long)n);
        kv->n = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (kv->n == cap) {
                uint64_t nc = cap ? cap * 2 : 16;
                struct gguf_str *ns;
                if (nc > n)
                    nc = n;
                ns = realloc(kv->v.strs, nc * sizeof(*ns));
                if (!ns)
                    return diag_set(d, ST_NOMEM, "out of memory");
                kv->v.strs = ns;
                cap = nc;
            }
            rc = rd_str(s, &kv->v.strs[i], GGUF_MAX_STRING, "string", d);
            if (rc) {
                diag_prefix(d, "element %llu", (unsigned long long)i);
                return rc;
            }
            kv->n = i + 1;
        }
        return 0;
    }
    {
        size_t es = type_size[kv->arr_type];
        char *buf;
        if (n > src_remaining(s) / es)
            return diag_set(d, ST_FORMAT, "array of %llu elements runs past end of file",
                            (unsigned long long)n);
        rc = rd_alloc(s, n * es, &buf, d);
        if (rc)
            return rc;
        kv->v.arr = buf;
        kv->n = n;
    }
    return 0;
}

static int
grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    uint64_t nc;
    void *np;

    if (need <= *cap)
        return 0;
    nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    if (nc > SIZE_MAX / elem)
        return -1;
    np = realloc(*p, nc * elem);
    if (!np)
        return -1;
    memset((char *)np + *cap * elem, 0, (nc - *cap) * elem);
    *p = np;
    *cap = nc;
    return 0;
}

static int
tensor_nbytes(const int64_t *ne, uint32_t type, uint64_t *out, struct diag *d)
{
    const struct qtype *qt = qtype_get(type);
    int64_t nel = 1;

    if (!qt)
        return diag_set(d, ST_FORMAT, "unknown tensor type %u", type);
    for (int j = 0; j < GGUF_MAX_DIMS; j++) {
        if (ne[j] <= 0)
            return diag_set(d, ST_FORMAT, "dimension %d is %lld", j, (long long)ne[j]);
        if (nel > INT64_MAX / ne[j])
            return diag_set(d, ST_FORMAT, "element count overflows");
        nel *= ne[j];
    }
    if (ne[0] % qt->blck)
        return diag_set(d, ST_FORMAT, "row of %lld elements is not a multiple of the %s block size %d",
                        (long long)ne[0], qt->name, qt->blck);
    if ((uint64_t)(nel / qt->blck) > UINT64_MAX / qt->bytes / 2)
        return diag_set(d, ST_FORMAT, "byte size overflows");
    *out = (uint64_t)(nel / qt->blck) * qt->bytes;
    return 0;
}

int
gguf_read(struct gguf *g, struct src *s, struct diag *d)
{
    uint32_t magic, version;
    uint64_t n_tensors, n_kv, expect = 0;
    struct strset ss = {0};
    int rc;

    memset(g, 0, sizeof(*g));
    g->src = s;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((rc = rd_u32(s, &magic, d)))
        goto fail;
    if (magic != GGUF_MAGIC) {
        rc = diag_set(d, ST_FORMAT, "not a GGUF file (bad magic)");
        goto fail;
    }
    if ((rc = rd_u32(s, &version, d)))
        goto fail;
    if ((version & 0xFFFF) == 0) {
        rc = diag_set(d, ST_FORMAT, "big-endian (byte-swapped) GGUF is not supported");
        goto fail;
    }
    if (version == 1) {
        rc = diag_set(d, ST_FORMAT, "GGUF version 1 is no longer supported");
        goto fail;
    }
    if (version != 2 && version != 3) {
        rc = diag_set(d, ST_FORMAT, "unsupported GGUF version %u", version);
        goto fail;
    }
    g->version = version;
    if ((rc = rd_u64(s, &n_tensors, d)) || (rc = rd_u64(s, &n_kv, d)))
        goto fail;
    /* A KV record takes at least 13 bytes, a tensor record at least 28. */
    if (n_kv > INT64_MAX || n_tensors > INT64_MAX) {
        rc = diag_set(d, ST_FORMAT, "negative %s count", n_kv > INT64_MAX ? "metadata" : "tensor");
        goto fail;
    }
    if (n_kv > src_remaining(s) / 13 || n_kv > GGUF_MAX_ARRAY) {
        rc = diag_set(d, ST_FORMAT, "truncated or corrupt: %llu metadata records cannot fit in the file",
                      (unsigned long long)n_kv);
        goto fail;
    }
    if (n_tensors > src_remaining(s) / 28 || n_tensors > GGUF_MAX_ARRAY) {
        rc = diag_set(d, ST_FORMAT, "truncated or corrupt: %llu tensor records cannot fit in the file",
                      (unsigned long long)n_tensors);
        goto fail;
    }

    for (uint64_t i = 0; i < n_kv; i++) {
        struct gguf_kv *kv;
        uint32_t t32;
        uint64_t at = s->pos;

        if (grow((void **)&g->kv, &g->cap_kv, i + 1, sizeof(*g->kv))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto fail;
        }
        kv = &g->kv[i];
        rc = rd_str(s, &kv->key, MAX_KEY, "key", d);
        if (rc) {
            diag_prefix(d, "metadata record %llu", (unsigned long long)i);
            goto fail;
        }
        g->n_kv = i + 1;
        if (!utf8_valid(kv->key.p, kv->key.n)) {
            rc = diag_set(d, ST_FORMAT, "metadata key at offset %llu is not valid UTF-8",
                          (unsigned long long)at);
            goto fail;
        }
        if (kv->key.n == 0 || memchr(kv->key.p, 0, kv->key.n)) {
            rc = diag_set(d, ST_FORMAT, "metadata key at offset %llu is empty or contains NUL",
                          (unsigned long long)at);
            goto fail;
        }
        switch (strset_add(&ss, &g->kv[0].key, sizeof(struct gguf_kv), i)) {
        case 1:
            rc = diag_set(d, ST_FORMAT, "duplicate key '%s'", kv->key.p);
            goto fail;
        case -1:
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto fail;
        }
        if ((rc = rd_u32(s, &t32, d)))
            goto fail;
        if (t32 >= GGUF_TYPE_COUNT) {
            rc = diag_set(d, ST_FORMAT, "key '%s' has invalid type %u", kv->key.p, t32);
            goto fail;
        }
        kv->type = (enum gguf_type)t32;
        rc = rd_value(s, kv, d);
        if (rc) {
            diag_prefix(d, "key '%s'", kv->key.p);
            goto fail;
        }
        if (!strcmp(kv->key.p, "general.alignment")) {
            uint32_t a;
            if (kv->type != GGUF_TYPE_UINT32) {
                rc = diag_set(d, ST_FORMAT, "general.alignment has type %s, expected u32",
                              gguf_type_name(kv->type));
                goto fail;
            }
            a = le32(kv->v.raw);
            if (a == 0 || (a & (a - 1))) {
                rc = diag_set(d, ST_FORMAT, "general.alignment %u is not a power of two", a);
                goto fail;
            }
            g->alignment = a;
        }
    }
    free(ss.slots);
    memset(&ss, 0, sizeof(ss));

    for (uint64_t i = 0; i < n_tensors; i++) {
        struct gguf_tensor *t;
        uint32_t nd, type;
        uint64_t nb;

        if (grow((void **)&g->t, &g->cap_t, i + 1, sizeof(*g->t))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto fail;
        }
        t = &g->t[i];
        rc = rd_str(s, &t->name, GGUF_MAX_NAME, "tensor name", d);
        if (rc) {
            diag_prefix(d, "tensor %llu", (unsigned long long)i);
            goto fail;
        }
        g->n_tensors = i + 1;
        /* the writer refuses an empty name too: one rule for --info and conversion */
        if (t->name.n == 0) {
            rc = diag_set(d, ST_FORMAT, "tensor %llu has an empty name", (unsigned long long)i);
            goto fail;
        }
        if (!utf8_valid(t->name.p, t->name.n) || memchr(t->name.p, 0, t->name.n)) {
            rc = diag_set(d, ST_FORMAT, "tensor %llu: name is not valid UTF-8", (unsigned long long)i);
            goto fail;
        }
        switch (strset_add(&ss, &g->t[0].name, sizeof(struct gguf_tensor), i)) {
        case 1:
            rc = diag_set(d, ST_FORMAT, "duplicate tensor name '%s'", t->name.p);
            goto fail;
        case -1:
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto fail;
        }
        if ((rc = rd_u32(s, &nd, d)))
            goto fail;
        if (nd > GGUF_MAX_DIMS) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s' has %u dimensions (at most 4)", t->name.p, nd);
            goto fail;
        }
        t->n_dims = nd;
        for (int j = 0; j < GGUF_MAX_DIMS; j++)
            t->ne[j] = 1;
        for (uint32_t j = 0; j < nd; j++) {
            uint64_t v;
            if ((rc = rd_u64(s, &v, d)))
                goto fail;
            t->ne[j] = (int64_t)v;
        }
        if ((rc = rd_u32(s, &type, d)) || (rc = rd_u64(s, &t->offset, d)))
            goto fail;
        t->type = type;
        rc = tensor_nbytes(t->ne, type, &nb, d);
        if (rc) {
            diag_prefix(d, "tensor '%s'", t->name.p);
            goto fail;
        }
        t->nbytes = nb;
        if (t->offset != expect) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s' has offset %llu, expected %llu", t->name.p,
                          (unsigned long long)t->offset, (unsigned long long)expect);
            goto fail;
        }
        if (nb > UINT64_MAX / 2 - expect - g->alignment) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s': data size overflows", t->name.p);
            goto fail;
        }
        expect += PAD(nb, g->alignment);
    }
    free(ss.slots);
    memset(&ss, 0, sizeof(ss));
    g->data_size = expect;

    g->data_offset = s->pos;
    if (n_tensors > 0) {
        g->data_offset = PAD(s->pos, g->alignment);
        if ((rc = src_skip(s, g->data_offset - s->pos, d))) {
            diag_set(d, ST_FORMAT, "data section starts past end of file");
            goto fail;
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tensor *t = &g->t[i];
        if (s->size != UINT64_MAX &&
            (g->data_offset + t->offset > s->size || t->nbytes > s->size - g->data_offset - t->offset)) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s': data past end of file (needs %llu bytes at offset %llu, file has %llu)",
                          t->name.p, (unsigned long long)t->nbytes,
                          (unsigned long long)(g->data_offset + t->offset), (unsigned long long)s->size);
            goto fail;
        }
        if (s->map)
            t->data = s->map + g->data_offset + t->offset;
    }
    return 0;

fail:
    free(ss.slots);
    {
        bool own = g->own_src;
        g->own_src = false;
        gguf_release(g);
        g->own_src = own;
    }
    return rc < 0 ? rc : -ST_FORMAT;
}

int
gguf_load_stream(struct gguf *g, struct diag *d)
{
    struct src *s = g->src;
    uint64_t need = 0;
    int rc;

    if (!s || s->map)
        return 0;
    if (s->pos != g->data_offset)
        return diag_set(d, ST_RANGE, "the stream was read past its data section");
    /* up to the end of the last tensor: its padding may be missing */
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->t[i].offset + g->t[i].nbytes > need)
            need = g->t[i].offset + g->t[i].nbytes;
    if ((rc = src_load(s, need, d)) < 0)
        return rc;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        g->t[i].data = s->map + g->data_offset + g->t[i].offset;
    return 0;
}

/* open_path() : gguf_open(), or gguf_open_file() when file_only. */
static int
open_path(struct gguf *g, const char *path, bool file_only, struct diag *d)
{
    struct src *s = calloc(1, sizeof(*s));
    int rc;

    memset(g, 0, sizeof(*g));
    if (!s)
        return diag_set(d, ST_NOMEM, "out of memory");
    rc = file_only ? src_open_file(s, path, d) : src_open(s, path, d);
    if (rc) {
        src_close(s);
        free(s);
        return rc;
    }
    rc = gguf_read(g, s, d);
    if (rc) {
        src_close(s);
        free(s);
        memset(g, 0, sizeof(*g));
        return rc;
    }
    g->own_src = true;
    return 0;
}

int
gguf_open(struct gguf *g, const char *path, struct diag *d)
{
    return open_path(g, path, false, d);
}

int
gguf_open_file(struct gguf *g, const char *path, struct diag *d)
{
    return open_path(g, path, true, d);
}

const void *
gguf_tensor_bytes(struct gguf *g, uint64_t i, void *buf, struct diag *d)
{
    struct gguf_tensor *t;
    struct src *s = g->src;
    uint64_t at;

    if (i >= g->n_tensors) {
        diag_set(d, ST_RANGE, "tensor index %llu out of range", (unsigned long long)i);
        return NULL;
    }
    t = &g->t[i];
    if (t->data)
        return t->data;
    if (!s || s->map) {
        diag_set(d, ST_RANGE, "tensor '%s' has no data", t->name.p);
        return NULL;
    }
    at = g->data_offset + t->offset;
    if (at < s->pos || i < g->next_stream) {
        diag_set(d, ST_RANGE, "tensor '%s' was requested out of file order on a stream", t->name.p);
        return NULL;
    }
    if (src_skip(s, at - s->pos, d) || src_read(s, buf, t->nbytes, d)) {
        diag_prefix(d, "tensor '%s'", t->name.p);
        return NULL;
    }
    g->next_stream = i + 1;
    return buf;
}

void
gguf_release(struct gguf *g)
{
    for (uint64_t i = 0; i < g->n_kv; i++) {
        str_free(&g->kv[i].key);
        kv_free_value(&g->kv[i]);
    }
    free(g->kv);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        str_free(&g->t[i].name);
    free(g->t);
    if (g->own_src && g->src) {
        src_close(g->src);
        free(g->src);
    }
    memset(g, 0, sizeof(*g));
}

/* ---- lookup ---- */

int64_t
gguf_find(const struct gguf *g, const char *key)
{
    size_t n = strlen(key);

    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key.n == n && !memcmp(g->kv[i].key.p, key, n))
            return (int64_t)i;
    return -1;
}

const struct gguf_kv *
gguf_get(const struct gguf *g, const char *key)
{
    int64_t i = gguf_find(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

int64_t
gguf_find_tensor(const struct gguf *g, const char *name)
{
    size_t n = strlen(name);

    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->t[i].name.n == n && !memcmp(g->t[i].name.p, name, n))
            return (int64_t)i;
    return -1;
}

static bool
scalar_int(enum gguf_type t, const uint8_t *p, int64_t *si, uint64_t *ui, bool *is_unsigned)
{
    switch (t) {
    case GGUF_TYPE_UINT8: *ui = p[0]; *is_unsigned = true; return true;
    case GGUF_TYPE_UINT16: *ui = (uint64_t)p[0] | (uint64_t)p[1] << 8; *is_unsigned = true; return true;
    case GGUF_TYPE_UINT32: *ui = le32(p); *is_unsigned = true; return true;
    case GGUF_TYPE_UINT64: *ui = le64(p); *is_unsigned = true; return true;
    case GGUF_TYPE_INT8: *si = (int8_t)p[0]; *is_unsigned = false; return true;
    case GGUF_TYPE_INT16: *si = (int16_t)((uint16_t)p[0] | (uint16_t)p[1] << 8); *is_unsigned = false; return true;
    case GGUF_TYPE_INT32: *si = (int32_t)le32(p); *is_unsigned = false; return true;
    case GGUF_TYPE_INT64: *si = (int64_t)le64(p); *is_unsigned = false; return true;
    default: return false;
    }
}

static bool
scalar_float(enum gguf_type t, const uint8_t *p, double *out)
{
    if (t == GGUF_TYPE_FLOAT32) {
        uint32_t u = le32(p);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return true;
    }
    if (t == GGUF_TYPE_FLOAT64) {
        uint64_t u = le64(p);
        memcpy(out, &u, 8);
        return true;
    }
    return false;
}

/* The integer value of a scalar record, signed or unsigned as stored. */
static bool
kv_scalar_int(const struct gguf_kv *kv, int64_t *si, uint64_t *ui, bool *uns)
{
    return kv && kv->type != GGUF_TYPE_ARRAY && kv->type != GGUF_TYPE_STRING &&
           scalar_int(kv->type, kv->v.raw, si, ui, uns);
}

bool
gguf_kv_uint(const struct gguf_kv *kv, uint64_t *out)
{
    int64_t si;
    uint64_t ui;
    bool uns;

    if (!kv_scalar_int(kv, &si, &ui, &uns))
        return false;
    if (!uns) {
        if (si < 0)
            return false;
        ui = (uint64_t)si;
    }
    *out = ui;
    return true;
}

bool
gguf_kv_int(const struct gguf_kv *kv, int64_t *out)
{
    int64_t si;
    uint64_t ui;
    bool uns;

    if (!kv_scalar_int(kv, &si, &ui, &uns))
        return false;
    if (uns) {
        if (ui > INT64_MAX)
            return false;
        si = (int64_t)ui;
    }
    *out = si;
    return true;
}

bool
gguf_kv_float(const struct gguf_kv *kv, double *out)
{
    int64_t i;

    if (!kv || kv->type == GGUF_TYPE_ARRAY || kv->type == GGUF_TYPE_STRING)
        return false;
    if (scalar_float(kv->type, kv->v.raw, out))
        return true;
    if (gguf_kv_int(kv, &i)) {
        *out = (double)i;
        return true;
    }
    return false;
}

bool
gguf_arr_int(const struct gguf_kv *kv, uint64_t i, int64_t *out)
{
    int64_t si;
    uint64_t ui;
    bool uns;
    size_t es;

    if (!kv || kv->type != GGUF_TYPE_ARRAY || i >= kv->n)
        return false;
    es = type_size[kv->arr_type];
    if (!es || !scalar_int(kv->arr_type, (const uint8_t *)kv->v.arr + i * es, &si, &ui, &uns)) {
        if (kv->arr_type == GGUF_TYPE_BOOL) {
            *out = ((const uint8_t *)kv->v.arr)[i] != 0;
            return true;
        }
        return false;
    }
    if (uns) {
        if (ui > INT64_MAX)
            return false;
        si = (int64_t)ui;
    }
    *out = si;
    return true;
}

bool
gguf_arr_float(const struct gguf_kv *kv, uint64_t i, double *out)
{
    size_t es;
    int64_t v;

    if (!kv || kv->type != GGUF_TYPE_ARRAY || i >= kv->n)
        return false;
    es = type_size[kv->arr_type];
    if (es && scalar_float(kv->arr_type, (const uint8_t *)kv->v.arr + i * es, out))
        return true;
    if (gguf_arr_int(kv, i, &v)) {
        *out = (double)v;
        return true;
    }
    return false;
}

int
gguf_get_uint(const struct gguf *g, const char *key, uint64_t *out, struct diag *d)
{
    const struct gguf_kv *kv = gguf_get(g, key);

    if (!kv)
        return 1;
    if (!gguf_kv_uint(kv, out))
        return diag_set(d, ST_FORMAT, "key '%s' has type %s, expected an unsigned integer", key,
                        gguf_type_name(kv->type));
    return 0;
}

int
gguf_get_float(const struct gguf *g, const char *key, double *out, struct diag *d)
{
    const struct gguf_kv *kv = gguf_get(g, key);

    if (!kv)
        return 1;
    if (!scalar_float(kv->type, kv->v.raw, out) || kv->type == GGUF_TYPE_ARRAY)
        return diag_set(d, ST_FORMAT, "key '%s' has type %s, expected a float", key,
                        gguf_type_name(kv->type));
    return 0;
}

int
gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct diag *d)
{
    const struct gguf_kv *kv = gguf_get(g, key);

    if (!kv)
        return 1;
    if (kv->type != GGUF_TYPE_BOOL)
        return diag_set(d, ST_FORMAT, "key '%s' has type %s, expected bool", key,
                        gguf_type_name(kv->type));
    *out = kv->v.raw[0] != 0;
    return 0;
}

int
gguf_get_str(const struct gguf *g, const char *key, const char **out, struct diag *d)
{
    const struct gguf_kv *kv = gguf_get(g, key);

    if (!kv)
        return 1;
    if (kv->type != GGUF_TYPE_STRING)
        return diag_set(d, ST_FORMAT, "key '%s' has type %s, expected a string", key,
                        gguf_type_name(kv->type));
    *out = kv->v.str.p;
    return 0;
}

/* ---- building ---- */

void
gguf_init(struct gguf *g)
{
    memset(g, 0, sizeof(*g));
    g->version = 3;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
}

static int
str_dup(struct gguf_str *dst, const char *p, uint64_t n)
{
    dst->p = malloc(n + 1);
    if (!dst->p)
        return -ST_NOMEM;
    if (n)
        memcpy(dst->p, p, n);
    dst->p[n] = '\0';
    dst->n = n;
    return 0;
}

/* Returns the record for key with its old value freed (existing key) or a new
 * zeroed record appended; NULL on ENOMEM. */
static struct gguf_kv *
kv_slot(struct gguf *g, const char *key)
{
    int64_t i = gguf_find(g, key);
    struct gguf_kv *kv;

    if (i >= 0) {
        kv = &g->kv[i];
        kv_free_value(kv);
        return kv;
    }
    if (grow((void **)&g->kv, &g->cap_kv, g->n_kv + 1, sizeof(*g->kv)))
        return NULL;
    kv = &g->kv[g->n_kv];
    memset(kv, 0, sizeof(*kv));
    if (str_dup(&kv->key, key, strlen(key)))
        return NULL;
    g->n_kv++;
    return kv;
}

static int
set_scalar(struct gguf *g, const char *key, enum gguf_type t, uint64_t bits)
{
    struct gguf_kv *kv = kv_slot(g, key);

    if (!kv)
        return -ST_NOMEM;
    kv->type = t;
    kv->n = 1;
    put64(kv->v.raw, bits);
    return 0;
}

int
gguf_set_u32(struct gguf *g, const char *key, uint32_t v)
{
    if (!strcmp(key, "general.alignment") && v && !(v & (v - 1)))
        g->alignment = v;
    return set_scalar(g, key, GGUF_TYPE_UINT32, v);
}

int
gguf_set_i32(struct gguf *g, const char *key, int32_t v)
{
    return set_scalar(g, key, GGUF_TYPE_INT32, (uint32_t)v);
}

int
gguf_set_u64(struct gguf *g, const char *key, uint64_t v)
{
    return set_scalar(g, key, GGUF_TYPE_UINT64, v);
}

int
gguf_set_f32(struct gguf *g, const char *key, float v)
{
    uint32_t u;

    memcpy(&u, &v, 4);
    return set_scalar(g, key, GGUF_TYPE_FLOAT32, u);
}

int
gguf_set_bool(struct gguf *g, const char *key, bool v)
{
    return set_scalar(g, key, GGUF_TYPE_BOOL, v ? 1 : 0);
}

int
gguf_set_strn(struct gguf *g, const char *key, const char *v, uint64_t n)
{
    struct gguf_kv *kv = kv_slot(g, key);

    if (!kv)
        return -ST_NOMEM;
    kv->type = GGUF_TYPE_STRING;
    kv->n = 1;
    return str_dup(&kv->v.str, v, n);
}

int
gguf_set_str(struct gguf *g, const char *key, const char *v)
{
    return gguf_set_strn(g, key, v, strlen(v));
}

int
gguf_set_arr(struct gguf *g, const char *key, enum gguf_type t, const void *data, uint64_t n)
{
    struct gguf_kv *kv;
    size_t es = gguf_type_size(t);

    if (!es || n > GGUF_MAX_ARRAY)
        return -ST_RANGE;
    kv = kv_slot(g, key);
    if (!kv)
        return -ST_NOMEM;
    kv->type = GGUF_TYPE_ARRAY;
    kv->arr_type = t;
    kv->v.arr = malloc(n * es + 1);
    if (!kv->v.arr)
        return -ST_NOMEM;
    if (n)
        memcpy(kv->v.arr, data, n * es);
    kv->n = n;
    return 0;
}

int
gguf_set_arr_str(struct gguf *g, const char *key, const char *const *strs, const uint64_t *lens,
                 uint64_t n)
{
    struct gguf_kv *kv;

    if (n > GGUF_MAX_ARRAY)
        return -ST_RANGE;
    kv = kv_slot(g, key);
    if (!kv)
        return -ST_NOMEM;
    kv->type = GGUF_TYPE_ARRAY;
    kv->arr_type = GGUF_TYPE_STRING;
    kv->v.strs = calloc(n ? n : 1, sizeof(*kv->v.strs));
    if (!kv->v.strs)
        return -ST_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        if (str_dup(&kv->v.strs[i], strs[i], lens ? lens[i] : strlen(strs[i]))) {
            kv->n = i;
            return -ST_NOMEM;
        }
    }
    kv->n = n;
    return 0;
}

int
gguf_set_kv_copy(struct gguf *g, const struct gguf_kv *src)
{
    struct gguf_kv *kv;

    if (src->type == GGUF_TYPE_STRING)
        return gguf_set_strn(g, src->key.p, src->v.str.p, src->v.str.n);
    if (src->type == GGUF_TYPE_ARRAY) {
        if (src->arr_type == GGUF_TYPE_STRING) {
            const char **p;
            uint64_t *l;
            int rc;
            p = malloc((src->n ? src->n : 1) * sizeof(*p));
            l = malloc((src->n ? src->n : 1) * sizeof(*l));
            if (!p || !l) {
                free(p);
                free(l);
                return -ST_NOMEM;
            }
            for (uint64_t i = 0; i < src->n; i++) {
                p[i] = src->v.strs[i].p;
                l[i] = src->v.strs[i].n;
            }
            rc = gguf_set_arr_str(g, src->key.p, p, l, src->n);
            free(p);
            free(l);
            return rc;
        }
        return gguf_set_arr(g, src->key.p, src->arr_type, src->v.arr, src->n);
    }
    kv = kv_slot(g, src->key.p);
    if (!kv)
        return -ST_NOMEM;
    kv->type = src->type;
    kv->n = 1;
    memcpy(kv->v.raw, src->v.raw, sizeof(kv->v.raw));
    if (!strcmp(src->key.p, "general.alignment") && src->type == GGUF_TYPE_UINT32) {
        uint32_t a = le32(src->v.raw);
        if (a && !(a & (a - 1)))
            g->alignment = a;
    }
    return 0;
}

void
gguf_remove(struct gguf *g, const char *key)
{
    int64_t i = gguf_find(g, key);

    if (i < 0)
        return;
    str_free(&g->kv[i].key);
    kv_free_value(&g->kv[i]);
    memmove(&g->kv[i], &g->kv[i + 1], (g->n_kv - (uint64_t)i - 1) * sizeof(*g->kv));
    g->n_kv--;
    if (!strcmp(key, "general.alignment"))
        g->alignment = GGUF_DEFAULT_ALIGNMENT;
}

int64_t
gguf_add_tensor(struct gguf *g, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                const void *data, struct diag *d)
{
    struct gguf_tensor *t;
    size_t n = strlen(name);
    int64_t full[GGUF_MAX_DIMS] = {1, 1, 1, 1};
    uint64_t nb;
    int rc;

    if (n == 0 || n > GGUF_MAX_NAME)
        return diag_set(d, ST_RANGE, "tensor name '%s' must be 1 to %d bytes", name, GGUF_MAX_NAME);
    if (n_dims > GGUF_MAX_DIMS)
        return diag_set(d, ST_RANGE, "tensor '%s' has %u dimensions (at most 4)", name, n_dims);
    if (gguf_find_tensor(g, name) >= 0)
        return diag_set(d, ST_RANGE, "duplicate tensor name '%s'", name);
    for (uint32_t j = 0; j < n_dims; j++)
        full[j] = ne[j];
    rc = tensor_nbytes(full, type, &nb, d);
    if (rc) {
        diag_prefix(d, "tensor '%s'", name);
        return -ST_RANGE;
    }
    if (grow((void **)&g->t, &g->cap_t, g->n_tensors + 1, sizeof(*g->t)))
        return diag_set(d, ST_NOMEM, "out of memory");
    t = &g->t[g->n_tensors];
    memset(t, 0, sizeof(*t));
    if (str_dup(&t->name, name, n))
        return diag_set(d, ST_NOMEM, "out of memory");
    t->n_dims = n_dims;
    memcpy(t->ne, full, sizeof(full));
    t->type = type;
    t->nbytes = nb;
    t->data = data;
    return (int64_t)g->n_tensors++;
}

int
gguf_layout(struct gguf *g, struct diag *d)
{
    uint64_t off = 0;
    const struct gguf_kv *kv = gguf_get(g, "general.alignment");

    if (kv) {
        uint32_t a;
        if (kv->type != GGUF_TYPE_UINT32)
            return diag_set(d, ST_RANGE, "general.alignment must be u32");
        a = le32(kv->v.raw);
        if (!a || (a & (a - 1)))
            return diag_set(d, ST_RANGE, "general.alignment %u is not a power of two", a);
        g->alignment = a;
    } else {
        g->alignment = GGUF_DEFAULT_ALIGNMENT;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        g->t[i].offset = off;
        off += PAD(g->t[i].nbytes, g->alignment);
    }
    g->data_size = off;
    return 0;
}

static uint64_t
value_size(enum gguf_type t, enum gguf_type at, uint64_t n, const struct gguf_kv *kv)
{
    uint64_t sz = 0;

    if (t == GGUF_TYPE_STRING)
        return 8 + kv->v.str.n;
    if (t != GGUF_TYPE_ARRAY)
        return type_size[t];
    sz = 4 + 8;
    if (at == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < n; i++)
            sz += 8 + kv->v.strs[i].n;
        return sz;
    }
    return sz + n * type_size[at];
}

/* Bytes of the header records, before the alignment padding. */
static uint64_t
header_records_size(const struct gguf *g)
{
    uint64_t n = 4 + 4 + 8 + 8;

    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        n += 8 + kv->key.n + 4 + value_size(kv->type, kv->arr_type, kv->n, kv);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        n += 8 + g->t[i].name.n + 4 + 8 * (uint64_t)g->t[i].n_dims + 4 + 8;
    return n;
}

uint64_t
gguf_header_size(const struct gguf *g)
{
    uint64_t n = header_records_size(g);

    return g->n_tensors > 0 ? PAD(n, g->alignment) : n;
}

/* Buffered writing of the header: small records go through a 64 KiB buffer. */
struct wbuf {
    FILE *fp;
    uint8_t b[65536];
    size_t n;
    int err;
};

static void
wb_flush(struct wbuf *w)
{
    if (w->n && !w->err && fwrite(w->b, 1, w->n, w->fp) != w->n)
        w->err = 1;
    w->n = 0;
}

static void
wb_put(struct wbuf *w, const void *p, uint64_t n)
{
    const uint8_t *s = p;

    while (n) {
        size_t k;
        if (w->n == sizeof(w->b))
            wb_flush(w);
        k = sizeof(w->b) - w->n;
        if (k > n)
            k = (size_t)n;
        memcpy(w->b + w->n, s, k);
        w->n += k;
        s += k;
        n -= k;
    }
}

static void
wb_u32(struct wbuf *w, uint32_t v)
{
    uint8_t b[4];
    put32(b, v);
    wb_put(w, b, 4);
}

static void
wb_u64(struct wbuf *w, uint64_t v)
{
    uint8_t b[8];
    put64(b, v);
    wb_put(w, b, 8);
}

static void
wb_str(struct wbuf *w, const struct gguf_str *s)
{
    wb_u64(w, s->n);
    wb_put(w, s->p, s->n);
}

int
gguf_write_header(struct gguf *g, FILE *fp, struct diag *d)
{
    struct wbuf *w;
    uint64_t pad;
    int rc;

    if ((rc = gguf_layout(g, d)))
        return rc;
    w = malloc(sizeof(*w));
    if (!w)
        return diag_set(d, ST_NOMEM, "out of memory");
    w->fp = fp;
    w->n = 0;
    w->err = 0;
    wb_u32(w, GGUF_MAGIC);
    wb_u32(w, g->version ? g->version : 3);
    wb_u64(w, g->n_tensors);
    wb_u64(w, g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *kv = &g->kv[i];
        wb_str(w, &kv->key);
        wb_u32(w, kv->type);
        if (kv->type == GGUF_TYPE_STRING) {
            wb_str(w, &kv->v.str);
        } else if (kv->type == GGUF_TYPE_ARRAY) {
            wb_u32(w, kv->arr_type);
            wb_u64(w, kv->n);
            if (kv->arr_type == GGUF_TYPE_STRING)
                for (uint64_t j = 0; j < kv->n; j++)
                    wb_str(w, &kv->v.strs[j]);
            else
                wb_put(w, kv->v.arr, kv->n * type_size[kv->arr_type]);
        } else {
            wb_put(w, kv->v.raw, type_size[kv->type]);
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->t[i];
        wb_str(w, &t->name);
        wb_u32(w, t->n_dims);
        for (uint32_t j = 0; j < t->n_dims; j++)
            wb_u64(w, (uint64_t)t->ne[j]);
        wb_u32(w, t->type);
        wb_u64(w, t->offset);
    }
    for (pad = gguf_header_size(g) - header_records_size(g); pad; pad--)
        wb_put(w, "", 1);
    wb_flush(w);
    rc = w->err;
    free(w);
    if (rc)
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
    return 0;
}

int
gguf_write_tensor(const struct gguf *g, FILE *fp, uint64_t i, const void *data, struct diag *d)
{
    const struct gguf_tensor *t;

    if (i >= g->n_tensors)
        return diag_set(d, ST_RANGE, "tensor index out of range");
    t = &g->t[i];
    if (t->nbytes && fwrite(data, 1, t->nbytes, fp) != t->nbytes)
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
    return gguf_write_padding(g, fp, t->nbytes, d);
}

int
gguf_write_padding(const struct gguf *g, FILE *fp, uint64_t nbytes, struct diag *d)
{
    static const uint8_t zeros[256];
    uint64_t pad = PAD(nbytes, g->alignment) - nbytes;

    while (pad) {
        uint64_t k = pad < sizeof(zeros) ? pad : sizeof(zeros);
        if (fwrite(zeros, 1, k, fp) != k)
            return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
        pad -= k;
    }
    return 0;
}

int64_t
gguf_tensor_nelements(const struct gguf_tensor *t)
{
    int64_t n = 1;

    for (int j = 0; j < GGUF_MAX_DIMS; j++) {
        if (t->ne[j] <= 0)
            return 0;
        n *= t->ne[j];
    }
    return n;
}
