/*
 * gguf.h - GGUF v2/v3 container: a validating reader and a streaming writer.
 *
 * Byte layout (all little-endian, packed):
 *   u32 magic "GGUF" | u32 version (2 or 3) | i64 n_tensors | i64 n_kv
 *   n_kv x { string key | i32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | i64 ne[n_dims] | i32 ggml_type | u64 offset }
 *   zero padding to general.alignment (default 32; when n_tensors > 0)
 *   tensor data: tensor i at data_offset + offset_i, each padded to the alignment
 * string = u64 length + bytes (no NUL); array = i32 elem type + u64 count + elements.
 *
 * The reader checks every count, length, dimension, type id and offset
 * against the bytes present with overflow-safe arithmetic (see gguf.c for the
 * list), keeps unknown metadata and the original key order, and never reads
 * tensor data into memory when the source is mapped.  On a pipe the header is
 * read sequentially and tensor data is then streamed in file order.
 *
 * The writer streams: gguf_write_header() then gguf_write_tensor() for each
 * tensor in order.  It reproduces files written by llama.cpp and gguf-py byte
 * for byte (KV order, n_dims as stored, padding after every tensor).
 */
#ifndef LLMKIT_GGUF_H
#define LLMKIT_GGUF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"
#include "xio.h"

#define GGUF_MAGIC 0x46554747u          /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 63                /* bytes; llama.cpp rejects 64 */
#define GGUF_MAX_STRING ((uint64_t)1 << 30)
#define GGUF_MAX_ARRAY ((uint64_t)1 << 30)

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT = 13,
};

/* A string as stored: n bytes, plus a NUL added by us (p[n] == 0).  The bytes
 * may contain NULs; use n. */
struct gguf_str {
    char *p;
    uint64_t n;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;
    enum gguf_type arr_type;  /* element type when type == ARRAY */
    uint64_t n;               /* element count of an array, else 1 */
    union {
        uint8_t raw[8];       /* scalars: the value's bytes, little-endian */
        struct gguf_str str;  /* STRING */
        void *arr;            /* numeric/bool ARRAY: n * size bytes, LE */
        struct gguf_str *strs;/* ARRAY of STRING: n strings */
    } v;
};

struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;          /* as stored (1..4) */
    int64_t ne[GGUF_MAX_DIMS];/* unused dims are 1 */
    uint32_t type;            /* enum ggml_type */
    uint64_t offset;          /* relative to the data section */
    uint64_t nbytes;
    const void *data;         /* reader on a mapped source: the bytes; writer: optional */
};

struct gguf {
    uint32_t version;
    uint32_t alignment;
    struct gguf_kv *kv;
    uint64_t n_kv, cap_kv;
    struct gguf_tensor *t;
    uint64_t n_tensors, cap_t;
    uint64_t data_offset;     /* absolute offset of the data section (reader) */
    uint64_t data_size;       /* sum of padded tensor sizes */
    /* reader state */
    struct src *src;          /* borrowed, or owned when own_src */
    bool own_src;
    uint64_t next_stream;     /* next tensor index a pipe can deliver */
};

/* gguf_type_size() : bytes of one scalar value of type t (0 for STRING/ARRAY/invalid). */
size_t gguf_type_size(enum gguf_type t);
const char *gguf_type_name(enum gguf_type t);

/* ---- reading ---- */

/* gguf_read() : parses and validates the header from s (positioned at 0).
 * On success the source is positioned at the start of the data section and,
 * when it is mapped, each tensor's data points into it.  g borrows s.
 * Returns 0, -ST_FORMAT (bad data, message in d), -ST_IO, -ST_NOMEM. */
int gguf_read(struct gguf *g, struct src *s, struct diag *d);

/* gguf_load_stream() : after gguf_read from a pipe, reads the whole data
 * section into memory (src_load: memory follows what the pipe delivers) so that
 * every tensor's data points into it, as on a mapped file.  A no-op on a
 * mapped source. */
int gguf_load_stream(struct gguf *g, struct diag *d);

/* gguf_open() : src_open(path) + gguf_read(); g owns the source. */
int gguf_open(struct gguf *g, const char *path, struct diag *d);

/* gguf_open_file() : gguf_open() for a model that is mapped, never streamed:
 * src_open_file(path), so that a FIFO, device or socket is refused with
 * -ST_IO ("is a FIFO, not a regular file") at once, never waited on. */
int gguf_open_file(struct gguf *g, const char *path, struct diag *d);

/* gguf_tensor_bytes() : the data of tensor i.  On a mapped source returns a
 * pointer into the mapping (buf unused).  On a stream, tensors must be asked
 * for in file order; the bytes are read into buf (nbytes) and buf is returned.
 * NULL on error (message in d). */
const void *gguf_tensor_bytes(struct gguf *g, uint64_t i, void *buf, struct diag *d);

/* gguf_release() : frees everything g owns (and the source when owned). */
void gguf_release(struct gguf *g);

/* ---- lookup ---- */

/* gguf_find() : index of key, or -1. */
int64_t gguf_find(const struct gguf *g, const char *key);
const struct gguf_kv *gguf_get(const struct gguf *g, const char *key);
/* gguf_find_tensor() : index of a tensor by name, or -1. */
int64_t gguf_find_tensor(const struct gguf *g, const char *name);

/* Typed getters: 0 on success, 1 when the key is absent, -ST_FORMAT when it has
 * another type (message in d).  _uint accepts any unsigned/signed integer type
 * whose value fits; _float accepts FLOAT32/FLOAT64. */
int gguf_get_uint(const struct gguf *g, const char *key, uint64_t *out, struct diag *d);
int gguf_get_float(const struct gguf *g, const char *key, double *out, struct diag *d);
int gguf_get_bool(const struct gguf *g, const char *key, bool *out, struct diag *d);
int gguf_get_str(const struct gguf *g, const char *key, const char **out, struct diag *d);

/* gguf_kv_uint() / gguf_kv_float() : a scalar's numeric value (false if not numeric). */
bool gguf_kv_uint(const struct gguf_kv *kv, uint64_t *out);
bool gguf_kv_int(const struct gguf_kv *kv, int64_t *out);
bool gguf_kv_float(const struct gguf_kv *kv, double *out);
/* gguf_arr_uint() / gguf_arr_float() : element i of a numeric array. */
bool gguf_arr_int(const struct gguf_kv *kv, uint64_t i, int64_t *out);
bool gguf_arr_float(const struct gguf_kv *kv, uint64_t i, double *out);

/* ---- building (writers) ---- */

/* gguf_init() : an empty container (version 3, default alignment). */
void gguf_init(struct gguf *g);

/* Setters copy their arguments.  Setting an existing key replaces its value in
 * place (key order kept).  0 or -ST_NOMEM. */
int gguf_set_u32(struct gguf *g, const char *key, uint32_t v);
int gguf_set_i32(struct gguf *g, const char *key, int32_t v);
int gguf_set_u64(struct gguf *g, const char *key, uint64_t v);
int gguf_set_f32(struct gguf *g, const char *key, float v);
int gguf_set_bool(struct gguf *g, const char *key, bool v);
int gguf_set_str(struct gguf *g, const char *key, const char *v);
int gguf_set_strn(struct gguf *g, const char *key, const char *v, uint64_t n);
/* gguf_set_arr() : numeric/bool array of n elements of type t, LE bytes. */
int gguf_set_arr(struct gguf *g, const char *key, enum gguf_type t, const void *data, uint64_t n);
/* gguf_set_arr_str() : array of n strings (lens may be NULL for NUL-terminated). */
int gguf_set_arr_str(struct gguf *g, const char *key, const char *const *strs,
                     const uint64_t *lens, uint64_t n);
/* gguf_set_kv_copy() : copies a whole record (any type) from another container. */
int gguf_set_kv_copy(struct gguf *g, const struct gguf_kv *kv);
/* gguf_remove() : removes a key if present. */
void gguf_remove(struct gguf *g, const char *key);

/* gguf_add_tensor() : appends a tensor info; offsets are assigned by
 * gguf_layout().  n_dims as given (1..4); data may be NULL (streamed later).
 * Returns the index, or -ST_RANGE (bad type/shape, duplicate or long name),
 * -ST_NOMEM. */
int64_t gguf_add_tensor(struct gguf *g, const char *name, uint32_t type, uint32_t n_dims,
                        const int64_t *ne, const void *data, struct diag *d);

/* gguf_layout() : assigns offsets (running padded sum) and data_size; reads
 * general.alignment if set.  0 or -ST_RANGE. */
int gguf_layout(struct gguf *g, struct diag *d);

/* gguf_header_size() : bytes gguf_write_header() will write (incl. padding). */
uint64_t gguf_header_size(const struct gguf *g);

/* gguf_write_header() : writes header, KVs, tensor infos and padding
 * (calls gguf_layout first). */
int gguf_write_header(struct gguf *g, FILE *fp, struct diag *d);

/* gguf_write_tensor() : writes the nbytes of tensor i and its padding.  The
 * caller writes tensors in index order. */
int gguf_write_tensor(const struct gguf *g, FILE *fp, uint64_t i, const void *data, struct diag *d);

/* gguf_write_padding() : writes the zero bytes that follow a tensor of
 * nbytes (for callers that write a tensor's data in pieces). */
int gguf_write_padding(const struct gguf *g, FILE *fp, uint64_t nbytes, struct diag *d);

/* gguf_n_elements() : product of ne (0 if any is 0). */
int64_t gguf_tensor_nelements(const struct gguf_tensor *t);

#endif
