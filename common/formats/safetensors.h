/*
 * safetensors.h - the safetensors container (Hugging Face): a validating
 * reader over a mapped file, sharded checkpoints (model.safetensors.index.json)
 * and a streaming writer that lays files out like the reference writer.
 *
 * Byte layout (all little-endian):
 *   u64 N                 byte length of the JSON header
 *   N bytes               JSON object, UTF-8, starting with '{', may be padded
 *                         with spaces: {"__metadata__": {str: str, ...},
 *                         "<name>": {"dtype": "F32", "shape": [d0, d1, ...],
 *                         "data_offsets": [begin, end]}, ...}
 *   rest                  the byte buffer: tensor data, row-major, no strides;
 *                         data_offsets are relative to its start (file offset
 *                         8 + N), end exclusive.
 * shape is outermost first (PyTorch order; the reverse of GGUF ne[]); [] is a
 * scalar, a 0 dimension an empty tensor.
 *
 * The reader checks what the reference reader (safetensors tensor.rs) checks:
 * N <= 100000000 and within the file; the header starts with '{' and is valid
 * UTF-8 JSON without duplicate keys; every dtype is known; sorted by
 * data_offsets the tensors begin at 0 and follow each other with no hole or
 * overlap; end - begin == numel * bits / 8 (overflow-checked, numel * bits a
 * multiple of 8); the last end is exactly the end of the file; __metadata__
 * maps strings to strings.  Unknown keys inside a tensor entry are ignored (as
 * serde does).  In addition we refuse more than SFT_MAX_DIMS dimensions.
 *
 * Function prefix sft_ (st_ is taken by the status codes of status.h).
 */
#ifndef LLMKIT_SAFETENSORS_H
#define LLMKIT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "xio.h"

#define SFT_MAX_HEADER 100000000ull   /* bytes of JSON (MAX_HEADER_SIZE) */
#define SFT_MAX_DIMS 8
#define SFT_MAX_INDEX ((size_t)64 << 20)  /* bytes of model.safetensors.index.json */
#define SFT_DEFAULT_SHARD 5000000000ull   /* huggingface_hub MAX_SHARD_SIZE */
#define SFT_SINGLE_NAME "model.safetensors"
#define SFT_INDEX_NAME "model.safetensors.index.json"

/* In the order of the reference `enum Dtype`; the writer lays tensors out by
 * descending value.  Bits per element: sft_dtype_bits(). */
enum sft_dtype {
    SFT_BOOL = 0,
    SFT_F4,
    SFT_F6_E2M3,
    SFT_F6_E3M2,
    SFT_U8,
    SFT_I8,
    SFT_F8_E5M2,
    SFT_F8_E4M3,
    SFT_F8_E8M0,
    SFT_F8_E4M3FNUZ,
    SFT_F8_E5M2FNUZ,
    SFT_I16,
    SFT_U16,
    SFT_F16,
    SFT_BF16,
    SFT_I32,
    SFT_U32,
    SFT_F32,
    SFT_C64,
    SFT_F64,
    SFT_I64,
    SFT_U64,
    SFT_DTYPE_COUNT
};

/* sft_dtype_name() : "F32", "BF16", ... ; NULL for an invalid value. */
const char *sft_dtype_name(enum sft_dtype t);

/* sft_dtype_bits() : bits per element (4 for F4, 6 for F6_*, 8..64); 0 when invalid. */
unsigned sft_dtype_bits(enum sft_dtype t);

/* sft_dtype_by_name() : the dtype spelled `name` (exact, case-sensitive), or -1. */
int sft_dtype_by_name(const char *name);

/* sft_tensor_nbytes() : byte size of a tensor of `dtype` and `shape` (n_dims
 * entries, outermost first) into *out.  Checks dims >= 0 and that numel and
 * numel * bits do not overflow (the product is taken left to right as the
 * reference does) and that numel * bits is a multiple of 8.  Returns 0 or
 * -ST_FORMAT with the reason in d (no tensor name; callers prefix it). */
int sft_tensor_nbytes(enum sft_dtype dtype, int n_dims, const int64_t *shape, uint64_t *out,
                      struct diag *d);

/* ---- reading one file ---- */

struct sft_tensor {
    char *name;                     /* NUL-terminated UTF-8, owned by the file */
    enum sft_dtype dtype;
    int n_dims;                     /* 0 (scalar) .. SFT_MAX_DIMS */
    int64_t shape[SFT_MAX_DIMS];    /* outermost first; unused entries 0 */
    uint64_t numel;                 /* product of shape (1 for a scalar) */
    uint64_t begin, end;            /* data_offsets, relative to the byte buffer */
    uint64_t nbytes;                /* end - begin */
    const uint8_t *data;            /* into the mapping (not necessarily aligned:
                                     * only 8 + N decides; memcpy before typed use) */
};

struct sft_meta {
    char *key;                      /* NUL-terminated */
    char *value;                    /* NUL-terminated; may contain NULs, see len */
    size_t value_len;
};

struct sft_file {
    struct src *src;                /* borrowed, or owned when own_src */
    bool own_src;
    uint64_t header_len;            /* N */
    uint64_t data_offset;           /* 8 + N: file offset of the byte buffer */
    uint64_t data_size;             /* bytes of the byte buffer */
    size_t n_tensors;
    struct sft_tensor *t;           /* in data_offsets order (= file order) */
    bool has_meta;                  /* a __metadata__ object was present */
    size_t n_meta;
    struct sft_meta *meta;          /* __metadata__ pairs in header order */
    size_t *by_name;                /* tensor indices sorted by name (sft_find) */
};

/* sft_read() : parses and validates the safetensors file in s.  The source
 * must be mapped (a regular file or src_open_mem); a pipe is refused with
 * -ST_RANGE "safetensors input must be a regular file, not a pipe".  f
 * borrows s (which must outlive f); tensor data points into the mapping.
 * Returns 0, -ST_FORMAT (message in d, naming the tensor where there is one),
 * -ST_NOMEM.  On failure f is released. */
int sft_read(struct sft_file *f, struct src *s, struct diag *d);

/* sft_open() : src_open_file(path) + sft_read(); f owns the source.  A
 * FIFO, device or socket is refused at once (-ST_IO "is a FIFO, not a
 * regular file"), never waited on. */
int sft_open(struct sft_file *f, const char *path, struct diag *d);

/* sft_close() : frees what f owns (and its source when owned).  Accepts a
 * zeroed or already closed struct. */
void sft_close(struct sft_file *f);

/* sft_find() : the tensor called name, or NULL. */
const struct sft_tensor *sft_find(const struct sft_file *f, const char *name);

/* sft_meta_get() : the __metadata__ value of key, or NULL. */
const char *sft_meta_get(const struct sft_file *f, const char *key);

/* ---- the index of a sharded checkpoint ---- */

struct sft_index_entry {
    char *name;                     /* tensor name */
    size_t shard;                   /* index into sft_index.shards */
};

struct sft_index {
    size_t n;                       /* weight_map entries */
    struct sft_index_entry *e;      /* sorted by name (byte-wise) */
    size_t n_shards;
    char **shards;                  /* distinct shard file names, sorted (byte-wise) */
    bool has_total_size;
    uint64_t total_size;            /* metadata.total_size when an integer >= 0 */
};

/* sft_index_parse() : parses model.safetensors.index.json text (len bytes).
 * Requires an object with a "weight_map" object of string values (at least
 * one); "metadata" is optional and any extra keys are tolerated.  Shard names
 * must be relative paths without "." or ".." components and without NULs.
 * Returns 0, -ST_FORMAT, -ST_NOMEM; on failure ix is released. */
int sft_index_parse(struct sft_index *ix, const char *json, size_t len, struct diag *d);

/* sft_index_release() : frees ix; accepts a zeroed struct. */
void sft_index_release(struct sft_index *ix);

/* ---- a whole checkpoint: one file or shards ---- */

struct sft_model_tensor {
    const struct sft_tensor *t;     /* into files[file] */
    size_t file;
};

struct sft_model {
    char *dir;                      /* directory holding the file(s); NULL for "-" */
    bool sharded;                   /* opened through an index */
    size_t n_files;
    struct sft_file *files;
    char **file_names;              /* relative to dir */
    size_t n_tensors;
    struct sft_model_tensor *tensors; /* sorted by name */
    bool has_total_size;            /* from the index metadata (not checked) */
    uint64_t total_size;
};

/* sft_model_open() : opens a checkpoint.  path is a directory holding
 * model.safetensors.index.json (preferred when both exist) or
 * model.safetensors; or a path to an index file ("*.index.json"); or a path to
 * one .safetensors file.  With an index, weight_map is authoritative: every
 * shard it names is opened once, every tensor it names must be in its shard,
 * and no tensor name may be in two shards; tensors of a shard missing from the
 * weight_map are ignored.  Returns 0, -ST_IO (missing files), -ST_FORMAT,
 * -ST_NOMEM; messages name the shard.  On failure m is released. */
int sft_model_open(struct sft_model *m, const char *path, struct diag *d);

/* sft_model_find() : the tensor called name (and its file index in *file when
 * file is not NULL), or NULL. */
const struct sft_tensor *sft_model_find(const struct sft_model *m, const char *name,
                                        size_t *file);

/* sft_model_close() : closes every shard; accepts a zeroed struct. */
void sft_model_close(struct sft_model *m);

/* ---- writing ---- */

/* A tensor to write, described by the caller. */
struct sft_wtensor {
    const char *name;               /* valid UTF-8, unique, not "__metadata__";
                                     * borrowed until sft_plan_release */
    enum sft_dtype dtype;
    int n_dims;                     /* 0 .. SFT_MAX_DIMS */
    int64_t shape[SFT_MAX_DIMS];    /* outermost first */
};

/* A __metadata__ pair for the writer (both valid UTF-8, NUL-terminated). */
struct sft_kv {
    const char *key;
    const char *value;
};

struct sft_shard {
    char name[64];                  /* "model.safetensors" or "model-00001-of-00003.safetensors" */
    size_t first, count;            /* its tensors: order[first .. first+count) */
    uint64_t data_size;             /* sum of their bytes */
};

/*
 * A layout: which shard each tensor goes to, and the order in which the
 * writer wants the tensors' bytes.  Tensors are split into shards greedily in
 * the caller's order, as huggingface_hub does: a tensor that would take the
 * current shard over max_shard_bytes starts a new one, and a tensor larger
 * than the limit gets a shard of its own, placed before the shard being
 * filled.  Inside a shard tensors are laid out by descending dtype, then by
 * name (byte-wise), with contiguous offsets from 0, as the reference writer does.
 */
struct sft_plan {
    size_t n;                       /* tensors */
    const struct sft_wtensor *t;    /* borrowed from the caller */
    uint64_t *nbytes;               /* [n] byte size of tensor i */
    uint64_t *offset;               /* [n] data_offsets begin of tensor i in its shard */
    size_t *shard_of;               /* [n] shard of tensor i */
    size_t *order;                  /* [n] write order: tensor indices, shard after
                                     * shard, layout order inside each */
    size_t n_shards;
    struct sft_shard *shards;
    uint64_t total_size;            /* sum of nbytes */
    size_t n_meta;
    struct sft_kv *meta;            /* copies of the metadata pairs */
    bool write_meta;                /* emit a __metadata__ object */
};

/* sft_plan_init() : validates the n tensors t (names, dtypes, shapes, sizes)
 * and computes the layout.  max_shard_bytes = 0 means no limit (one file).
 * meta: NULL writes {"format":"pt"} (what transformers writes); a non-NULL
 * array of n_meta pairs writes those in the given order (n_meta = 0: no
 * __metadata__ at all).  p borrows t (and the names) until sft_plan_release;
 * it copies the metadata.  Returns 0, -ST_RANGE (bad tensor description:
 * message names the tensor), -ST_NOMEM. */
int sft_plan_init(struct sft_plan *p, const struct sft_wtensor *t, size_t n,
                  uint64_t max_shard_bytes, const struct sft_kv *meta, size_t n_meta,
                  struct diag *d);

/* sft_plan_release() : frees what p owns; accepts a zeroed struct. */
void sft_plan_release(struct sft_plan *p);

/* sft_plan_header() : the JSON header of shard s as the reference writes it
 * (compact, __metadata__ first, then the tensors in layout order with keys
 * dtype, shape, data_offsets; padded with spaces to a multiple of 8).
 * *out is malloc'd (caller frees), *len excludes the NUL we add. */
int sft_plan_header(const struct sft_plan *p, size_t s, char **out, size_t *len,
                    struct diag *d);

/* sft_plan_index_json() : model.safetensors.index.json text for a sharded
 * plan: {"metadata": {"total_size": N}, "weight_map": {name: shard, ...}} with
 * 2-space indentation, sorted keys, non-ASCII escaped as \uXXXX and a
 * trailing newline (Python json.dumps(indent=2, sort_keys=True) + "\n").
 * *out is malloc'd (caller frees). */
int sft_plan_index_json(const struct sft_plan *p, char **out, size_t *len, struct diag *d);

/*
 * The streaming writer.  Typical use (convert, GGUF -> HF directory):
 *
 *   sft_plan_init(&p, specs, n, max_shard, NULL, 0, &d);
 *   sft_writer_open_dir(&w, &p, tmpdir, false, &d);
 *   for (k = 0; k < p.n; k++) {
 *       size_t i = p.order[k];
 *       ... produce the p.nbytes[i] bytes of specs[i] into buf ...
 *       sft_writer_put(&w, i, buf, p.nbytes[i], &d);
 *   }
 *   sft_writer_close(&w, &d);   // last shard committed, index written if sharded
 *   sft_plan_release(&p);
 *
 * Memory stays bounded: only the header of the current shard is held.  Each
 * shard file is written atomically (xout: temp + fsync + rename) when its last
 * tensor is complete.
 */
struct sft_writer {
    const struct sft_plan *p;       /* borrowed */
    char *dir;                      /* output directory, or NULL for one file */
    char *path;                     /* single-file output path ("-" = stdout) */
    bool force;
    size_t next;                    /* position in p->order of the tensor being written */
    uint64_t done;                  /* bytes of that tensor written so far */
    size_t shard;                   /* shard being written */
    bool shard_open;
    size_t shards_done;
    struct xout out;
};

/* sft_writer_open_dir() : writes the plan's shard files (and, when there is
 * more than one, model.safetensors.index.json) into the existing directory
 * dir, typically the temporary of xout_open_dir().  force lets it replace
 * files already there.  Returns 0, -ST_IO, -ST_NOMEM. */
int sft_writer_open_dir(struct sft_writer *w, const struct sft_plan *p, const char *dir,
                        bool force, struct diag *d);

/* sft_writer_open_file() : writes a one-shard plan to path ("-" = stdout,
 * streamed; else atomic).  -ST_RANGE when the plan has several shards. */
int sft_writer_open_file(struct sft_writer *w, const struct sft_plan *p, const char *path,
                         bool force, struct diag *d);

/* sft_writer_put() : appends n bytes of tensor i.  Tensors must come in
 * p->order; a tensor may be given in one call or in several chunks (the same
 * i each time) that add up to p->nbytes[i]; an empty tensor still needs one
 * call (data may be NULL when n == 0).  The shard file is opened with its
 * header before its first tensor and committed after its last.  Returns 0,
 * -ST_RANGE (wrong tensor or too many bytes: message says which was
 * expected), -ST_IO.  After an error call sft_writer_abort(). */
int sft_writer_put(struct sft_writer *w, size_t i, const void *data, uint64_t n,
                   struct diag *d);

/* A tensor_sink_fn (gguf_write.h) over sft_writer_put: tensor_emit() with
 * struct sft_sink {w, i} as ctx streams tensor i's bytes into the writer. */
struct sft_sink {
    struct sft_writer *w;
    size_t i;
};
int sft_sink_put(void *ctx, const void *p, size_t n, struct diag *d);

/* sft_writer_next() : the tensor index the writer expects next, or (size_t)-1
 * when all have been written. */
size_t sft_writer_next(const struct sft_writer *w);

/* sft_writer_close() : checks that every tensor was written, commits the
 * remaining shard files (shards with no tensors are still written) and the
 * index, and releases w.  On error everything partial is removed (files
 * already committed stay; the caller's temporary directory is expected to be
 * discarded).  Returns 0, -ST_RANGE (tensors missing), -ST_IO. */
int sft_writer_close(struct sft_writer *w, struct diag *d);

/* sft_writer_abort() : removes the partial shard being written and releases
 * w; safe on a released writer. */
void sft_writer_abort(struct sft_writer *w);

#endif
