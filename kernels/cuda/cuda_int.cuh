// cuda_int.cuh - what the CUDA backend's files share (kernels/cuda/*.cu):
// the backend struct, the error check after every launch, fp16/bf16 and
// ggml block helpers on the device, and the entry points of mm.cu and
// attn.cu called by backend_cuda.cu.
//
// NOT YET RUN ON A GPU: this code was compiled (sm_90a + PTX) and its host
// logic checked on machines without one; tests/kernels/test_cuda.c and
// scripts/gpu-check are what prove it the first time a GPU is lent.
#ifndef LLMKIT_CUDA_INT_CUH
#define LLMKIT_CUDA_INT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>

extern "C" {
#include "backend.h"
#include "qtypes.h"
}

// ---- errors ----
//
// The backend's steps return nothing (backend.h): a CUDA error inside one
// (a launch refused, a fault, the device lost) cannot be handed back to the
// caller, so it ends the process with one line on stderr and exit status 5
// (what the tools give ST_DEVICE), never with a result computed from
// garbage.  Every launch is followed by CU_LAUNCHED().
void cu_fail(const char *what, cudaError_t e, const char *file, int line);
#define CU_CHECK(call)                                                     \
    do {                                                                   \
        cudaError_t cu_e_ = (call);                                        \
        if (cu_e_ != cudaSuccess)                                          \
            cu_fail(#call, cu_e_, __FILE__, __LINE__);                     \
    } while (0)
#define CU_LAUNCHED(name) CU_CHECK(cudaPeekAtLastError())

// ---- the backend ----

#define CU_RING_HALF ((size_t)2 << 20)

// a staging or scratch buffer on the device, grown on demand
struct cu_scratch {
    void *p;
    size_t n;
};

// host pointer -> its device copy, uploaded once (model weights that the
// executor passes as host pointers: norms, biases, RoPE frequency factors,
// the token embedding)
struct cu_mirror {
    const void *host;
    size_t bytes;
    void *dev;
};

enum {
    ST_IN0, ST_IN1, ST_IN2, ST_OUT0, ST_OUT1, ST_OUT2, ST_META0, ST_META1, ST_META2, ST_META3,
    ST_META4, ST_META5, ST_META6, ST_META7, ST_N
};

struct cu {
    struct backend base;
    cudaStream_t stream;
    int sm_count;
    size_t smem_optin;          // the largest dynamic shared memory a block may opt into
    // allocations made by alloc(): to tell device pointers from host ones
    struct { uintptr_t p; size_t n; } *bufs;
    int n_bufs, cap_bufs;
    struct cu_mirror *mir;
    int n_mir, cap_mir;
    struct cu_scratch stage[ST_N];      // host inputs/outputs and per-step metadata
    struct cu_scratch act;      // quantized activations (mm.cu)
    struct cu_scratch attn_part;        // split-KV partial states (attn.cu)
    struct cu_scratch attn_meta;        // per-step attention rows (attn.cu)
    void *pinned;               // pinned host staging for attention metadata
    size_t pinned_n;
    cudaEvent_t pinned_ev;      // recorded after the copy out of pinned
    int pinned_busy;            // pinned_ev is pending
    // small host inputs (per-step metadata) go through a pinned ring of two
    // halves, so that their copies are asynchronous: a half is reused only
    // after the event recorded when it was left has passed
    uint8_t *ring;              // [2 * CU_RING_HALF] pinned, or NULL (then plain copies)
    size_t ring_off;
    int ring_half;
    cudaEvent_t ring_ev[2];
    int ring_rec[2];
};

static inline struct cu *
cu_of(struct backend *be)
{
    return (struct cu *)be;
}

// device buffer of at least n bytes in s (grows, never shrinks); NULL when
// out of device memory
void *cu_scratch_get(struct cu *c, struct cu_scratch *s, size_t n);
// p as a device pointer: p itself when alloc() made it, else a copy of its
// bytes in staging slot `slot` (made now, in stream order)
const void *cu_in(struct cu *c, const void *p, size_t bytes, int slot);
// an immutable host array (a model weight) as a device pointer: uploaded on
// first use, kept until close
const void *cu_const(struct cu *c, const void *p, size_t bytes);
// 1 when p lies in a buffer alloc() made
int cu_is_dev(const struct cu *c, const void *p);
// an output: p when on the device, else staging slot `slot` (first filled
// with p's bytes when keep is set: in-place ops); cu_out_done copies the
// staging back into p
void *cu_out(struct cu *c, void *p, size_t bytes, int slot, int keep);
void cu_out_done(struct cu *c, void *p, const void *dev, size_t bytes);

// ---- mm.cu ----
int cu_mm_supports(uint32_t type);
int cu_mm_reserve(struct cu *c, uint32_t type, int64_t max_tok, int64_t cols);
void cu_matmul(struct cu *c, const struct backend_matmul *mm);
// dequantizes rows ids[0..n) of a weight in device memory into y [n][cols]
void cu_get_rows_dev(struct cu *c, float *y, const void *w, size_t row_bytes, uint32_t type,
                     int64_t cols, const int32_t *ids_dev, int64_t n);

// ---- attn.cu ----
int cu_attn_reserve(struct cu *c, const struct backend_attn_limits *l);
void cu_attention(struct cu *c, const struct backend_attn *a);
void cu_kv_store(struct cu *c, const struct backend_kv_store *s);

// ---- device helpers ----

static __device__ __forceinline__ float
h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ uint16_t
f2h(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}

static __device__ __forceinline__ float
bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

// fp32 -> bf16 as ggml_compute_fp32_to_bf16: round to nearest even, NaN
// kept quiet
static __device__ __forceinline__ uint16_t
f2bf(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

static __device__ __forceinline__ float
warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float
warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// one Q8_0 block held by a warp (lane j: element j), as the CPU quantizes
// activations and KV rows (ggml's x86 code): *d = amax / 127 (to be rounded
// to fp16 by the caller), the code round-half-even(v * (127 / amax))
static __device__ __forceinline__ int
warp_q8(float v, float *d)
{
    float amax = warp_max(fabsf(v));
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    *d = amax / 127.0f;
    return __float2int_rn(v * id);
}

// the warp's item for kernels that give one warp to each of n items (its
// index, or -1 past the end: the whole warp leaves together)
static __device__ __forceinline__ int64_t
warp_item(int64_t n)
{
    int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    return w < n ? w : -1;
}

// GGUF block fields (little-endian, as the device): every block type's
// fp16 fields sit at even offsets of blocks of even size
static __device__ __forceinline__ uint16_t
ld16(const uint8_t *p)
{
    return *(const uint16_t *)(const void *)p;
}

// 4 bytes at a 2-byte aligned address: two 16-bit loads
static __device__ __forceinline__ uint32_t
ld32a2(const uint8_t *p)
{
    const uint16_t *h = (const uint16_t *)(const void *)p;
    return (uint32_t)h[0] | (uint32_t)h[1] << 16;
}

// 4 bytes at a 4-byte aligned address
static __device__ __forceinline__ uint32_t
ld32a4(const uint8_t *p)
{
    return *(const uint32_t *)(const void *)p;
}

// 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block
static __device__ __forceinline__ void
scale_min_k4(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

// grid size for n items of `per` items per block, capped for 1-D grids
static inline unsigned
cu_blocks(int64_t n, int per)
{
    int64_t b = (n + per - 1) / per;
    return (unsigned)(b < 1 ? 1 : b > 2147483647 ? 2147483647 : b);
}

#endif
