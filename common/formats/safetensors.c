/*
 * safetensors.c - reader, sharded checkpoints and streaming writer for the
 * safetensors container.  The format and the checks are described in
 * safetensors.h; the sources are the safetensors README ("Format") and
 * safetensors/src/tensor.rs (SafeTensors::read_metadata, Metadata::validate,
 * prepare/serialize for the writer).
 */
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* ---- dtypes ---- */

static const struct {
    const char *name;
    unsigned bits;
} dtypes[SFT_DTYPE_COUNT] = {
    [SFT_BOOL] = {"BOOL", 8},
    [SFT_F4] = {"F4", 4},
    [SFT_F6_E2M3] = {"F6_E2M3", 6},
    [SFT_F6_E3M2] = {"F6_E3M2", 6},
    [SFT_U8] = {"U8", 8},
    [SFT_I8] = {"I8", 8},
    [SFT_F8_E5M2] = {"F8_E5M2", 8},
    [SFT_F8_E4M3] = {"F8_E4M3", 8},
    [SFT_F8_E8M0] = {"F8_E8M0", 8},
    [SFT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [SFT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [SFT_I16] = {"I16", 16},
    [SFT_U16] = {"U16", 16},
    [SFT_F16] = {"F16", 16},
    [SFT_BF16] = {"BF16", 16},
    [SFT_I32] = {"I32", 32},
    [SFT_U32] = {"U32", 32},
    [SFT_F32] = {"F32", 32},
    [SFT_C64] = {"C64", 64},
    [SFT_F64] = {"F64", 64},
    [SFT_I64] = {"I64", 64},
    [SFT_U64] = {"U64", 64},
};

const char *
sft_dtype_name(enum sft_dtype t)
{
    return (unsigned)t < SFT_DTYPE_COUNT ? dtypes[t].name : NULL;
}

unsigned
sft_dtype_bits(enum sft_dtype t)
{
    return (unsigned)t < SFT_DTYPE_COUNT ? dtypes[t].bits : 0;
}

int
sft_dtype_by_name(const char *name)
{
    for (int i = 0; i < SFT_DTYPE_COUNT; i++)
        if (!strcmp(dtypes[i].name, name))
            return i;
    return -1;
}

int
sft_tensor_nbytes(enum sft_dtype dtype, int n_dims, const int64_t *shape, uint64_t *out,
                  struct diag *d)
{
    unsigned bits = sft_dtype_bits(dtype);
    uint64_t numel = 1;

    if (!bits)
        return diag_set(d, ST_FORMAT, "invalid dtype %d", (int)dtype);
    if (n_dims < 0 || n_dims > SFT_MAX_DIMS)
        return diag_set(d, ST_FORMAT, "%d dimensions (at most %d)", n_dims, SFT_MAX_DIMS);
    /* Left to right with a check at every step, as the reference folds it. */
    for (int i = 0; i < n_dims; i++) {
        if (shape[i] < 0)
            return diag_set(d, ST_FORMAT, "negative dimension %lld", (long long)shape[i]);
        if (shape[i] && numel > UINT64_MAX / (uint64_t)shape[i])
            return diag_set(d, ST_FORMAT, "element count overflows");
        numel *= (uint64_t)shape[i];
    }
    if (numel > UINT64_MAX / bits)
        return diag_set(d, ST_FORMAT, "byte size overflows");
    if ((numel * bits) % 8)
        return diag_set(d, ST_FORMAT, "%llu elements of %s do not fill whole bytes",
                        (unsigned long long)numel, dtypes[dtype].name);
    *out = numel * bits / 8;
    return 0;
}

/* ---- small helpers ---- */

/* A name made safe for a one-line message: control bytes become '?', long
 * names are cut. */
static const char *
msg_name(const char *s, char *buf, size_t cap)
{
    size_t i;

    for (i = 0; s[i] && i + 4 < cap; i++)
        buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (s[i]) {
        memcpy(buf + (i > 3 ? i - 3 : 0), "...", 3);
        i = i > 3 ? i : 3;
    }
    buf[i] = '\0';
    return buf;
}

#define NAMEBUF 96
#define MSGNAME(s) msg_name((s), (char[NAMEBUF]){0}, NAMEBUF)

static uint64_t
le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void
put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A growable string for building JSON. */
struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
};

static void
sb_grow(struct sbuf *b, size_t more)
{
    size_t nc;
    char *np;

    if (b->oom)
        return;
    if (more > SIZE_MAX / 2 - b->n) {
        b->oom = true;
        return;
    }
    if (b->n + more + 1 <= b->cap)
        return;
    nc = b->cap ? b->cap : 256;
    while (nc < b->n + more + 1)
        nc *= 2;
    np = realloc(b->p, nc);
    if (!np) {
        b->oom = true;
        return;
    }
    b->p = np;
    b->cap = nc;
}

static void
sb_add(struct sbuf *b, const char *s, size_t n)
{
    sb_grow(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void
sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void
sb_u64(struct sbuf *b, uint64_t v)
{
    char tmp[24];
    int k = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);
    sb_add(b, tmp, (size_t)k);
}

/* Decodes one UTF-8 sequence of s[0..n); returns its length and the code point
 * in *cp, or 0 when invalid (overlong, surrogate, > U+10FFFF, truncated). */
static size_t
utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    uint32_t c;
    size_t len, i;

    if (!n)
        return 0;
    c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2;
        c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        c &= 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
        c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

static bool
utf8_valid(const char *s)
{
    size_t n = strlen(s), i = 0, k;
    uint32_t cp;

    while (i < n) {
        k = utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (!k)
            return false;
        i += k;
    }
    return true;
}

/* JSON string as serde_json writes it: the short escapes, other control bytes
 * as \u00xx (lower-case hex), everything else (UTF-8, DEL, '/') verbatim. */
static void
sb_json_serde(struct sbuf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";

    sb_add(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '"': sb_add(b, "\\\"", 2); break;
        case '\\': sb_add(b, "\\\\", 2); break;
        case '\b': sb_add(b, "\\b", 2); break;
        case '\f': sb_add(b, "\\f", 2); break;
        case '\n': sb_add(b, "\\n", 2); break;
        case '\r': sb_add(b, "\\r", 2); break;
        case '\t': sb_add(b, "\\t", 2); break;
        default:
            if (c < 0x20) {
                char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                sb_add(b, e, 6);
            } else {
                sb_add(b, (const char *)&c, 1);
            }
        }
    }
    sb_add(b, "\"", 1);
}

/* JSON string as Python's json.dumps(ensure_ascii=True) writes it: anything
 * outside ' '..'~' as \uxxxx (lower-case, surrogate pairs above U+FFFF).  s
 * must be valid UTF-8. */
static void
sb_json_python(struct sbuf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    size_t n = strlen(s), i = 0, k;
    uint32_t cp;

    sb_add(b, "\"", 1);
    while (i < n) {
        k = utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (!k) { /* not reached for validated input; keep the output valid JSON */
            cp = 0xFFFD;
            k = 1;
        }
        i += k;
        switch (cp) {
        case '"': sb_add(b, "\\\"", 2); continue;
        case '\\': sb_add(b, "\\\\", 2); continue;
        case '\b': sb_add(b, "\\b", 2); continue;
        case '\f': sb_add(b, "\\f", 2); continue;
        case '\n': sb_add(b, "\\n", 2); continue;
        case '\r': sb_add(b, "\\r", 2); continue;
        case '\t': sb_add(b, "\\t", 2); continue;
        }
        if (cp >= 0x20 && cp < 0x7f) {
            char c = (char)cp;
            sb_add(b, &c, 1);
            continue;
        }
        uint32_t units[2];
        int nu = 1;
        if (cp >= 0x10000) {
            units[0] = 0xD800 + ((cp - 0x10000) >> 10);
            units[1] = 0xDC00 + ((cp - 0x10000) & 0x3FF);
            nu = 2;
        } else {
            units[0] = cp;
        }
        for (int u = 0; u < nu; u++) {
            char e[6] = {'\\', 'u', hex[(units[u] >> 12) & 15], hex[(units[u] >> 8) & 15],
                         hex[(units[u] >> 4) & 15], hex[units[u] & 15]};
            sb_add(b, e, 6);
        }
    }
    sb_add(b, "\"", 1);
}

/* ---- reading one file ---- */

struct name_idx {
    const char *name;
    size_t idx;
};

static int
cmp_name_idx(const void *a, const void *b)
{
    const struct name_idx *x = a, *y = b;
    return strcmp(x->name, y->name);
}

static int
cmp_offsets(const void *a, const void *b)
{
    const struct sft_tensor *x = a, *y = b;

    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int
read_u64_array(const json_t *a, uint64_t *out, size_t max, size_t *n, const char *what,
               struct diag *d)
{
    size_t i;
    json_t *v;

    if (!json_is_array(a))
        return diag_set(d, ST_FORMAT, "'%s' is not an array", what);
    if (json_array_size(a) > max)
        return diag_set(d, ST_FORMAT, "'%s' has %zu entries (at most %zu)", what,
                        json_array_size(a), max);
    json_array_foreach(a, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return diag_set(d, ST_FORMAT, "'%s' entry %zu is not a non-negative integer", what, i);
        out[i] = (uint64_t)json_integer_value(v);
    }
    *n = json_array_size(a);
    return 0;
}

static int
parse_tensor(struct sft_tensor *t, const char *name, const json_t *v, struct diag *d)
{
    const json_t *jd, *js, *jo;
    uint64_t vals[SFT_MAX_DIMS], offs[2];
    size_t n;
    int dt, rc;

    t->name = strdup(name);
    if (!t->name)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (!json_is_object(v))
        return diag_set(d, ST_FORMAT, "tensor '%s': entry is not an object", MSGNAME(name));
    jd = json_object_get(v, "dtype");
    js = json_object_get(v, "shape");
    jo = json_object_get(v, "data_offsets");
    if (!jd || !js || !jo)
        return diag_set(d, ST_FORMAT, "tensor '%s': missing '%s'", MSGNAME(name),
                        !jd ? "dtype" : !js ? "shape" : "data_offsets");
    if (!json_is_string(jd))
        return diag_set(d, ST_FORMAT, "tensor '%s': 'dtype' is not a string", MSGNAME(name));
    dt = sft_dtype_by_name(json_string_value(jd));
    if (dt < 0 || strlen(json_string_value(jd)) != json_string_length(jd))
        return diag_set(d, ST_FORMAT, "tensor '%s': unknown dtype '%s'", MSGNAME(name),
                        MSGNAME(json_string_value(jd)));
    t->dtype = (enum sft_dtype)dt;
    rc = read_u64_array(js, vals, SFT_MAX_DIMS, &n, "shape", d);
    if (rc) {
        diag_prefix(d, "tensor '%s'", MSGNAME(name));
        return rc;
    }
    t->n_dims = (int)n;
    for (size_t i = 0; i < n; i++)
        t->shape[i] = (int64_t)vals[i]; /* <= LLONG_MAX: jansson's integer range */
    rc = read_u64_array(jo, offs, 2, &n, "data_offsets", d);
    if (rc == 0 && n != 2)
        rc = diag_set(d, ST_FORMAT, "'data_offsets' must be [begin, end]");
    if (rc) {
        diag_prefix(d, "tensor '%s'", MSGNAME(name));
        return rc;
    }
    t->begin = offs[0];
    t->end = offs[1];
    rc = sft_tensor_nbytes(t->dtype, t->n_dims, t->shape, &t->nbytes, d);
    if (rc) {
        diag_prefix(d, "tensor '%s'", MSGNAME(name));
        return rc;
    }
    t->numel = t->nbytes * 8 / dtypes[t->dtype].bits;
    return 0;
}

static int
parse_meta(struct sft_file *f, const json_t *v, struct diag *d)
{
    const char *k;
    json_t *x;
    size_t i = 0;

    f->has_meta = true;
    if (json_is_null(v)) /* serde reads null as "no metadata" */
        return 0;
    if (!json_is_object(v))
        return diag_set(d, ST_FORMAT, "'__metadata__' is not an object");
    f->meta = calloc(json_object_size(v) + 1, sizeof(*f->meta));
    if (!f->meta)
        return diag_set(d, ST_NOMEM, "out of memory");
    json_object_foreach((json_t *)v, k, x) {
        if (!json_is_string(x))
            return diag_set(d, ST_FORMAT, "'__metadata__' value of '%s' is not a string",
                            MSGNAME(k));
        struct sft_meta *m = &f->meta[i];
        size_t len = json_string_length(x);
        m->key = strdup(k);
        m->value = malloc(len + 1);
        if (!m->key || !m->value) {
            free(m->key);
            free(m->value);
            m->key = m->value = NULL;
            return diag_set(d, ST_NOMEM, "out of memory");
        }
        memcpy(m->value, json_string_value(x), len);
        m->value[len] = '\0';
        m->value_len = len;
        f->n_meta = ++i;
    }
    return 0;
}

static int
parse_header(struct sft_file *f, const json_t *root, struct diag *d)
{
    const char *key;
    json_t *v;
    size_t n = 0;
    int rc;

    f->t = calloc(json_object_size(root) + 1, sizeof(*f->t));
    if (!f->t)
        return diag_set(d, ST_NOMEM, "out of memory");
    json_object_foreach((json_t *)root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            rc = parse_meta(f, v, d);
        } else {
            f->n_tensors = n + 1; /* so that sft_close frees the name */
            rc = parse_tensor(&f->t[n], key, v, d);
            n++;
        }
        if (rc)
            return rc;
    }
    return 0;
}

static int
check_layout(struct sft_file *f, struct diag *d)
{
    uint64_t end = 0;

    qsort(f->t, f->n_tensors, sizeof(*f->t), cmp_offsets);
    for (size_t i = 0; i < f->n_tensors; i++) {
        struct sft_tensor *t = &f->t[i];
        if (t->end < t->begin)
            return diag_set(d, ST_FORMAT, "tensor '%s': data_offsets [%llu, %llu] end before they begin",
                            MSGNAME(t->name), (unsigned long long)t->begin,
                            (unsigned long long)t->end);
        if (t->begin != end) {
            if (i == 0)
                return diag_set(d, ST_FORMAT, "tensor '%s': data begins at %llu, not 0",
                                MSGNAME(t->name), (unsigned long long)t->begin);
            return diag_set(d, ST_FORMAT, "tensor '%s': data begins at %llu, but '%s' ends at %llu (%s)",
                            MSGNAME(t->name), (unsigned long long)t->begin,
                            MSGNAME(f->t[i - 1].name), (unsigned long long)end,
                            t->begin < end ? "overlap" : "hole");
        }
        if (t->end - t->begin != t->nbytes)
            return diag_set(d, ST_FORMAT,
                            "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but %s %s needs %llu",
                            MSGNAME(t->name), (unsigned long long)t->begin,
                            (unsigned long long)t->end, (unsigned long long)(t->end - t->begin),
                            dtypes[t->dtype].name, t->n_dims ? "shape" : "scalar",
                            (unsigned long long)t->nbytes);
        end = t->end;
    }
    if (end != f->data_size)
        return diag_set(d, ST_FORMAT, "tensors cover %llu bytes but the data section has %llu",
                        (unsigned long long)end, (unsigned long long)f->data_size);
    return 0;
}

static int
build_by_name(size_t **out, const struct sft_tensor *t, size_t n, struct diag *d)
{
    struct name_idx *v = malloc((n + 1) * sizeof(*v));
    size_t *r = malloc((n + 1) * sizeof(*r));

    if (!v || !r) {
        free(v);
        free(r);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        v[i].name = t[i].name;
        v[i].idx = i;
    }
    qsort(v, n, sizeof(*v), cmp_name_idx);
    for (size_t i = 0; i < n; i++)
        r[i] = v[i].idx;
    free(v);
    *out = r;
    return 0;
}

int
sft_read(struct sft_file *f, struct src *s, struct diag *d)
{
    const uint8_t *map = s->map;
    uint64_t size = s->size;
    json_t *root = NULL;
    int rc;

    memset(f, 0, sizeof(*f));
    f->src = s;
    if (!map) {
        if (size != 0)
            return diag_set(d, ST_RANGE, "safetensors input must be a regular file, not a pipe or device");
    }
    if (size < 8)
        return diag_set(d, ST_FORMAT, "file too small for a safetensors header (%llu bytes)",
                        (unsigned long long)size);
    f->header_len = le64(map);
    if (f->header_len > SFT_MAX_HEADER)
        return diag_set(d, ST_FORMAT, "header length %llu exceeds the limit of %llu bytes",
                        (unsigned long long)f->header_len, SFT_MAX_HEADER);
    if (f->header_len > size - 8)
        return diag_set(d, ST_FORMAT, "header length %llu runs past the end of the file (%llu bytes)",
                        (unsigned long long)f->header_len, (unsigned long long)size);
    if (f->header_len == 0 || map[8] != '{')
        return diag_set(d, ST_FORMAT, "header does not start with '{'");
    f->data_offset = 8 + f->header_len;
    f->data_size = size - f->data_offset;

    rc = json_load_mem((const char *)map + 8, (size_t)f->header_len, &root, d);
    if (rc) {
        diag_prefix(d, "header");
        goto fail;
    }
    rc = parse_header(f, root, d);
    json_decref(root);
    if (rc)
        goto fail;
    rc = check_layout(f, d);
    if (rc)
        goto fail;
    for (size_t i = 0; i < f->n_tensors; i++)
        f->t[i].data = map + f->data_offset + f->t[i].begin;
    rc = build_by_name(&f->by_name, f->t, f->n_tensors, d);
    if (rc)
        goto fail;
    return 0;
fail:
    sft_close(f);
    return rc;
}

int
sft_open(struct sft_file *f, const char *path, struct diag *d)
{
    struct src *s = calloc(1, sizeof(*s));
    int rc;

    memset(f, 0, sizeof(*f));
    if (!s)
        return diag_set(d, ST_NOMEM, "out of memory");
    /* a FIFO, device or socket: refused (ST_IO, as a directory is), and
     * at once: opening a FIFO would wait for a writer */
    rc = src_open_file(s, path, d);
    if (rc) {
        src_close(s);
        free(s);
        return rc;
    }
    rc = sft_read(f, s, d);
    if (rc) {
        src_close(s);
        free(s);
        return rc;
    }
    f->own_src = true;
    return 0;
}

void
sft_close(struct sft_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_tensors; i++)
        free(f->t[i].name);
    free(f->t);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->meta);
    free(f->by_name);
    if (f->own_src && f->src) {
        src_close(f->src);
        free(f->src);
    }
    memset(f, 0, sizeof(*f));
}

const struct sft_tensor *
sft_find(const struct sft_file *f, const char *name)
{
    size_t lo = 0, hi = f->n_tensors;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct sft_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *
sft_meta_get(const struct sft_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[i].key, key))
            return f->meta[i].value;
    return NULL;
}

/* ---- index of a sharded checkpoint ---- */

static bool
shard_name_ok(const char *s, size_t len)
{
    const char *p = s;

    if (!len || strlen(s) != len || s[0] == '/')
        return false;
    while (*p) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (!q)
            break;
        p = q + 1;
        if (!*p)
            return false; /* trailing '/' */
    }
    return true;
}

int
sft_index_parse(struct sft_index *ix, const char *json, size_t len, struct diag *d)
{
    json_t *root = NULL, *wm, *md, *v;
    struct name_idx *by_shard = NULL;
    const char *key;
    size_t i, n;
    int rc;

    memset(ix, 0, sizeof(*ix));
    rc = json_load_mem(json, len, &root, d);
    if (rc) {
        diag_prefix(d, "index");
        return rc;
    }
    if (!json_is_object(root)) {
        rc = diag_set(d, ST_FORMAT, "index is not a JSON object");
        goto out;
    }
    md = json_object_get(root, "metadata");
    if (md && json_is_object(md)) {
        json_t *ts = json_object_get(md, "total_size");
        if (ts && json_is_integer(ts) && json_integer_value(ts) >= 0) {
            ix->has_total_size = true;
            ix->total_size = (uint64_t)json_integer_value(ts);
        }
    }
    wm = json_object_get(root, "weight_map");
    if (!wm) {
        rc = diag_set(d, ST_FORMAT, "index has no 'weight_map'");
        goto out;
    }
    if (!json_is_object(wm)) {
        rc = diag_set(d, ST_FORMAT, "index 'weight_map' is not an object");
        goto out;
    }
    n = json_object_size(wm);
    if (n == 0) {
        rc = diag_set(d, ST_FORMAT, "index 'weight_map' is empty");
        goto out;
    }
    ix->e = calloc(n, sizeof(*ix->e));
    by_shard = malloc(n * sizeof(*by_shard));
    if (!ix->e || !by_shard) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    i = 0;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            rc = diag_set(d, ST_FORMAT, "index: tensor '%s': shard name is not a string",
                          MSGNAME(key));
            goto out;
        }
        if (!shard_name_ok(json_string_value(v), json_string_length(v))) {
            rc = diag_set(d, ST_FORMAT, "index: tensor '%s': bad shard file name '%s'",
                          MSGNAME(key), MSGNAME(json_string_value(v)));
            goto out;
        }
        ix->e[i].name = strdup(key);
        if (!ix->e[i].name) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        by_shard[i].name = json_string_value(v);
        by_shard[i].idx = i;
        ix->n = ++i;
    }
    /* Distinct shard names, sorted; without a quadratic search. */
    qsort(by_shard, n, sizeof(*by_shard), cmp_name_idx);
    ix->shards = calloc(n, sizeof(*ix->shards));
    if (!ix->shards) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (i = 0; i < n; i++) {
        if (i == 0 || strcmp(by_shard[i].name, by_shard[i - 1].name)) {
            ix->shards[ix->n_shards] = strdup(by_shard[i].name);
            if (!ix->shards[ix->n_shards]) {
                rc = diag_set(d, ST_NOMEM, "out of memory");
                goto out;
            }
            ix->n_shards++;
        }
        ix->e[by_shard[i].idx].shard = ix->n_shards - 1;
    }
    /* Entries sorted by tensor name (keys are unique: duplicates were refused). */
    {
        struct name_idx *ne = by_shard; /* reuse: same size */
        struct sft_index_entry *se = malloc(n * sizeof(*se));
        if (!se) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        for (i = 0; i < n; i++) {
            ne[i].name = ix->e[i].name;
            ne[i].idx = i;
        }
        qsort(ne, n, sizeof(*ne), cmp_name_idx);
        for (i = 0; i < n; i++)
            se[i] = ix->e[ne[i].idx];
        free(ix->e);
        ix->e = se;
    }
    rc = 0;
out:
    free(by_shard);
    json_decref(root);
    if (rc)
        sft_index_release(ix);
    return rc;
}

void
sft_index_release(struct sft_index *ix)
{
    if (!ix)
        return;
    for (size_t i = 0; i < ix->n; i++)
        free(ix->e[i].name);
    free(ix->e);
    for (size_t i = 0; i < ix->n_shards; i++)
        free(ix->shards[i]);
    free(ix->shards);
    memset(ix, 0, sizeof(*ix));
}

/* ---- whole checkpoints ---- */

static bool
ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Splits path into a malloc'd directory and a pointer to the base name. */
static char *
dir_of(const char *path, const char **base)
{
    const char *slash = strrchr(path, '/');
    char *dir;

    if (!slash) {
        *base = path;
        return strdup(".");
    }
    *base = slash + 1;
    if (slash == path)
        return strdup("/");
    dir = malloc((size_t)(slash - path) + 1);
    if (dir) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    return dir;
}

static int
model_open_files(struct sft_model *m, char **names, size_t n, struct diag *d)
{
    m->files = calloc(n, sizeof(*m->files));
    m->file_names = calloc(n, sizeof(*m->file_names));
    if (!m->files || !m->file_names)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char *p;
        int rc;

        m->file_names[i] = strdup(names[i]);
        p = m->dir ? path_join(m->dir, names[i]) : strdup(names[i]);
        if (!m->file_names[i] || !p) {
            free(p);
            return diag_set(d, ST_NOMEM, "out of memory");
        }
        m->n_files = i + 1;
        rc = sft_open(&m->files[i], p, d);
        free(p);
        if (rc) {
            diag_prefix(d, "'%s'", MSGNAME(names[i]));
            return rc;
        }
    }
    return 0;
}

static int
model_open_index(struct sft_model *m, const char *index_path, struct diag *d)
{
    struct sft_index ix;
    struct name_idx *all = NULL;
    size_t total = 0, k;
    char *buf = NULL;
    size_t len;
    int rc;
    const char *base = strrchr(index_path, '/') ? strrchr(index_path, '/') + 1 : index_path;

    m->sharded = true;
    rc = read_file_all(index_path, SFT_MAX_INDEX, &buf, &len, d);
    if (rc) {
        diag_prefix(d, "'%s'", MSGNAME(base));
        return rc;
    }
    rc = sft_index_parse(&ix, buf, len, d);
    free(buf);
    if (rc) {
        diag_prefix(d, "'%s'", MSGNAME(base));
        return rc;
    }
    m->has_total_size = ix.has_total_size;
    m->total_size = ix.total_size;
    rc = model_open_files(m, ix.shards, ix.n_shards, d);
    if (rc)
        goto out;

    /* No tensor name in two shards (whether or not the index lists it). */
    for (size_t f = 0; f < m->n_files; f++)
        total += m->files[f].n_tensors;
    all = malloc((total + 1) * sizeof(*all));
    if (!all) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    k = 0;
    for (size_t f = 0; f < m->n_files; f++) {
        for (size_t i = 0; i < m->files[f].n_tensors; i++) {
            all[k].name = m->files[f].t[i].name;
            all[k].idx = f;
            k++;
        }
    }
    qsort(all, total, sizeof(*all), cmp_name_idx);
    for (k = 1; k < total; k++) {
        if (!strcmp(all[k].name, all[k - 1].name)) {
            size_t a = all[k - 1].idx, b = all[k].idx;
            if (a > b) {
                size_t t = a;
                a = b;
                b = t;
            }
            rc = diag_set(d, ST_FORMAT, "tensor '%s' is in both '%s' and '%s'",
                          MSGNAME(all[k].name), MSGNAME(m->file_names[a]),
                          MSGNAME(m->file_names[b]));
            goto out;
        }
    }

    m->tensors = calloc(ix.n, sizeof(*m->tensors));
    if (!m->tensors) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (k = 0; k < ix.n; k++) {
        size_t f = ix.e[k].shard;
        const struct sft_tensor *t = sft_find(&m->files[f], ix.e[k].name);
        if (!t) {
            rc = diag_set(d, ST_FORMAT, "tensor '%s' listed in the index is missing from '%s'",
                          MSGNAME(ix.e[k].name), MSGNAME(m->file_names[f]));
            goto out;
        }
        m->tensors[k].t = t;
        m->tensors[k].file = f;
    }
    m->n_tensors = ix.n;
    rc = 0;
out:
    free(all);
    sft_index_release(&ix);
    return rc;
}

int
sft_model_open(struct sft_model *m, const char *path, struct diag *d)
{
    const char *base = NULL;
    char *p = NULL;
    int rc;

    memset(m, 0, sizeof(*m));
    if (path_is_dir(path)) {
        m->dir = strdup(path);
        if (!m->dir)
            return diag_set(d, ST_NOMEM, "out of memory");
        p = path_join(path, SFT_INDEX_NAME);
        if (!p) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        if (path_exists(p)) {
            rc = model_open_index(m, p, d);
            goto out;
        }
        base = SFT_SINGLE_NAME;
        free(p);
        p = path_join(path, SFT_SINGLE_NAME);
        if (!p) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        if (!path_exists(p)) {
            rc = diag_set(d, ST_IO, "no %s or %s in the directory", SFT_SINGLE_NAME, SFT_INDEX_NAME);
            goto out;
        }
    } else if (!strcmp(path, "-")) {
        base = path; /* standard input: works when it is a regular file */
    } else {
        m->dir = dir_of(path, &base);
        if (!m->dir)
            return diag_set(d, ST_NOMEM, "out of memory");
        if (ends_with(path, ".json")) {
            rc = model_open_index(m, path, d);
            goto out;
        }
    }
    /* One file. */
    {
        char *names[1] = {(char *)base};
        rc = model_open_files(m, names, 1, d);
        if (rc)
            goto out;
    }
    m->tensors = calloc(m->files[0].n_tensors + 1, sizeof(*m->tensors));
    if (!m->tensors) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m->files[0].n_tensors; i++) {
        m->tensors[i].t = &m->files[0].t[m->files[0].by_name[i]];
        m->tensors[i].file = 0;
    }
    m->n_tensors = m->files[0].n_tensors;
    rc = 0;
out:
    free(p);
    if (rc)
        sft_model_close(m);
    return rc;
}

const struct sft_tensor *
sft_model_find(const struct sft_model *m, const char *name, size_t *file)
{
    size_t lo = 0, hi = m->n_tensors;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, m->tensors[mid].t->name);
        if (c == 0) {
            if (file)
                *file = m->tensors[mid].file;
            return m->tensors[mid].t;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

void
sft_model_close(struct sft_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_files; i++) {
        sft_close(&m->files[i]);
        free(m->file_names[i]);
    }
    free(m->files);
    free(m->file_names);
    free(m->tensors);
    free(m->dir);
    memset(m, 0, sizeof(*m));
}

/* ---- writing: layout ---- */

struct layout_key {
    size_t idx;
    enum sft_dtype dtype;
    const char *name;
};

static int
cmp_layout(const void *a, const void *b)
{
    const struct layout_key *x = a, *y = b;

    if (x->dtype != y->dtype)
        return x->dtype > y->dtype ? -1 : 1; /* descending dtype */
    return strcmp(x->name, y->name);
}

int
sft_plan_init(struct sft_plan *p, const struct sft_wtensor *t, size_t n,
              uint64_t max_shard_bytes, const struct sft_kv *meta, size_t n_meta,
              struct diag *d)
{
    struct name_idx *names = NULL;
    struct layout_key *keys = NULL;
    size_t *shard_list = NULL; /* per tensor: provisional shard (see below) */
    size_t k;
    int rc;

    memset(p, 0, sizeof(*p));
    p->n = n;
    p->t = t;
    p->nbytes = calloc(n + 1, sizeof(*p->nbytes));
    p->offset = calloc(n + 1, sizeof(*p->offset));
    p->shard_of = calloc(n + 1, sizeof(*p->shard_of));
    p->order = calloc(n + 1, sizeof(*p->order));
    names = malloc((n + 1) * sizeof(*names));
    keys = malloc((n + 1) * sizeof(*keys));
    shard_list = malloc((n + 1) * sizeof(*shard_list));
    if (!p->nbytes || !p->offset || !p->shard_of || !p->order || !names || !keys || !shard_list) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }

    /* Describe-time checks: names, dtypes, sizes. */
    for (size_t i = 0; i < n; i++) {
        const char *nm = t[i].name;
        if (!nm) {
            rc = diag_set(d, ST_RANGE, "tensor %zu has no name", i);
            goto out;
        }
        if (!utf8_valid(nm)) {
            rc = diag_set(d, ST_RANGE, "tensor '%s': name is not valid UTF-8", MSGNAME(nm));
            goto out;
        }
        if (!strcmp(nm, "__metadata__")) {
            rc = diag_set(d, ST_RANGE, "tensor name '__metadata__' is reserved");
            goto out;
        }
        rc = sft_tensor_nbytes(t[i].dtype, t[i].n_dims, t[i].shape, &p->nbytes[i], d);
        if (rc) {
            rc = -ST_RANGE;
            diag_prefix(d, "tensor '%s'", MSGNAME(nm));
            goto out;
        }
        if (p->nbytes[i] > UINT64_MAX - p->total_size) {
            rc = diag_set(d, ST_RANGE, "total size overflows");
            goto out;
        }
        p->total_size += p->nbytes[i];
        names[i].name = nm;
        names[i].idx = i;
    }
    qsort(names, n, sizeof(*names), cmp_name_idx);
    for (k = 1; k < n; k++) {
        if (!strcmp(names[k].name, names[k - 1].name)) {
            rc = diag_set(d, ST_RANGE, "tensor '%s' given twice", MSGNAME(names[k].name));
            goto out;
        }
    }

    /* Greedy split in the caller's order (huggingface_hub
     * split_state_dict_into_shards_factory).  A shard gets its number when it
     * is appended to the list: an oversized tensor is appended as a shard of
     * its own at once, ahead of the shard being filled, which is appended when
     * the next tensor does not fit or at the end.  tag[] holds a provisional
     * shard ("generation") per tensor, gen_no[] the final numbers. */
    {
        size_t *gen_no = malloc((n + 1) * sizeof(*gen_no));
        size_t n_gen = 0, cur = (size_t)-1, next_no = 0;
        uint64_t cur_size = 0;

        if (!gen_no) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t sz = p->nbytes[i];
            if (max_shard_bytes && sz > max_shard_bytes) {
                gen_no[n_gen] = next_no++;
                shard_list[i] = n_gen++;
                continue;
            }
            if (cur != (size_t)-1 && max_shard_bytes && cur_size + sz > max_shard_bytes) {
                gen_no[cur] = next_no++;
                cur = (size_t)-1;
            }
            if (cur == (size_t)-1) {
                cur = n_gen++;
                cur_size = 0;
            }
            shard_list[i] = cur;
            cur_size += sz;
        }
        if (cur != (size_t)-1)
            gen_no[cur] = next_no++;
        for (size_t i = 0; i < n; i++)
            p->shard_of[i] = gen_no[shard_list[i]];
        free(gen_no);
        p->n_shards = next_no ? next_no : 1; /* no tensors: one empty file */
    }

    /* Inside each shard: descending dtype, then name; contiguous offsets. */
    p->shards = calloc(p->n_shards, sizeof(*p->shards));
    if (!p->shards) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        p->shards[p->shard_of[i]].count++;
    for (size_t s = 1; s < p->n_shards; s++)
        p->shards[s].first = p->shards[s - 1].first + p->shards[s - 1].count;
    {
        size_t *fill = calloc(p->n_shards, sizeof(*fill));
        if (!fill) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            size_t s = p->shard_of[i];
            struct layout_key *key = &keys[p->shards[s].first + fill[s]++];
            key->idx = i;
            key->dtype = t[i].dtype;
            key->name = t[i].name;
        }
        free(fill);
    }
    for (size_t s = 0; s < p->n_shards; s++) {
        struct sft_shard *sh = &p->shards[s];
        uint64_t off = 0;

        qsort(keys + sh->first, sh->count, sizeof(*keys), cmp_layout);
        for (k = sh->first; k < sh->first + sh->count; k++) {
            size_t i = keys[k].idx;
            p->order[k] = i;
            p->offset[i] = off;
            off += p->nbytes[i];
        }
        sh->data_size = off;
        if (p->n_shards == 1)
            snprintf(sh->name, sizeof(sh->name), "%s", SFT_SINGLE_NAME);
        else
            snprintf(sh->name, sizeof(sh->name), "model-%05zu-of-%05zu.safetensors", s + 1,
                     p->n_shards);
    }

    /* Metadata. */
    p->write_meta = !meta || n_meta > 0;
    {
        static const struct sft_kv pt = {"format", "pt"};
        const struct sft_kv *src = meta ? meta : &pt;
        size_t cnt = meta ? n_meta : 1;

        p->meta = calloc(cnt + 1, sizeof(*p->meta));
        if (!p->meta) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < cnt; i++) {
            if (!src[i].key || !src[i].value || !utf8_valid(src[i].key) ||
                !utf8_valid(src[i].value)) {
                rc = diag_set(d, ST_RANGE, "metadata pair %zu is not valid UTF-8 text", i);
                goto out;
            }
            for (size_t j = 0; j < i; j++) {
                if (!strcmp(src[i].key, src[j].key)) {
                    rc = diag_set(d, ST_RANGE, "metadata key '%s' given twice", MSGNAME(src[i].key));
                    goto out;
                }
            }
            p->meta[i].key = strdup(src[i].key);
            p->meta[i].value = strdup(src[i].value);
            p->n_meta = i + 1;
            if (!p->meta[i].key || !p->meta[i].value) {
                rc = diag_set(d, ST_NOMEM, "out of memory");
                goto out;
            }
        }
    }
    rc = 0;
out:
    free(names);
    free(keys);
    free(shard_list);
    if (rc)
        sft_plan_release(p);
    return rc;
}

void
sft_plan_release(struct sft_plan *p)
{
    if (!p)
        return;
    free(p->nbytes);
    free(p->offset);
    free(p->shard_of);
    free(p->order);
    free(p->shards);
    for (size_t i = 0; i < p->n_meta; i++) {
        free((char *)p->meta[i].key);
        free((char *)p->meta[i].value);
    }
    free(p->meta);
    memset(p, 0, sizeof(*p));
}

int
sft_plan_header(const struct sft_plan *p, size_t s, char **out, size_t *len, struct diag *d)
{
    struct sbuf b = {0};
    const struct sft_shard *sh;
    bool first = true;

    *out = NULL;
    *len = 0;
    if (s >= p->n_shards)
        return diag_set(d, ST_RANGE, "shard %zu of %zu", s, p->n_shards);
    sh = &p->shards[s];
    sb_add(&b, "{", 1);
    if (p->write_meta) {
        sb_str(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < p->n_meta; i++) {
            if (i)
                sb_add(&b, ",", 1);
            sb_json_serde(&b, p->meta[i].key);
            sb_add(&b, ":", 1);
            sb_json_serde(&b, p->meta[i].value);
        }
        sb_add(&b, "}", 1);
        first = false;
    }
    for (size_t k = sh->first; k < sh->first + sh->count; k++) {
        size_t i = p->order[k];
        const struct sft_wtensor *t = &p->t[i];
        if (!first)
            sb_add(&b, ",", 1);
        first = false;
        sb_json_serde(&b, t->name);
        sb_str(&b, ":{\"dtype\":\"");
        sb_str(&b, dtypes[t->dtype].name);
        sb_str(&b, "\",\"shape\":[");
        for (int j = 0; j < t->n_dims; j++) {
            if (j)
                sb_add(&b, ",", 1);
            sb_u64(&b, (uint64_t)t->shape[j]);
        }
        sb_str(&b, "],\"data_offsets\":[");
        sb_u64(&b, p->offset[i]);
        sb_add(&b, ",", 1);
        sb_u64(&b, p->offset[i] + p->nbytes[i]);
        sb_str(&b, "]}");
    }
    sb_add(&b, "}", 1);
    while (!b.oom && b.n % 8)
        sb_add(&b, " ", 1);
    if (b.oom) {
        free(b.p);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    if (b.n > SFT_MAX_HEADER) {
        free(b.p);
        return diag_set(d, ST_RANGE, "header of '%s' would be %zu bytes (limit %llu)", sh->name, b.n,
                        SFT_MAX_HEADER);
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

int
sft_plan_index_json(const struct sft_plan *p, char **out, size_t *len, struct diag *d)
{
    struct sbuf b = {0};
    struct name_idx *v;

    *out = NULL;
    *len = 0;
    v = malloc((p->n + 1) * sizeof(*v));
    if (!v)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        v[i].name = p->t[i].name;
        v[i].idx = i;
    }
    /* Python sorts str keys by code point; for UTF-8 that is byte order. */
    qsort(v, p->n, sizeof(*v), cmp_name_idx);
    sb_str(&b, "{\n  \"metadata\": {\n    \"total_size\": ");
    sb_u64(&b, p->total_size);
    sb_str(&b, "\n  },\n  \"weight_map\": {");
    for (size_t k = 0; k < p->n; k++) {
        sb_str(&b, k ? ",\n    " : "\n    ");
        sb_json_python(&b, v[k].name);
        sb_str(&b, ": ");
        sb_json_python(&b, p->shards[p->shard_of[v[k].idx]].name);
    }
    sb_str(&b, p->n ? "\n  }\n}\n" : "}\n}\n");
    free(v);
    if (b.oom) {
        free(b.p);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

/* ---- writing: the stream ---- */

static int
writer_init(struct sft_writer *w, const struct sft_plan *p, bool force)
{
    memset(w, 0, sizeof(*w));
    w->p = p;
    w->force = force;
    w->out.slot = -1;
    return 0;
}

int
sft_writer_open_dir(struct sft_writer *w, const struct sft_plan *p, const char *dir, bool force,
                    struct diag *d)
{
    writer_init(w, p, force);
    if (!path_is_dir(dir))
        return diag_set(d, ST_IO, "'%s' is not a directory", MSGNAME(dir));
    w->dir = strdup(dir);
    if (!w->dir)
        return diag_set(d, ST_NOMEM, "out of memory");
    return 0;
}

int
sft_writer_open_file(struct sft_writer *w, const struct sft_plan *p, const char *path, bool force,
                     struct diag *d)
{
    writer_init(w, p, force);
    if (p->n_shards != 1)
        return diag_set(d, ST_RANGE, "%zu shards cannot go to one file", p->n_shards);
    w->path = strdup(path);
    if (!w->path)
        return diag_set(d, ST_NOMEM, "out of memory");
    return 0;
}

/* Opens the output of shard w->shards_done and writes its size and header. */
static int
shard_begin(struct sft_writer *w, struct diag *d)
{
    const struct sft_plan *p = w->p;
    const struct sft_shard *sh = &p->shards[w->shards_done];
    char *hdr = NULL, *path;
    size_t hlen;
    uint8_t n8[8];
    int rc;

    rc = sft_plan_header(p, w->shards_done, &hdr, &hlen, d);
    if (rc)
        return rc;
    path = w->dir ? path_join(w->dir, sh->name) : strdup(w->path);
    if (!path) {
        free(hdr);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    rc = xout_open(&w->out, path, w->force, d);
    if (rc) {
        diag_prefix(d, "'%s'", MSGNAME(sh->name));
        free(path);
        free(hdr);
        return rc;
    }
    free(path);
    w->shard_open = true;
    put_le64(n8, hlen);
    rc = write_all(w->out.fp, n8, 8, d);
    if (!rc)
        rc = write_all(w->out.fp, hdr, hlen, d);
    free(hdr);
    if (rc)
        diag_prefix(d, "'%s'", MSGNAME(sh->name));
    return rc;
}

static int
shard_end(struct sft_writer *w, struct diag *d)
{
    const char *name = w->p->shards[w->shards_done].name;
    int rc = xout_commit(&w->out, d);

    w->shard_open = false;
    if (rc) {
        diag_prefix(d, "'%s'", name);
        return rc;
    }
    w->shards_done++;
    return 0;
}

int
sft_sink_put(void *ctx, const void *p, size_t n, struct diag *d)
{
    struct sft_sink *s = ctx;
    return sft_writer_put(s->w, s->i, p, n, d);
}

size_t
sft_writer_next(const struct sft_writer *w)
{
    return w->p && w->next < w->p->n ? w->p->order[w->next] : (size_t)-1;
}

int
sft_writer_put(struct sft_writer *w, size_t i, const void *data, uint64_t n, struct diag *d)
{
    const struct sft_plan *p = w->p;
    size_t want;
    int rc;

    if (!p || w->next >= p->n)
        return diag_set(d, ST_RANGE, "tensor %zu given after all tensors were written", i);
    want = p->order[w->next];
    if (i != want)
        return diag_set(d, ST_RANGE, "tensor '%s' given out of order: '%s' comes next",
                        i < p->n ? MSGNAME(p->t[i].name) : "?", MSGNAME(p->t[want].name));
    if (n > p->nbytes[i] - w->done)
        return diag_set(d, ST_RANGE, "tensor '%s': %llu bytes given, %llu expected",
                        MSGNAME(p->t[i].name), (unsigned long long)(w->done + n),
                        (unsigned long long)p->nbytes[i]);
    if (!w->shard_open) {
        rc = shard_begin(w, d);
        if (rc)
            return rc;
    }
    if (n) {
        if (n > SIZE_MAX)
            return diag_set(d, ST_RANGE, "chunk too large");
        rc = write_all(w->out.fp, data, (size_t)n, d);
        if (rc) {
            diag_prefix(d, "'%s'", p->shards[w->shards_done].name);
            return rc;
        }
    }
    w->done += n;
    if (w->done < p->nbytes[i])
        return 0;
    w->done = 0;
    w->next++;
    {
        const struct sft_shard *sh = &p->shards[w->shards_done];
        if (w->next == sh->first + sh->count)
            return shard_end(w, d);
    }
    return 0;
}

int
sft_writer_close(struct sft_writer *w, struct diag *d)
{
    const struct sft_plan *p = w->p;
    int rc = 0;

    if (!p) {
        sft_writer_abort(w);
        return diag_set(d, ST_RANGE, "writer not open");
    }
    if (w->next < p->n) {
        rc = diag_set(d, ST_RANGE, "tensor '%s' %s not written", MSGNAME(p->t[p->order[w->next]].name),
                      w->done ? "was only partly" : "was");
        goto out;
    }
    /* Shards without tensors (only with an empty plan) still get a file. */
    while (w->shards_done < p->n_shards) {
        rc = shard_begin(w, d);
        if (!rc)
            rc = shard_end(w, d);
        if (rc)
            goto out;
    }
    if (w->dir && p->n_shards > 1) {
        char *json, *path;
        size_t len;
        rc = sft_plan_index_json(p, &json, &len, d);
        if (rc)
            goto out;
        path = path_join(w->dir, SFT_INDEX_NAME);
        if (!path) {
            free(json);
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        rc = write_file_atomic(path, json, len, w->force, d);
        free(path);
        free(json);
        if (rc) {
            diag_prefix(d, "'%s'", SFT_INDEX_NAME);
            goto out;
        }
    }
out:
    sft_writer_abort(w);
    return rc;
}

void
sft_writer_abort(struct sft_writer *w)
{
    if (!w)
        return;
    if (w->shard_open)
        xout_abort(&w->out);
    free(w->dir);
    free(w->path);
    memset(w, 0, sizeof(*w));
    w->out.slot = -1;
}
