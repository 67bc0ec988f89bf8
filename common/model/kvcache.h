/*
 * kvcache.h - the paged KV cache: a pool of fixed-size blocks, block tables
 * per sequence, reference-counted blocks (vLLM's PagedAttention design).
 *
 * The pool is one anonymous mapping of n_blocks blocks sized from a byte
 * budget; pages are committed by the OS only when a block is first written,
 * so resident memory follows the blocks in use.  A block holds block_size
 * token slots of K and V for every layer and KV head:
 *
 *   block b, layer l:  K [n_head_kv][block_size][head_dim_k]
 *                      V [n_head_kv][block_size][head_dim_v]
 *   bytes per block = n_layer * n_head_kv * block_size * (head_dim_k + head_dim_v) * elem
 *
 * or, with v_in_k (MLA's latent cache: a K row is the latent and the RoPE
 * key, V is the latent), K rows only, V being the first head_dim_v elements
 * of each K row (as llama.cpp's MLA cache views it):
 *   bytes per block = n_layer * n_head_kv * block_size * head_dim_k * elem
 *
 * elements of dtype GGML_TYPE_F16 (default), GGML_TYPE_F32 or GGML_TYPE_Q8_0
 * (a row is head_dim / 32 blocks of 34 bytes: fp16 scale d, 32 int8 codes,
 * value = d * code; head dims must be multiples of 32).  Rows are converted
 * with ops_kv_row_put() / ops_kv_row_get() (kernels/ops.h).  One block per (layer, head) row group
 * keeps the keys a query group reads contiguous; one block for all layers
 * keeps a sequence's data in one place: physical block b is the
 * block_bytes bytes at offset b * block_bytes of the pool, so swap and
 * prefix sharing move whole blocks.
 *
 * A sequence is a small integer id with a length (token slots filled, in the
 * order they were appended) and a block table mapping logical block i (slots
 * i*block_size ..) to a physical block.  Blocks carry a reference count: a
 * block is on the free list exactly when its count is 0.  Sharing blocks
 * between sequences (kv_seq_fork) is copy-on-write: a write into a shared
 * block goes through kv_seq_grow(), which first gives the sequence a
 * private copy.
 *
 * Prefix caching (vLLM's automatic prefix caching): a full block whose
 * contents are known to be the K/V of a given token prefix can be
 * published under a key chained from the keys of the blocks before it
 * (kv_prefix_key_next).  A sequence that starts with the same tokens
 * attaches the published blocks instead of computing them (kv_prefix_attach)
 * and shares them by reference count.  A published block whose count drops
 * to 0 stays in the cache: it counts as free, and is evicted (least
 * recently freed first) only when no never-cached free block is left.
 *
 * Sliding-window layers (kv_config.swa): their rows are kept only while the
 * window can see them.  A block's rows of those layers (its "S part") are
 * given back to the system once the block lies wholly more than
 * swa_window + KV_SWA_SLACK slots before its sequence's end (at the next
 * kv_seq_grow, when the sequence holds the block's only reference; a
 * published block is unpublished first).  The byte budget is then charged
 * per block in use, the whole block or its other layers' part alone, so a
 * long context costs its global layers in full and its sliding-window
 * layers only their windows (as llama.cpp's SWA cache); the pool has more
 * block ids than whole blocks fit in the budget (kv_blocks_free says how
 * many can be taken now).  kv_seq_truncate() refuses to go back so far that
 * the window would reach a released block.
 *
 * Swap: kv_seq_swap_out() compresses a sequence's blocks (zstd when built
 * with it, else a plain copy) into host memory and frees them;
 * kv_seq_swap_in() restores them into fresh blocks, bit for bit.
 *
 * Not thread-safe: one caller at a time (the forward pass and the scheduler
 * run on one thread; kernels only read/write slot data already reserved).
 */
#ifndef LLMKIT_KVCACHE_H
#define LLMKIT_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

struct backend;

#define KV_BLOCK_SIZE_DEFAULT 16

/* slots kept beyond a sliding window before its blocks' rows are released:
 * the rollbacks of speculative decoding (64 draft tokens at most) fit */
#define KV_SWA_SLACK 128

struct kv_config {
    int64_t n_layer;
    int64_t n_head_kv;
    int64_t head_dim_k;
    int64_t head_dim_v;
    int64_t block_size;         /* token slots per block; 0 = KV_BLOCK_SIZE_DEFAULT */
    uint32_t dtype;             /* GGML_TYPE_F16, GGML_TYPE_F32 or GGML_TYPE_Q8_0 */
    size_t mem;                 /* byte budget for the pool (--kv-mem) */
    const uint8_t *swa;         /* NULL, or [n_layer]: 1 = the layer attends over the last
                                 * swa_window positions only (copied by kv_new; a device
                                 * pool keeps every row: nothing is released there) */
    int64_t swa_window;
    int v_in_k;                 /* V is a view of each K row's first head_dim_v elements
                                 * (head_dim_v <= head_dim_k): no V rows are stored */
    /* NULL: the pool is host memory (an anonymous mapping); else a buffer of
     * this backend (device memory: the CUDA backend), which the cache reaches
     * only through the backend's copy op (copy-on-write, swap) */
    struct backend *be;
};

/* Defaults: f16, 16-token blocks; the caller fills the dimensions and mem
 * (model_kv_config() in model.h does it from a model). */
#define KV_CONFIG_INIT { 0, 0, 0, 0, KV_BLOCK_SIZE_DEFAULT, 1 /* GGML_TYPE_F16 */, 0, NULL, 0, 0, NULL }

struct kvcache;

struct kv_stats {
    int64_t block_size;
    size_t block_bytes;
    int64_t blocks_total;       /* pool size */
    int64_t blocks_used;        /* reference count > 0 */
    int64_t blocks_free;        /* kv_blocks_free() */
    int64_t blocks_shared;      /* reference count > 1 */
    int64_t seqs;               /* live sequences */
    int64_t tokens;             /* sum of sequence lengths (logical) */
    int64_t slots_filled;       /* distinct physical slots holding data */
    double waste;               /* 1 - slots_filled / (blocks_used * block_size); 0 if none used */
    int64_t blocks_cached;      /* free blocks still holding a published prefix */
    int64_t prefix_hits;        /* blocks attached from the prefix cache, running total */
    int64_t prefix_evictions;   /* published blocks reused for other data, running total */
    size_t bytes_charged;       /* budget taken by the blocks in use (sliding-window
                                 * layers' released rows not counted) */
    int64_t swa_released;       /* blocks whose sliding-window rows were released, total */
};

/* kv_block_bytes() : bytes of one block for config c, 0 when the dimensions
 * or dtype are invalid (q8_0 with a head dim not a multiple of 32) or the
 * product overflows. */
size_t kv_block_bytes(const struct kv_config *c);

/* kv_mem_for() : the budget one sequence of `tokens` tokens needs in a pool
 * of config c, appending at most `chunk` tokens at a time (with sliding-
 * window layers their rows count only for the window, the slack, the chunk
 * and two partial blocks); 0 when invalid or too large. */
size_t kv_mem_for(const struct kv_config *c, int64_t tokens, int64_t chunk);

/* kv_swa_slots() : the slots a sliding-window layer of window `window`
 * holds at most for a sequence of len tokens appended at most `chunk` at a
 * time in blocks of block_size: the window, KV_SWA_SLACK and the chunk in
 * whole blocks, plus a partial block at each end, never more than len's
 * blocks (kv_mem_for and kvstat's paged figures count with it). */
int64_t kv_swa_slots(int64_t window, int64_t len, int64_t chunk, int64_t block_size);

/* tokens generate appends at a time by default (a prompt's chunk, a batch
 * step): what kvstat assumes */
#define KV_CHUNK_DEFAULT 512

/* kv_tokens_for() : the most tokens one sequence can hold in a budget of
 * mem bytes (kv_mem_for's inverse; whole blocks); 0 if not one. */
int64_t kv_tokens_for(const struct kv_config *c, size_t mem, int64_t chunk);

/* kv_dtype_row_bytes() : bytes of a row of n elements of dtype (f16, f32,
 * q8_0 with n % 32 == 0), 0 otherwise. */
size_t kv_dtype_row_bytes(uint32_t dtype, int64_t n);

/* (a row's codec: ops_kv_row_put() / ops_kv_row_get() in kernels/ops.h) */

/* kv_new() : a pool of floor(c->mem / block_bytes) blocks, all free, no
 * sequences.  The caller frees it with kv_free().
 * Returns 0; -ST_RANGE for bad dimensions, block size (1 .. 4096) or dtype;
 * -ST_NOMEM when the budget holds no block, or the mapping fails. */
int kv_new(struct kvcache **out, const struct kv_config *c, struct diag *d);

/* kv_free() : releases the pool and every sequence; NULL is a no-op. */
void kv_free(struct kvcache *kv);

/* kv_config_get() : the configuration the pool was made with (block_size
 * and dtype resolved). */
const struct kv_config *kv_config_get(const struct kvcache *kv);

/* ---- sequences ---- */

/* kv_seq_new() : a new empty sequence; its id (>= 0) in *id.  Ids of freed
 * sequences are reused.  0 or -ST_NOMEM. */
int kv_seq_new(struct kvcache *kv, int32_t *id);

/* kv_seq_free() : drops the sequence and one reference to each of its
 * blocks.  0, or -ST_RANGE when id is not a live sequence. */
int kv_seq_free(struct kvcache *kv, int32_t id);

/* kv_seq_fork() : a new sequence with the same length and block table as
 * src; every block gains a reference (no data is copied until one of them
 * writes: see kv_seq_grow).  0, -ST_RANGE (bad src), -ST_NOMEM. */
int kv_seq_fork(struct kvcache *kv, int32_t src, int32_t *id);

/* kv_seq_valid() : 1 when id is a live sequence, else 0. */
int kv_seq_valid(const struct kvcache *kv, int32_t id);

/* kv_seq_len() : slots filled (tokens appended and not truncated), or
 * -ST_RANGE for a bad id. */
int64_t kv_seq_len(const struct kvcache *kv, int32_t id);

/* kv_seq_grow() : appends n slots (len .. len+n-1) to the sequence and makes
 * them writable: allocates blocks as needed and replaces a shared block that
 * a new slot falls into by a private copy of it (copy-on-write).  The slots'
 * contents are undefined until written.  All or nothing: on -ST_NOMEM (pool
 * exhausted; message in d says how many blocks were needed and free) the
 * sequence is unchanged.  -ST_RANGE for a bad id or n < 0. */
int kv_seq_grow(struct kvcache *kv, int32_t id, int64_t n, struct diag *d);

/* kv_seq_truncate() : keeps the first n slots (n <= len) and drops a
 * reference to each block no longer needed (rollback of rejected
 * speculative tokens, or of a failed forward call).  0 or -ST_RANGE. */
int kv_seq_truncate(struct kvcache *kv, int32_t id, int64_t n);

/* kv_seq_move_slot() : copies the K and V of slot `from` of a sequence, every
 * layer and head, over slot `to` (both < len; to's block must be the
 * sequence's own: not shared, not in the prefix cache), as when the
 * accepted path of a speculative token tree is compacted before the
 * rejected slots are truncated.  0 or -ST_RANGE. */
int kv_seq_move_slot(struct kvcache *kv, int32_t id, int64_t from, int64_t to);

/* kv_seq_table() : the block table (physical block per logical block) and
 * its length ceil(len / block_size) in *n_blocks; valid until the next call
 * that changes this sequence.  NULL for a bad id. */
const int32_t *kv_seq_table(const struct kvcache *kv, int32_t id, int64_t *n_blocks);

/* ---- blocks ---- */

/* kv_block_ref() / kv_block_unref() : add / drop one reference to a used
 * block (prefix sharing); a block whose count reaches 0 returns to the free
 * list.  0, or -ST_RANGE for a bad or free block. */
int kv_block_ref(struct kvcache *kv, int32_t block);
int kv_block_unref(struct kvcache *kv, int32_t block);

/* kv_block_refcount() : the block's reference count (0 = free), or -ST_RANGE. */
int kv_block_refcount(const struct kvcache *kv, int32_t block);

/* ---- prefix cache ---- */

/* The identity of a full block of tokens and of everything before it: two
 * independent 64-bit chained hashes (a false match needs both to collide). */
struct kv_prefix_key {
    uint64_t h, c;
};

/* kv_prefix_key_root() : the key "before the first block". */
void kv_prefix_key_root(struct kv_prefix_key *k);

/* kv_prefix_key_next() : the key of a block holding tokens[0..n) (n =
 * block_size) that follows the blocks summed up by parent.  out may be
 * parent. */
void kv_prefix_key_next(const struct kv_prefix_key *parent, const int32_t *tokens, int64_t n,
                        struct kv_prefix_key *out);

/* kv_prefix_publish() : declares that logical block lblock of sequence id
 * (which must be full: len >= (lblock + 1) * block_size) holds the K/V of
 * the prefix named by key, with slot j at position j of the prefix.  A key
 * that is already cached (in another block) leaves things as they are; a
 * block is published once.  Returns 1 when the block was added to the
 * cache, 0 when not (key present, or block already published), -ST_RANGE
 * for a bad id or a block that is not full. */
int kv_prefix_publish(struct kvcache *kv, int32_t id, int64_t lblock,
                      const struct kv_prefix_key *key);

/* kv_prefix_lookup() : whether a block is published under key (1 or 0);
 * touches nothing. */
int kv_prefix_lookup(const struct kvcache *kv, const struct kv_prefix_key *key);

/* kv_prefix_attach() : appends the block published under key to sequence
 * id, whose length must be a multiple of block_size, taking a reference (a
 * cached free block is taken back from the free pool); the sequence grows
 * by block_size slots.  Returns 1 when attached, 0 when no block has that
 * key, -ST_RANGE for a bad id or length, -ST_NOMEM. */
int kv_prefix_attach(struct kvcache *kv, int32_t id, const struct kv_prefix_key *key);

/* kv_seq_blocks_needed() : free blocks that kv_seq_grow(id, n) would take
 * now (new blocks plus a copy-on-write copy), or -ST_RANGE. */
int64_t kv_seq_blocks_needed(const struct kvcache *kv, int32_t id, int64_t n);

/* kv_blocks_free() : blocks that can be taken now (free ones, cached ones
 * included; with sliding-window layers, no more than the budget left holds
 * whole). */
int64_t kv_blocks_free(const struct kvcache *kv);

/* ---- swap ---- */

struct kv_swap;

/* kv_seq_swap_out() : compresses the data of every block of sequence id
 * into a new host-memory image *out, then frees the sequence (the id is no
 * longer valid; its shared blocks lose one reference).  The caller owns
 * *out (kv_seq_swap_in or kv_swap_free).  0, -ST_RANGE (bad id), -ST_NOMEM
 * (the sequence is left as it was). */
int kv_seq_swap_out(struct kvcache *kv, int32_t id, struct kv_swap **out, struct diag *d);

/* kv_swap_blocks() : blocks kv_seq_swap_in() needs for an image. */
int64_t kv_swap_blocks(const struct kv_swap *sw);

/* kv_swap_bytes() : host bytes an image takes (compressed data). */
size_t kv_swap_bytes(const struct kv_swap *sw);

/* kv_seq_swap_in() : a new sequence (its id in *id) with the length and
 * data of the image, in freshly allocated private blocks; the image is
 * freed on success.  -ST_NOMEM when fewer than kv_swap_blocks() blocks are
 * free (nothing changes; the image stays the caller's), -ST_FORMAT when the
 * image does not decompress to the expected bytes. */
int kv_seq_swap_in(struct kvcache *kv, struct kv_swap *sw, int32_t *id, struct diag *d);

/* kv_swap_free() : releases an image; NULL is a no-op. */
void kv_swap_free(struct kv_swap *sw);

/* ---- data access (the forward pass) ---- */

/* Where layer `layer`, KV head `head` lives in physical block 0; block b is
 * block_stride bytes further.  Slot j of the block is row j of block_size
 * rows of head_dim_k (K) or head_dim_v (V) elements of dtype (k_row_bytes
 * and v_row_bytes bytes each).  With v_in_k, v == k and v_row_bytes ==
 * k_row_bytes: V row j is the start of K row j. */
struct kv_head_view {
    uint8_t *k;
    uint8_t *v;
    size_t block_stride;
    size_t k_row_bytes;
    size_t v_row_bytes;
};

/* kv_head_view() : fills v for a layer and KV head (both in range: the
 * caller checks against kv_config_get()). */
void kv_head_view(const struct kvcache *kv, int64_t layer, int64_t head, struct kv_head_view *v);

/* kv_slot_block() : physical block and index in it of slot `slot` of a
 * sequence (slot < kv_seq_len).  0 or -ST_RANGE. */
int kv_slot_block(const struct kvcache *kv, int32_t id, int64_t slot, int32_t *block,
                  int64_t *index);

/* ---- accounting ---- */

/* kv_stats() : current usage (O(blocks + total table length)). */
void kv_stats(const struct kvcache *kv, struct kv_stats *s);

#endif
