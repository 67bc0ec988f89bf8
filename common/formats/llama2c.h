/*
 * llama2c.h - karpathy/llama2.c checkpoints: the legacy "v0" model .bin and
 * tokenizer.bin, read (validated, zero-copy over the mapping) and written.
 *
 * Model .bin (native little-endian, packed, no padding):
 *   7 x i32   dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
 *             vocab_size > 0: the classifier is the token embedding (shared);
 *             vocab_size < 0: a separate wcls follows at the end; |vocab_size|
 *             is the vocabulary size
 *   f32 arrays, in this order (hs = dim / n_heads, kv_dim = n_kv_heads * hs):
 *     token_embedding [vocab][dim]
 *     rms_att  [n_layers][dim]
 *     wq       [n_layers][dim][dim]          (n_heads * hs == dim rows)
 *     wk       [n_layers][kv_dim][dim]
 *     wv       [n_layers][kv_dim][dim]
 *     wo       [n_layers][dim][dim]
 *     rms_ffn  [n_layers][dim]
 *     w1       [n_layers][hidden_dim][dim]   (gate)
 *     w2       [n_layers][dim][hidden_dim]   (down)
 *     w3       [n_layers][hidden_dim][dim]   (up)
 *     rms_final [dim]
 *     freq_cis_real [seq_len][hs/2]
 *     freq_cis_imag [seq_len][hs/2]
 *     wcls     [vocab][dim]                  (only when vocab_size < 0)
 * Matrices are PyTorch [out][in], row-major (W.x reads w[o*in + i]); Q/K are
 * in Meta's interleaved RoPE order (no permutation needed for GGUF).
 *
 * The reader checks: all seven values positive (vocab_size non-zero), dim a
 * multiple of n_heads, n_heads a multiple of n_kv_heads, head size even, the
 * element counts free of overflow, and the file size exactly equal to the
 * size the header implies.
 *
 * tokenizer.bin:
 *   u32 max_token_length
 *   vocab_size x { f32 score | i32 len (0..max_token_length) | len bytes }
 * The record count is not stored: it is the model's vocab_size.
 */
#ifndef LLMKIT_LLAMA2C_H
#define LLMKIT_LLAMA2C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "xio.h"

#define LLAMA2C_HEADER_BYTES 28
#define LLAMA2C_MAX_TOKEN_LEN (1u << 20)   /* longest token text we accept */

struct llama2c_config {
    int32_t dim;
    int32_t hidden_dim;
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t vocab_size;        /* always positive here */
    int32_t seq_len;
    bool shared_classifier;    /* file's vocab_size > 0: wcls == token embedding */
};

/* One layer's weights (each [rows][cols] row-major float32). */
struct llama2c_layer {
    const float *rms_att;      /* [dim] */
    const float *wq;           /* [dim][dim] */
    const float *wk;           /* [kv_dim][dim] */
    const float *wv;           /* [kv_dim][dim] */
    const float *wo;           /* [dim][dim] */
    const float *rms_ffn;      /* [dim] */
    const float *w1;           /* [hidden_dim][dim] */
    const float *w2;           /* [dim][hidden_dim] */
    const float *w3;           /* [hidden_dim][dim] */
};

struct llama2c_model {
    struct llama2c_config c;
    int32_t head_size;         /* dim / n_heads */
    int32_t kv_dim;            /* n_kv_heads * head_size */
    const float *token_embedding;  /* [vocab][dim] */
    struct llama2c_layer *layers;  /* [n_layers] */
    const float *rms_final;        /* [dim] */
    const float *freq_cis_real;    /* [seq_len][head_size/2] */
    const float *freq_cis_imag;    /* [seq_len][head_size/2] */
    const float *wcls;             /* [vocab][dim]; == token_embedding when shared */
    uint64_t file_size;            /* bytes the header implies (== the file's) */
    /* reader state */
    struct src *src;               /* borrowed, or owned when own_src */
    bool own_src;
    bool own_layers;
};

/* llama2c_config_check() : validates c (the rules above).  Returns 0 or
 * -ST_FORMAT with the reason in d.  *size (may be NULL) gets the file size the
 * config implies, overflow-checked. */
int llama2c_config_check(const struct llama2c_config *c, uint64_t *size, struct diag *d);

/* llama2c_read() : parses the model in s, which must be mapped (regular file
 * or src_open_mem over 4-byte aligned bytes; a pipe is refused with
 * -ST_RANGE).  The weight pointers point into the mapping; m borrows s.
 * Returns 0, -ST_FORMAT (bad header, size mismatch: message in d), -ST_RANGE,
 * -ST_NOMEM.  On failure m is released. */
int llama2c_read(struct llama2c_model *m, struct src *s, struct diag *d);

/* llama2c_open() : src_open(path) + llama2c_read(); m owns the source. */
int llama2c_open(struct llama2c_model *m, const char *path, struct diag *d);

/* llama2c_close() : releases m (and its source when owned); accepts a zeroed struct. */
void llama2c_close(struct llama2c_model *m);

/* llama2c_write() : writes m as a v0 .bin to path ("-" = stdout, else
 * atomic; an existing file is replaced only with force).  m->c is validated;
 * the weights are read through m's pointers (layers[] per layer, so they may
 * come from anywhere).  freq_cis_real/imag may be NULL: they are then computed
 * as llama2.c's export does (theta 10000, float32).  wcls is written only when
 * !c.shared_classifier (and must then be set).  Returns 0, -ST_FORMAT (bad
 * config), -ST_RANGE (missing array), -ST_IO. */
int llama2c_write(const char *path, bool force, const struct llama2c_model *m, struct diag *d);

/* ---- an enumeration of the weights, for converters ---- */

enum llama2c_kind {
    LLAMA2C_TOKEN_EMBEDDING,   /* GGUF token_embd */
    LLAMA2C_RMS_ATT,           /* blk.N.attn_norm */
    LLAMA2C_WQ,                /* blk.N.attn_q */
    LLAMA2C_WK,                /* blk.N.attn_k */
    LLAMA2C_WV,                /* blk.N.attn_v */
    LLAMA2C_WO,                /* blk.N.attn_output */
    LLAMA2C_RMS_FFN,           /* blk.N.ffn_norm */
    LLAMA2C_W1,                /* blk.N.ffn_gate */
    LLAMA2C_W2,                /* blk.N.ffn_down */
    LLAMA2C_W3,                /* blk.N.ffn_up */
    LLAMA2C_RMS_FINAL,         /* output_norm */
    LLAMA2C_WCLS,              /* output (only when not shared) */
    LLAMA2C_KIND_COUNT
};

struct llama2c_view {
    enum llama2c_kind kind;
    int32_t layer;             /* -1 for the global tensors */
    const float *data;
    int64_t rows, cols;        /* [rows][cols] row-major; vectors: rows = 1 */
};

/* llama2c_kind_name() : "token_embedding", "rms_att", "wq", ... */
const char *llama2c_kind_name(enum llama2c_kind k);

/* llama2c_views() : the model's weights in file order (token embedding, then
 * per kind all layers, rms_final, wcls when not shared; freq_cis is left out).
 * Writes at most cap views to out (out may be NULL with cap 0) and returns how
 * many there are: 2 + 9 * n_layers (+1 with a separate wcls). */
size_t llama2c_views(const struct llama2c_model *m, struct llama2c_view *out, size_t cap);

/* ---- tokenizer.bin ---- */

struct llama2c_vocab {
    uint32_t max_token_length;
    int32_t n;                 /* tokens */
    char **text;               /* [n] token bytes, NUL-terminated (may hold NULs: use len) */
    int32_t *len;              /* [n] */
    float *score;              /* [n] */
    char *arena;               /* reader: storage of the texts */
};

/* llama2c_tokenizer_read() : reads vocab_size records from s (mapped or a
 * pipe).  vocab_size == 0 means "as many as the file holds" (records must then
 * end exactly at the end of the file).  Every len must be within
 * 0..max_token_length and max_token_length <= LLAMA2C_MAX_TOKEN_LEN; when the
 * size is known, bytes after the last record are an error ("vocab size
 * mismatch?").  Memory grows with the bytes actually read.  Returns 0,
 * -ST_FORMAT, -ST_RANGE (vocab_size < 0), -ST_IO, -ST_NOMEM; on failure v is
 * released. */
int llama2c_tokenizer_read(struct llama2c_vocab *v, struct src *s, int32_t vocab_size,
                           struct diag *d);

/* llama2c_tokenizer_open() : src_open(path) + llama2c_tokenizer_read(). */
int llama2c_tokenizer_open(struct llama2c_vocab *v, const char *path, int32_t vocab_size,
                           struct diag *d);

/* llama2c_tokenizer_release() : frees what the reader allocated; accepts a
 * zeroed struct.  Do not call it on a vocab the caller filled by hand. */
void llama2c_tokenizer_release(struct llama2c_vocab *v);

/* llama2c_tokenizer_write() : writes v->n records to path ("-" = stdout, else
 * atomic).  The stored max_token_length is the larger of v->max_token_length
 * and the longest len.  Returns 0, -ST_RANGE (negative len, n < 0), -ST_IO. */
int llama2c_tokenizer_write(const char *path, bool force, const struct llama2c_vocab *v,
                            struct diag *d);

#endif
