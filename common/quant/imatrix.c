/*
 * imatrix.c - importance matrices: reading and writing llama.cpp's two file
 * formats, and collecting them through the forward pass's hooks.  See
 * imatrix.h; the arithmetic follows llama.cpp's tools/imatrix/imatrix.cpp
 * (IMatrixCollector) and tools/quantize/quantize.cpp (load_imatrix).
 */
#include "imatrix.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "tokenizer.h"
#include "xio.h"

#define IMATRIX_FILE_MAX ((size_t)1 << 32)  /* 4 GiB: far above any real imatrix */
#define IMATRIX_MIN_ROWS 16                 /* llama-imatrix ignores smaller batches */
#define IMATRIX_UBATCH 512                  /* llama-imatrix's default n_ubatch */

void
imatrix_init(struct imatrix *im)
{
    memset(im, 0, sizeof(*im));
}

static void
entry_free(struct imatrix_entry *e)
{
    free(e->name);
    free(e->sums);
    free(e->counts);
    memset(e, 0, sizeof(*e));
}

void
imatrix_release(struct imatrix *im)
{
    for (size_t i = 0; i < im->n; i++)
        entry_free(&im->e[i]);
    free(im->e);
    for (size_t i = 0; i < im->n_datasets; i++)
        free(im->datasets[i]);
    free(im->datasets);
    memset(im, 0, sizeof(*im));
}

static int
cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct imatrix_entry *)a)->name, ((const struct imatrix_entry *)b)->name);
}

const struct imatrix_entry *
imatrix_find(const struct imatrix *im, const char *name)
{
    for (size_t i = 0; i < im->n; i++)
        if (!strcmp(im->e[i].name, name))
            return &im->e[i];
    return NULL;
}

/* The entry named name (created with n_mat x ne0 zeros when absent), or NULL
 * when out of memory or when an existing entry has another shape (*bad set). */
static struct imatrix_entry *
entry_get(struct imatrix *im, const char *name, int64_t ne0, int64_t n_mat, bool *bad)
{
    struct imatrix_entry *e;

    *bad = false;
    for (size_t i = 0; i < im->n; i++) {
        e = &im->e[i];
        if (!strcmp(e->name, name)) {
            if (e->ne0 != ne0 || e->n_mat != n_mat) {
                *bad = true;
                return NULL;
            }
            return e;
        }
    }
    if (im->n == im->cap) {
        size_t nc = im->cap ? im->cap * 2 : 64;
        struct imatrix_entry *ne = realloc(im->e, nc * sizeof(*ne));
        if (!ne)
            return NULL;
        im->e = ne;
        im->cap = nc;
    }
    e = &im->e[im->n];
    memset(e, 0, sizeof(*e));
    e->name = strdup(name);
    e->ne0 = ne0;
    e->n_mat = n_mat;
    e->sums = calloc((size_t)(ne0 * n_mat), sizeof(float));
    e->counts = calloc((size_t)n_mat, sizeof(int64_t));
    if (!e->name || !e->sums || !e->counts) {
        entry_free(e);
        return NULL;
    }
    im->n++;
    return e;
}

static int
add_dataset(struct imatrix *im, const char *s, size_t n)
{
    char **nd = realloc(im->datasets, (im->n_datasets + 1) * sizeof(*nd));
    if (!nd)
        return -ST_NOMEM;
    im->datasets = nd;
    nd[im->n_datasets] = strndup(s, n);
    if (!nd[im->n_datasets])
        return -ST_NOMEM;
    im->n_datasets++;
    return 0;
}

/* ---- reading ---- */

static bool
ends_with(const char *s, size_t n, const char *suf, size_t *stem)
{
    size_t k = strlen(suf);
    if (n <= k || memcmp(s + n - k, suf, k))
        return false;
    *stem = n - k;
    return true;
}

static int
read_gguf(struct imatrix *im, const void *p, size_t len, struct diag *d)
{
    struct src s;
    struct gguf g;
    const struct gguf_kv *kv;
    uint64_t v;
    int rc;

    src_open_mem(&s, p, len, "imatrix");
    rc = gguf_read(&g, &s, d);
    if (rc) {
        src_close(&s);
        return rc;
    }
    if (g.n_tensors < 1) {
        rc = diag_set(d, ST_FORMAT, "no data in imatrix file");
        goto out;
    }
    kv = gguf_get(&g, "imatrix.datasets");
    if (kv && kv->type == GGUF_TYPE_ARRAY && kv->arr_type == GGUF_TYPE_STRING)
        for (uint64_t i = 0; i < kv->n; i++)
            if ((rc = add_dataset(im, kv->v.strs[i].p, kv->v.strs[i].n)) < 0) {
                diag_set(d, ST_NOMEM, "out of memory");
                goto out;
            }
    im->has_metadata = gguf_find(&g, "imatrix.datasets") >= 0 &&
                       gguf_find(&g, "imatrix.chunk_count") >= 0 &&
                       gguf_find(&g, "imatrix.chunk_size") >= 0;
    if ((rc = gguf_get_uint(&g, "imatrix.chunk_count", &v, d)) < 0)
        goto out;
    im->chunk_count = rc == 0 && v <= UINT32_MAX ? (int64_t)v : 0;
    if ((rc = gguf_get_uint(&g, "imatrix.chunk_size", &v, d)) < 0)
        goto out;
    im->chunk_size = rc == 0 && v <= UINT32_MAX ? (int64_t)v : 0;
    rc = 0;

    /* pair every "<name>.in_sum2" with its "<name>.counts" */
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const struct gguf_tensor *ts = &g.t[i], *tc;
        char name[GGUF_MAX_NAME + 1], cname[GGUF_MAX_NAME + 16];
        size_t stem;
        int64_t nval, ncnt, ci;
        const float *sums, *cnt;
        struct imatrix_entry *e;
        bool bad;

        if (ends_with(ts->name.p, ts->name.n, ".counts", &stem)) {
            memcpy(name, ts->name.p, stem);
            name[stem] = 0;
            snprintf(cname, sizeof(cname), "%s.in_sum2", name);
            if (gguf_find_tensor(&g, cname) < 0) {
                rc = diag_set(d, ST_FORMAT, "mismatched sums and counts for '%s'", name);
                goto out;
            }
            continue;
        }
        if (!ends_with(ts->name.p, ts->name.n, ".in_sum2", &stem))
            continue;
        memcpy(name, ts->name.p, stem);
        name[stem] = 0;
        snprintf(cname, sizeof(cname), "%s.counts", name);
        ci = gguf_find_tensor(&g, cname);
        if (ci < 0) {
            rc = diag_set(d, ST_FORMAT, "mismatched sums and counts for '%s'", name);
            goto out;
        }
        tc = &g.t[ci];
        if (ts->type != GGML_TYPE_F32 || tc->type != GGML_TYPE_F32) {
            rc = diag_set(d, ST_FORMAT, "sums and counts for '%s' must be F32", name);
            goto out;
        }
        nval = gguf_tensor_nelements(ts);
        ncnt = gguf_tensor_nelements(tc);
        if (ncnt < 1 || nval < 1 || nval % ncnt) {
            rc = diag_set(d, ST_FORMAT, "'%s': %lld sums do not divide into %lld counts", name,
                          (long long)nval, (long long)ncnt);
            goto out;
        }
        if (imatrix_find(im, name)) {
            rc = diag_set(d, ST_FORMAT, "duplicate entry '%s'", name);
            goto out;
        }
        sums = gguf_tensor_bytes(&g, (uint64_t)(ts - g.t), NULL, d);
        cnt = gguf_tensor_bytes(&g, (uint64_t)ci, NULL, d);
        if (!sums || !cnt) {
            rc = -ST_FORMAT;
            goto out;
        }
        e = entry_get(im, name, nval / ncnt, ncnt, &bad);
        if (!e) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        memcpy(e->sums, sums, (size_t)nval * sizeof(float));
        for (int64_t j = 0; j < ncnt; j++) {
            float c;
            memcpy(&c, (const char *)cnt + (size_t)j * sizeof(float), sizeof(c));
            if (!isfinite(c) || c < 0.0f || c > 9.0e18f) {
                rc = diag_set(d, ST_FORMAT, "'%s': count %g is not a valid row count", name, (double)c);
                goto out;
            }
            e->counts[j] = (int64_t)lroundf(c);
        }
    }
    if (im->n == 0)
        rc = diag_set(d, ST_FORMAT, "no .in_sum2 tensors in imatrix file");
    else
        qsort(im->e, im->n, sizeof(*im->e), cmp_entry);
out:
    gguf_release(&g);
    src_close(&s);
    return rc;
}

struct rd {
    const uint8_t *p;
    size_t n, pos;
};

static bool
rd_i32(struct rd *r, int32_t *v)
{
    if (r->n - r->pos < 4)
        return false;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return true;
}

static int
read_legacy(struct imatrix *im, const void *p, size_t len, struct diag *d)
{
    struct rd r = { p, len, 0 };
    int32_t n_entries, nlen, ncall, nval;
    char name[GGUF_MAX_NAME * 4 + 1];

    if (!rd_i32(&r, &n_entries) || n_entries < 1)
        return diag_set(d, ST_FORMAT, "not an imatrix file (neither GGUF nor a legacy .dat with entries)");
    for (int32_t i = 0; i < n_entries; i++) {
        struct imatrix_entry *e;
        bool bad;

        if (!rd_i32(&r, &nlen) || nlen < 1 || (size_t)nlen > r.n - r.pos)
            return diag_set(d, ST_FORMAT, "entry %d: bad name length", i + 1);
        if ((size_t)nlen >= sizeof(name) || memchr(r.p + r.pos, 0, (size_t)nlen))
            return diag_set(d, ST_FORMAT, "entry %d: bad name", i + 1);
        memcpy(name, r.p + r.pos, (size_t)nlen);
        name[nlen] = 0;
        r.pos += (size_t)nlen;
        if (!rd_i32(&r, &ncall) || !rd_i32(&r, &nval) || nval < 1)
            return diag_set(d, ST_FORMAT, "entry '%s': bad number of values", name);
        if ((size_t)nval > (r.n - r.pos) / sizeof(float))
            return diag_set(d, ST_FORMAT, "entry '%s': %d values past end of file", name, nval);
        if (imatrix_find(im, name))
            return diag_set(d, ST_FORMAT, "duplicate entry '%s'", name);
        e = entry_get(im, name, nval, 1, &bad);
        if (!e)
            return diag_set(d, ST_NOMEM, "out of memory");
        memcpy(e->sums, r.p + r.pos, (size_t)nval * sizeof(float));
        r.pos += (size_t)nval * sizeof(float);
        e->counts[0] = ncall;
    }
    /* optional trailer: chunk count, then the dataset name */
    if (r.pos < r.n) {
        int32_t nc, dl;
        if (rd_i32(&r, &nc)) {
            im->chunk_count = nc;
            if (rd_i32(&r, &dl) && dl > 0 && (size_t)dl <= r.n - r.pos) {
                if (add_dataset(im, (const char *)r.p + r.pos, (size_t)dl) < 0)
                    return diag_set(d, ST_NOMEM, "out of memory");
                r.pos += (size_t)dl;
            }
        }
    }
    im->chunk_size = 0;
    im->legacy = true;
    qsort(im->e, im->n, sizeof(*im->e), cmp_entry);
    return 0;
}

int
imatrix_read_mem(struct imatrix *im, const void *p, size_t len, struct diag *d)
{
    int rc;

    imatrix_init(im);
    if (len >= 4 && !memcmp(p, "GGUF", 4))
        rc = read_gguf(im, p, len, d);
    else
        rc = read_legacy(im, p, len, d);
    if (rc)
        imatrix_release(im);
    return rc;
}

/* The first bytes of a stream, checked before the rest is read: a GGUF's
 * magic, version and counts (each metadata record takes at least 13 bytes,
 * each tensor record 28), or a legacy file's entry count (an entry takes at
 * least 17 bytes), against what an imatrix file may hold. */
#define IMATRIX_HEAD 24
#define IMATRIX_NAME_MAX (GGUF_MAX_NAME * 4)    /* a legacy entry's name, bytes */
#define IMATRIX_TAIL_MAX ((size_t)1 << 16)      /* a legacy file's chunk count and dataset name */
#define IMATRIX_META_MAX ((size_t)1 << 20)      /* a GGUF's header and metadata */
#define IMATRIX_TINFO_MAX 128                   /* a GGUF tensor record, bytes */
#define IMATRIX_ALIGN_MAX 256                   /* a GGUF tensor's padding, bytes */
#define IMATRIX_GGUF_PER 4                      /* a GGUF's tensors per entry, at most */
#define IMATRIX_KEY_MAX 65535                   /* a GGUF metadata key, bytes (gguf.c's limit) */

void
imatrix_limits_of(struct imatrix_limits *lim, const struct gguf *g)
{
    lim->n_entries = g->n_tensors;
    lim->n_values = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct gguf_tensor *t = &g->t[i];
        /* llama-imatrix's entry: a row's values for each matrix (ne0 x ne2 x ne3) */
        if (t->ne[0] * t->ne[2] * t->ne[3] > lim->n_values)
            lim->n_values = t->ne[0] * t->ne[2] * t->ne[3];
    }
}

int
imatrix_check_limits(const struct imatrix *im, const struct imatrix_limits *lim, struct diag *d)
{
    if (im->n > lim->n_entries)
        return diag_set(d, ST_FORMAT, "%zu entries, but the model has only %llu tensors", im->n,
                        (unsigned long long)lim->n_entries);
    for (size_t i = 0; i < im->n; i++)
        if (im->e[i].ne0 * im->e[i].n_mat > lim->n_values)
            return diag_set(d, ST_FORMAT, "entry '%s' has %lld values, more than any tensor's row "
                            "of the model (%lld)", im->e[i].name,
                            (long long)(im->e[i].ne0 * im->e[i].n_mat), (long long)lim->n_values);
    return 0;
}

/* check_head() : the first n bytes h of a stream, checked against lim (may be
 * NULL); *max gets the most bytes an imatrix that starts so can have. */
static int
check_head(const uint8_t *h, size_t n, const struct imatrix_limits *lim, size_t *max,
           struct diag *d)
{
    uint64_t n_tensors, n_kv;
    uint32_t version;
    int32_t n_entries;

    *max = IMATRIX_FILE_MAX;
    if (n >= 4 && !memcmp(h, "GGUF", 4)) {
        if (n < IMATRIX_HEAD)
            return diag_set(d, ST_FORMAT, "unexpected end of file after %zu bytes of the GGUF header", n);
        memcpy(&version, h + 4, 4);
        memcpy(&n_tensors, h + 8, 8);
        memcpy(&n_kv, h + 16, 8);
        if (version != 2 && version != 3)
            return diag_set(d, ST_FORMAT, "unsupported GGUF version %u", version);
        if (n_tensors < 1)
            return diag_set(d, ST_FORMAT, "no data in imatrix file");
        if (n_tensors > IMATRIX_FILE_MAX / 28 || n_kv > IMATRIX_FILE_MAX / 13)
            return diag_set(d, ST_FORMAT, "corrupt GGUF header: %llu tensors and %llu metadata "
                            "records cannot fit in an imatrix file (at most %zu bytes)",
                            (unsigned long long)n_tensors, (unsigned long long)n_kv,
                            IMATRIX_FILE_MAX);
        if (!lim)
            return 0;
        /* at most IMATRIX_GGUF_PER tensors an entry: llama-imatrix writes
         * NAME.in_sum2 and NAME.counts, newer ones NAME.in_sum too, and some
         * forks NAME.stats */
        if (n_tensors > IMATRIX_GGUF_PER * lim->n_entries)
            return diag_set(d, ST_FORMAT, "%llu tensors, but an imatrix of the model has at most %llu "
                            "(%d per tensor of the model)", (unsigned long long)n_tensors,
                            (unsigned long long)(IMATRIX_GGUF_PER * lim->n_entries),
                            IMATRIX_GGUF_PER);
        if (n_kv > IMATRIX_META_MAX / 13)
            return diag_set(d, ST_FORMAT, "%llu metadata records: more than an imatrix file holds",
                            (unsigned long long)n_kv);
        /* bounded by the checks above: no overflow */
        *max = IMATRIX_META_MAX + n_tensors * (IMATRIX_TINFO_MAX + IMATRIX_ALIGN_MAX +
                                              (uint64_t)lim->n_values * sizeof(float));
        if (*max > IMATRIX_FILE_MAX)
            *max = IMATRIX_FILE_MAX;
        return 0;
    }
    if (n >= 4)
        memcpy(&n_entries, h, 4);
    if (n < 4 || n_entries < 1)
        return diag_set(d, ST_FORMAT, "not an imatrix file (neither GGUF nor a legacy .dat with entries)");
    if ((uint64_t)n_entries > IMATRIX_FILE_MAX / 17)
        return diag_set(d, ST_FORMAT, "corrupt legacy header: %d entries cannot fit in an imatrix "
                        "file (at most %zu bytes)", n_entries, IMATRIX_FILE_MAX);
    if (!lim)
        return 0;
    if ((uint64_t)n_entries > lim->n_entries)
        return diag_set(d, ST_FORMAT, "%d entries, but the model has only %llu tensors", n_entries,
                        (unsigned long long)lim->n_entries);
    *max = 4 + IMATRIX_TAIL_MAX + (uint64_t)n_entries * (12 + IMATRIX_NAME_MAX +
                                                          (uint64_t)lim->n_values * sizeof(float));
    if (*max > IMATRIX_FILE_MAX)
        *max = IMATRIX_FILE_MAX;
    return 0;
}

/* Where a stream's scan stands: the next record's offset and number, of
 * n_records (a legacy file's entries; a GGUF's n_kv metadata records, then
 * its tensor records). */
struct stream_scan {
    bool gguf;
    size_t pos;
    uint64_t next, n_kv, n_records;
};

/* scan_legacy() : checks each legacy entry of p[0..n) whose name length and
 * value count have arrived (against lim), so that a stream that goes wrong
 * stops there, not at its end. */
static int
scan_legacy(struct stream_scan *sc, const uint8_t *p, size_t n, const struct imatrix_limits *lim,
            struct diag *d)
{
    int32_t nlen, nval;
    int e;

    while (sc->next < sc->n_records && n >= 4 && sc->pos <= n - 4) {
        e = (int)sc->next + 1;
        memcpy(&nlen, p + sc->pos, 4);
        if (nlen < 1)
            return diag_set(d, ST_FORMAT, "entry %d: bad name length", e);
        if (nlen > IMATRIX_NAME_MAX)    /* as the reader has it: too long a name */
            return diag_set(d, ST_FORMAT, "entry %d: bad name", e);
        if (n - sc->pos < 4 + (size_t)nlen + 8)
            break;
        memcpy(&nval, p + sc->pos + 4 + nlen + 4, 4);
        if (nval < 1)
            return diag_set(d, ST_FORMAT, "entry '%.*s': bad number of values", (int)nlen,
                            (const char *)p + sc->pos + 4);
        if (nval > lim->n_values)
            return diag_set(d, ST_FORMAT, "entry '%.*s' has %d values, more than any tensor's row "
                            "of the model (%lld)", (int)nlen, (const char *)p + sc->pos + 4, nval,
                            (long long)lim->n_values);
        sc->pos += 4 + (size_t)nlen + 8 + (size_t)nval * sizeof(float);
        sc->next++;
    }
    return 0;
}

/* take() : whether k more bytes of p[0..n) have arrived at *at; moves *at
 * past them (and copies them to v, when not NULL) if so. */
static bool
take(const uint8_t *p, size_t n, size_t *at, void *v, size_t k)
{
    if (n - *at < k)
        return false;
    if (v)
        memcpy(v, p + *at, k);
    *at += k;
    return true;
}

/* meta_room() : 0 when len bytes at offset at end within the
 * IMATRIX_META_MAX bytes of header and metadata a GGUF imatrix has, else
 * -ST_FORMAT naming metadata record i (by its key, once that has arrived). */
static int
meta_room(uint64_t i, const uint8_t *key, uint64_t klen, size_t at, uint64_t len, struct diag *d)
{
    if (at <= IMATRIX_META_MAX && len <= IMATRIX_META_MAX - at)
        return 0;
    if (!key)
        return diag_set(d, ST_FORMAT, "metadata record %llu: key of %llu bytes, more metadata than "
                        "an imatrix file has (%zu bytes)", (unsigned long long)i,
                        (unsigned long long)len, IMATRIX_META_MAX);
    return diag_set(d, ST_FORMAT, "key '%.*s': value of %llu bytes at offset %zu, more metadata than "
                    "an imatrix file has (%zu bytes)", (int)klen, (const char *)key,
                    (unsigned long long)len, at, IMATRIX_META_MAX);
}

/* scan_gguf_kv() : GGUF metadata record i at *at of p[0..n): 1 when it has
 * arrived whole and fits the metadata an imatrix file has (*at moved past
 * it), 0 when more must arrive, or -ST_FORMAT (the reader's words where it
 * would refuse the record too). */
static int
scan_gguf_kv(const uint8_t *p, size_t n, size_t *at, uint64_t i, struct diag *d)
{
    uint64_t klen, len, cnt;
    uint32_t type, et;
    const uint8_t *key;
    int rc;

    if (!take(p, n, at, &klen, 8))
        return 0;
    if (klen == 0)
        return diag_set(d, ST_FORMAT, "metadata key at offset %zu is empty or contains NUL", *at - 8);
    if (klen > IMATRIX_KEY_MAX)
        return diag_set(d, ST_FORMAT, "metadata record %llu: key at offset %zu: length %llu exceeds "
                        "limit %d", (unsigned long long)i, *at - 8, (unsigned long long)klen,
                        IMATRIX_KEY_MAX);
    if ((rc = meta_room(i, NULL, 0, *at, klen, d)) < 0)
        return rc;
    key = p + *at;
    if (!take(p, n, at, NULL, (size_t)klen) || !take(p, n, at, &type, 4))
        return 0;
    if (type >= GGUF_TYPE_COUNT)
        return diag_set(d, ST_FORMAT, "key '%.*s' has invalid type %u", (int)klen, (const char *)key,
                        type);
    if (type != GGUF_TYPE_STRING && type != GGUF_TYPE_ARRAY)
        return take(p, n, at, NULL, gguf_type_size((enum gguf_type)type));
    if (type == GGUF_TYPE_STRING) {
        if (!take(p, n, at, &len, 8))
            return 0;
        if ((rc = meta_room(i, key, klen, *at, len, d)) < 0)
            return rc;
        return take(p, n, at, NULL, (size_t)len);
    }
    if (!take(p, n, at, &et, 4) || !take(p, n, at, &cnt, 8))
        return 0;
    if (et >= GGUF_TYPE_COUNT || et == GGUF_TYPE_ARRAY)
        return diag_set(d, ST_FORMAT, "key '%.*s': invalid array element type %u", (int)klen,
                        (const char *)key, et);
    if (et != GGUF_TYPE_STRING) {
        /* cnt * size within the metadata: no overflow past the check */
        size_t es = gguf_type_size((enum gguf_type)et);
        if ((rc = meta_room(i, key, klen, *at, cnt > IMATRIX_META_MAX ? cnt : cnt * es, d)) < 0)
            return rc;
        return take(p, n, at, NULL, (size_t)cnt * es);
    }
    /* each string of the array takes at least its 8-byte length */
    if ((rc = meta_room(i, key, klen, *at, cnt > IMATRIX_META_MAX ? cnt : cnt * 8, d)) < 0)
        return rc;
    for (uint64_t k = 0; k < cnt; k++) {
        if (!take(p, n, at, &len, 8))
            return 0;
        if ((rc = meta_room(i, key, klen, *at, len, d)) < 0)
            return rc;
        if (!take(p, n, at, NULL, (size_t)len))
            return 0;
    }
    return 1;
}

/* scan_gguf_tensor() : GGUF tensor record i at *at of p[0..n), as
 * scan_gguf_kv(): its name as the reader takes it, at most GGUF_MAX_DIMS
 * dimensions, and no more values than the widest row of lim's model. */
static int
scan_gguf_tensor(const uint8_t *p, size_t n, size_t *at, uint64_t i,
                 const struct imatrix_limits *lim, struct diag *d)
{
    uint64_t len, ne;
    uint32_t nd;
    int64_t nel = 1;
    const uint8_t *name;

    if (!take(p, n, at, &len, 8))
        return 0;
    if (len > GGUF_MAX_NAME)
        return diag_set(d, ST_FORMAT, "tensor %llu: tensor name at offset %zu: length %llu exceeds "
                        "limit %d", (unsigned long long)i, *at - 8, (unsigned long long)len,
                        GGUF_MAX_NAME);
    if (len == 0)
        return diag_set(d, ST_FORMAT, "tensor %llu has an empty name", (unsigned long long)i);
    name = p + *at;
    if (!take(p, n, at, NULL, (size_t)len) || !take(p, n, at, &nd, 4))
        return 0;
    if (nd > GGUF_MAX_DIMS)
        return diag_set(d, ST_FORMAT, "tensor '%.*s' has %u dimensions (at most 4)", (int)len,
                        (const char *)name, nd);
    for (uint32_t j = 0; j < nd; j++) {
        if (!take(p, n, at, &ne, 8))
            return 0;
        if (ne == 0 || ne > INT64_MAX)
            return diag_set(d, ST_FORMAT, "tensor '%.*s': dimension %u is %lld", (int)len,
                            (const char *)name, j, (long long)ne);
        /* nel <= n_values before, so nel * ne cannot overflow past the check */
        if ((int64_t)ne > lim->n_values || (nel *= (int64_t)ne) > lim->n_values)
            return diag_set(d, ST_FORMAT, "tensor '%.*s' has more values than any tensor's row of "
                            "the model (%lld)", (int)len, (const char *)name,
                            (long long)lim->n_values);
    }
    return take(p, n, at, NULL, 4 + 8);        /* type, offset: the reader's */
}

/* scan_gguf() : checks each GGUF metadata and tensor record of p[0..n)
 * as it arrives (scan_gguf_kv, scan_gguf_tensor), so that a stream that
 * goes wrong stops at its first record that no imatrix of lim's model has,
 * not at the size bound. */
static int
scan_gguf(struct stream_scan *sc, const uint8_t *p, size_t n, const struct imatrix_limits *lim,
          struct diag *d)
{
    while (sc->next < sc->n_records) {
        size_t at = sc->pos;
        int rc = sc->next < sc->n_kv ? scan_gguf_kv(p, n, &at, sc->next, d)
                                     : scan_gguf_tensor(p, n, &at, sc->next - sc->n_kv, lim, d);
        if (rc <= 0)
            return rc;
        if (sc->next < sc->n_kv && at > IMATRIX_META_MAX)
            return diag_set(d, ST_FORMAT, "metadata record %llu ends at offset %zu, past the %zu "
                            "bytes of metadata an imatrix file has", (unsigned long long)sc->next,
                            at, IMATRIX_META_MAX);
        sc->pos = at;
        sc->next++;
    }
    return 0;
}

/* scan_stream() : scan_gguf() or scan_legacy(), with lim (else nothing). */
static int
scan_stream(struct stream_scan *sc, const uint8_t *p, size_t n, const struct imatrix_limits *lim,
            struct diag *d)
{
    if (!lim)
        return 0;
    return sc->gguf ? scan_gguf(sc, p, n, lim, d) : scan_legacy(sc, p, n, lim, d);
}

/* A stream read to its end into f->buf, its first bytes checked first,
 * then (with lim) each record as it arrives (scan_stream). */
static int
read_stream(struct imatrix_file *f, const struct imatrix_limits *lim, struct diag *d)
{
    FILE *fp = f->src.fp;
    size_t n, max, cap = (size_t)1 << 16;
    uint8_t *buf = malloc(cap);
    struct stream_scan sc = { 0 };
    int rc;

    if (!buf)
        return diag_set(d, ST_NOMEM, "out of memory");
    n = fread(buf, 1, IMATRIX_HEAD, fp);
    if (ferror(fp)) {
        rc = diag_set(d, ST_IO, "read error: %s", strerror(errno));
        goto fail;
    }
    if ((rc = check_head(buf, n, lim, &max, d)) < 0)
        goto fail;
    /* (check_head read and checked the counts) */
    if ((sc.gguf = !memcmp(buf, "GGUF", 4))) {
        sc.pos = IMATRIX_HEAD;
        memcpy(&sc.n_records, buf + 8, 8);
        memcpy(&sc.n_kv, buf + 16, 8);
        sc.n_records += sc.n_kv;
    } else {
        int32_t n_entries;
        memcpy(&n_entries, buf, 4);
        sc.pos = 4;
        sc.n_records = (uint64_t)n_entries;
    }
    for (;;) {
        size_t k;
        if ((rc = scan_stream(&sc, buf, n, lim, d)) < 0)
            goto fail;
        if (n == cap) {
            size_t nc = cap > max / 2 ? max + 1 : cap * 2;
            uint8_t *nb;
            if (nc <= cap) {
                rc = diag_set(d, ST_FORMAT, "larger than %zu bytes (not an imatrix file%s)", max,
                              lim ? " of the model" : "");
                goto fail;
            }
            if (!(nb = realloc(buf, nc))) {
                rc = diag_set(d, ST_NOMEM, "out of memory after %zu bytes", n);
                goto fail;
            }
            buf = nb;
            cap = nc;
        }
        k = fread(buf + n, 1, cap - n, fp);
        n += k;
        if (n > max) {
            rc = diag_set(d, ST_FORMAT, "larger than %zu bytes (not an imatrix file%s)", max,
                          lim ? " of the model" : "");
            goto fail;
        }
        if (n < cap)
            break;
    }
    if (ferror(fp)) {
        rc = diag_set(d, ST_IO, "read error: %s", strerror(errno));
        goto fail;
    }
    if ((rc = scan_stream(&sc, buf, n, lim, d)) < 0)
        goto fail;
    f->buf = buf;
    f->p = buf;
    f->n = n;
    return 0;
fail:
    free(buf);
    return rc;
}

int
imatrix_file_open(struct imatrix_file *f, const char *path, const struct imatrix_limits *lim,
                  struct diag *d)
{
    int rc;

    memset(f, 0, sizeof(*f));
    if ((rc = src_open(&f->src, path, d)) < 0) {
        src_close(&f->src);
        return rc;
    }
    if (f->src.map) {
        f->p = f->src.map;
        f->n = (size_t)f->src.size;
        return 0;
    }
    if ((rc = read_stream(f, lim, d)) < 0)
        imatrix_file_close(f);
    return rc;
}

void
imatrix_file_close(struct imatrix_file *f)
{
    src_close(&f->src);
    free(f->buf);
    memset(f, 0, sizeof(*f));
}

int
imatrix_read(struct imatrix *im, const char *path, struct diag *d)
{
    struct imatrix_file f;
    int rc;

    imatrix_init(im);
    if ((rc = imatrix_file_open(&f, path, NULL, d)) < 0)
        return rc;
    rc = imatrix_read_mem(im, f.p, f.n, d);
    imatrix_file_close(&f);
    return rc;
}

/* ---- using ---- */

int
imatrix_values(const struct imatrix *im, const struct imatrix_entry *e, float *out, struct diag *d)
{
    const int64_t ne0 = e->ne0;

    for (int64_t k = 0; k < e->n_mat; k++) {
        const float *s = e->sums + k * ne0;
        float *o = out + k * ne0;
        if (im->legacy) {
            int64_t ncall = e->counts[0];
            for (int64_t j = 0; j < ne0; j++)
                o[j] = ncall > 0 ? s[j] / (float)ncall : s[j];
        } else {
            float c = (float)e->counts[k];
            for (int64_t j = 0; j < ne0; j++)
                o[j] = c > 0.0f ? s[j] / c : 1.0f;
        }
        for (int64_t j = 0; j < ne0; j++)
            if (!isfinite(o[j]))
                return diag_set(d, ST_FORMAT, "imatrix entry '%s' contains a non-finite value",
                                e->name);
    }
    return 0;
}

void
imatrix_filter(struct imatrix *im, const char *const *inc, size_t n_inc, const char *const *exc,
               size_t n_exc)
{
    size_t w = 0;

    for (size_t i = 0; i < im->n; i++) {
        bool keep = n_inc == 0;
        for (size_t k = 0; k < n_inc && !keep; k++)
            keep = strstr(im->e[i].name, inc[k]) != NULL;
        for (size_t k = 0; k < n_exc && keep; k++)
            keep = strstr(im->e[i].name, exc[k]) == NULL;
        if (keep)
            im->e[w++] = im->e[i];
        else
            entry_free(&im->e[i]);
    }
    im->n = w;
}

/* ---- writing ---- */

static int
write_gguf(const struct imatrix *im, FILE *fp, float **cnt_bufs, struct diag *d)
{
    struct gguf g;
    const char **names = NULL;
    int rc = 0;

    gguf_init(&g);
    names = calloc(im->n_datasets ? im->n_datasets : 1, sizeof(*names));
    if (!names) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < im->n_datasets; i++)
        names[i] = im->datasets[i];
    if (gguf_set_str(&g, "general.type", "imatrix") ||
        gguf_set_arr_str(&g, "imatrix.datasets", names, NULL, im->n_datasets) ||
        gguf_set_u32(&g, "imatrix.chunk_count", (uint32_t)im->chunk_count) ||
        gguf_set_u32(&g, "imatrix.chunk_size", (uint32_t)im->chunk_size)) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < im->n; i++) {
        const struct imatrix_entry *e = &im->e[i];
        char tn[GGUF_MAX_NAME + 16];
        int64_t ne_s[4] = { e->ne0, e->n_mat, 1, 1 }, ne_c[4] = { 1, e->n_mat, 1, 1 };
        uint32_t nd = e->n_mat > 1 ? 2 : 1;

        if (strlen(e->name) + 8 > GGUF_MAX_NAME) {
            rc = diag_set(d, ST_RANGE, "entry name '%s' too long for a GGUF tensor", e->name);
            goto out;
        }
        cnt_bufs[i] = malloc((size_t)e->n_mat * sizeof(float));
        if (!cnt_bufs[i]) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        for (int64_t k = 0; k < e->n_mat; k++)
            cnt_bufs[i][k] = (float)e->counts[k];
        snprintf(tn, sizeof(tn), "%s.in_sum2", e->name);
        if ((rc = (int)gguf_add_tensor(&g, tn, GGML_TYPE_F32, nd, ne_s, e->sums, d)) < 0)
            goto out;
        snprintf(tn, sizeof(tn), "%s.counts", e->name);
        if ((rc = (int)gguf_add_tensor(&g, tn, GGML_TYPE_F32, nd, ne_c, cnt_bufs[i], d)) < 0)
            goto out;
        rc = 0;
    }
    if ((rc = gguf_write_header(&g, fp, d)) < 0)
        goto out;
    for (uint64_t i = 0; i < g.n_tensors; i++)
        if ((rc = gguf_write_tensor(&g, fp, i, g.t[i].data, d)) < 0)
            goto out;
out:
    free(names);
    gguf_release(&g);
    return rc;
}

static int
write_legacy(const struct imatrix *im, FILE *fp, struct diag *d)
{
    int64_t chunk = im->chunk_size > 0 ? im->chunk_size : 1;
    int32_t n_entries = 0, v;
    float *tmp = NULL;
    size_t cap = 0;
    const char *ds = im->n_datasets ? im->datasets[im->n_datasets - 1] : "";
    int rc;

    for (size_t i = 0; i < im->n; i++) {
        int64_t nz = 0;
        for (int64_t k = 0; k < im->e[i].n_mat; k++)
            nz += im->e[i].counts[k] != 0;
        n_entries += nz > 0;
    }
    if ((rc = write_all(fp, &n_entries, 4, d)) < 0)
        return rc;
    for (size_t i = 0; i < im->n; i++) {
        const struct imatrix_entry *e = &im->e[i];
        int64_t maxc = 0, nval = e->ne0 * e->n_mat;
        int32_t ncall;

        for (int64_t k = 0; k < e->n_mat; k++)
            if (e->counts[k] > maxc)
                maxc = e->counts[k];
        if (maxc == 0)
            continue;
        if ((size_t)nval > cap) {
            float *nt = realloc(tmp, (size_t)nval * sizeof(float));
            if (!nt) {
                free(tmp);
                return diag_set(d, ST_NOMEM, "out of memory");
            }
            tmp = nt;
            cap = (size_t)nval;
        }
        ncall = (int32_t)((maxc + chunk - 1) / chunk);
        for (int64_t j = 0; j < nval; j++) {
            float c = (float)e->counts[j / e->ne0], x = e->sums[j];
            if (c == 0.0f) {
                x = 1.0f;
                c = 1.0f;
            }
            tmp[j] = (x / c) * (float)ncall;
        }
        v = (int32_t)strlen(e->name);
        if ((rc = write_all(fp, &v, 4, d)) < 0 || (rc = write_all(fp, e->name, (size_t)v, d)) < 0 ||
            (rc = write_all(fp, &ncall, 4, d)) < 0)
            goto out;
        v = (int32_t)nval;
        if ((rc = write_all(fp, &v, 4, d)) < 0 ||
            (rc = write_all(fp, tmp, (size_t)nval * sizeof(float), d)) < 0)
            goto out;
    }
    v = (int32_t)im->chunk_count;
    if ((rc = write_all(fp, &v, 4, d)) < 0)
        goto out;
    v = (int32_t)strlen(ds);
    if ((rc = write_all(fp, &v, 4, d)) < 0 || (rc = write_all(fp, ds, (size_t)v, d)) < 0)
        goto out;
out:
    free(tmp);
    return rc;
}

int
imatrix_write_fp(const struct imatrix *im, FILE *fp, bool legacy, struct diag *d)
{
    struct imatrix sorted = *im;
    float **cnt = NULL;
    int rc;

    /* entries sorted by name, as llama-imatrix stores them */
    sorted.e = malloc((im->n ? im->n : 1) * sizeof(*sorted.e));
    cnt = calloc(im->n ? im->n : 1, sizeof(*cnt));
    if (!sorted.e || !cnt) {
        free(sorted.e);
        free(cnt);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    memcpy(sorted.e, im->e, im->n * sizeof(*sorted.e));
    qsort(sorted.e, sorted.n, sizeof(*sorted.e), cmp_entry);
    rc = legacy ? write_legacy(&sorted, fp, d) : write_gguf(&sorted, fp, cnt, d);
    for (size_t i = 0; i < im->n; i++)
        free(cnt[i]);
    free(cnt);
    free(sorted.e);
    return rc;
}

int
imatrix_write(const struct imatrix *im, const char *path, bool legacy, bool force, struct diag *d)
{
    struct xout xo = { 0 };
    int rc = xout_open(&xo, path, force, d);

    if (rc)
        return rc;
    rc = imatrix_write_fp(im, xo.fp, legacy, d);
    if (rc)
        xout_abort(&xo);
    else
        rc = xout_commit(&xo, d);
    return rc;
}

/* ---- collection ---- */

struct collect_ctx {
    struct imatrix *im;
    bool process_output;
    struct diag *d;
};

static int
collect_hook(void *ctx, const struct model_hook_event *ev)
{
    struct collect_ctx *c = ctx;
    struct imatrix_entry *e;
    bool bad;

    if (ev->site != MODEL_HOOK_LINEAR_IN || ev->n_tok < IMATRIX_MIN_ROWS)
        return 0;
    if (strncmp(ev->name, "blk.", 4) && !(c->process_output && !strcmp(ev->name, "output.weight")))
        return 0;
    e = entry_get(c->im, ev->name, ev->dim, 1, &bad);
    if (!e)
        return bad ? diag_set(c->d, ST_FORMAT, "imatrix entry '%s' has another size than its weight",
                              ev->name)
                   : diag_set(c->d, ST_NOMEM, "out of memory");
    /* row by row, each column summed in float, as llama-imatrix does */
    for (int64_t r = 0; r < ev->n_tok; r++) {
        const float *x = ev->x + r * ev->ld;
        for (int64_t j = 0; j < ev->dim; j++)
            e->sums[j] += x[j] * x[j];
    }
    for (int64_t j = 0; j < ev->dim; j++)
        if (!isfinite(e->sums[j]))
            return diag_set(c->d, ST_FORMAT, "non-finite activations at the input of '%s'", ev->name);
    e->counts[0] += ev->n_tok;
    return 0;
}

/* a text of fewer than two chunks is refused (as llama-imatrix); checked
 * before the KV pool for a chunk is allocated */
static int
collect_check(int64_t n_tokens, int64_t ctx, struct diag *d)
{
    if (ctx < 1)
        return diag_set(d, ST_RANGE, "calibration context must be positive");
    if (n_tokens < 2 * ctx)
        return diag_set(d, ST_RANGE, "calibration with a context of %lld needs at least %lld tokens; "
                        "the text has %lld", (long long)ctx, (long long)(2 * ctx), (long long)n_tokens);
    return 0;
}

int
imatrix_collect(struct imatrix *im, struct model *m, struct kvcache *kv, const int32_t *tokens,
                int64_t n_tokens, const struct imatrix_collect_opts *o, struct diag *d)
{
    const int64_t ctx = o->ctx;
    struct collect_ctx cc = { im, o->process_output, d };
    struct model_hooks hooks = { collect_hook, &cc, MODEL_HOOK_LINEAR_IN };
    struct batch_tok *bt = NULL;
    int64_t n_chunk;
    int32_t seq = -1;
    int rc = 0;

    if ((rc = collect_check(n_tokens, ctx, d)) < 0)
        return rc;
    n_chunk = n_tokens / ctx;
    if (o->max_chunks >= 0 && o->max_chunks < n_chunk)
        n_chunk = o->max_chunks;
    bt = calloc((size_t)ctx, sizeof(*bt));
    if (!bt)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (o->dataset && add_dataset(im, o->dataset, strlen(o->dataset)) < 0) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    im->chunk_size = ctx;
    runcb_progress(&o->cb, "calibrating", 0, n_chunk);
    for (int64_t c = 0; c < n_chunk; c++) {
        const int32_t *ct = tokens + c * ctx;
        struct batch b = { ctx, bt, NULL, 0 };

        if ((rc = kv_seq_new(kv, &seq)) < 0) {
            diag_set(d, -rc, "calibration: no KV sequence available");
            goto out;
        }
        for (int64_t i = 0; i < ctx; i++) {
            bt[i].seq = seq;
            bt[i].pos = (int32_t)i;
            bt[i].token = i == 0 && o->bos >= 0 ? o->bos : ct[i];
            bt[i].logits = 0;
        }
        /* in llama-imatrix's ubatches (its default n_ubatch, 512 tokens),
         * each call stating its ubatch size so that attention rounds as
         * llama.cpp's does (model.h, batch.llamacpp_ubatch) */
        for (int64_t p0 = 0; p0 < ctx; p0 += b.n) {
            b.n = ctx - p0 < IMATRIX_UBATCH ? ctx - p0 : IMATRIX_UBATCH;
            b.tok = bt + p0;
            b.llamacpp_ubatch = b.n;
            if ((rc = model_forward(m, kv, &b, &hooks, NULL, d)) < 0)
                goto out;
        }
        kv_seq_free(kv, seq);
        seq = -1;
        im->chunk_count++;
        runcb_progress(&o->cb, "calibrating", c + 1, n_chunk);
    }
    qsort(im->e, im->n, sizeof(*im->e), cmp_entry);
out:
    if (seq >= 0)
        kv_seq_free(kv, seq);
    free(bt);
    return rc;
}

int
imatrix_from_text(struct imatrix *im, const char *model_path, const char *text, size_t len,
                  const char *text_name, const struct imatrix_collect_opts *o, int n_threads,
                  const char *kernel, int64_t *n_tokens, struct diag *d)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct imatrix_collect_opts co = *o;
    struct model *m = NULL;
    struct kvcache *kv = NULL;
    struct kv_config c;
    struct tokenizer tok;
    struct tok_ids ids = { NULL, 0, 0 };
    bool tok_ok = false;
    size_t bb;
    int rc;

    mo.n_threads = n_threads;
    mo.kernel = kernel;
    if ((rc = model_open(&m, model_path, &mo, d)) < 0) {
        diag_prefix(d, "'%s'", model_path);
        return rc;
    }
    if ((rc = tok_load(&tok, &m->gguf, d)) < 0) {
        diag_prefix(d, "'%s'", model_path);
        goto out;
    }
    tok_ok = true;
    if ((rc = tok_encode(&tok, text, len, true, false, &ids, d)) < 0)
        goto out;
    if (n_tokens)
        *n_tokens = (int64_t)ids.n;
    /* the length first: a text too short is exit 2 whatever the pool costs */
    if ((rc = collect_check((int64_t)ids.n, co.ctx, d)) < 0) {
        diag_prefix(d, "'%s'", text_name);
        goto out;
    }
    model_kv_config(m, 0, GGML_TYPE_F16, &c);
    if (!(bb = kv_block_bytes(&c))) {
        rc = diag_set(d, ST_FORMAT, "model has invalid KV dimensions");
        goto out;
    }
    c.mem = (size_t)((co.ctx + c.block_size - 1) / c.block_size) * bb;
    if ((rc = kv_new(&kv, &c, d)) < 0)
        goto out;
    co.bos = tok.add_bos ? tok.bos : -1;
    if (!co.dataset)
        co.dataset = text_name;
    rc = imatrix_collect(im, m, kv, ids.v, (int64_t)ids.n, &co, d);
    if (rc == -ST_RANGE)
        diag_prefix(d, "'%s'", text_name);
out:
    tok_ids_release(&ids);
    if (tok_ok)
        tok_release(&tok);
    kv_free(kv);
    model_free(m);
    return rc;
}
