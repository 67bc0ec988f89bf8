// backend_cuda.cu - the CUDA backend (backend.h): buffers in device memory,
// weights uploaded once, and the whole-step ops on one stream.
//
// Buffers: alloc() is cudaMalloc; the executor's activations, the packed
// weights (pack() uploads a weight's GGUF rows once: the backend keeps the
// GGUF layout) and the KV pool (kvcache.c allocates it from the backend
// when the backend's buffers are not host memory) live on the device.  The
// executor still hands some arrays in as host pointers: per-step metadata
// (token ids, RoPE angles, KV slots, block tables, masks), model vectors
// read from the mapped file (norm weights, biases, the token embedding), and
// the caller's buffers of layer_forward() and of the logits.  Every op
// therefore tells its device pointers (those alloc() made) from host ones:
// metadata is staged to the device each step, model vectors are mirrored
// once (cu_const), host outputs are computed in staging and copied back.
//
// The steps are asynchronous on the backend's stream; download() (and a
// host output) synchronizes.  A CUDA error inside a step ends the process
// (cuda_int.cuh cu_fail).
//
// NOT YET RUN ON A GPU (see cuda_int.cuh).
#include <errno.h>
#include <string.h>

#include "cuda_int.cuh"

void
cu_fail(const char *what, cudaError_t e, const char *file, int line)
{
    fprintf(stderr, "cuda backend: %s: %s (%s:%d)\n", what, cudaGetErrorString(e), file, line);
    exit(5);
}

// ---- pointers ----

int
cu_is_dev(const struct cu *c, const void *p)
{
    uintptr_t u = (uintptr_t)p;
    for (int i = 0; i < c->n_bufs; i++)
        if (u >= c->bufs[i].p && u < c->bufs[i].p + c->bufs[i].n)
            return 1;
    return 0;
}

void *
cu_scratch_get(struct cu *c, struct cu_scratch *s, size_t n)
{
    if (n <= s->n && s->p)
        return s->p;
    if (s->p) {
        CU_CHECK(cudaStreamSynchronize(c->stream));     // in use by queued work
        CU_CHECK(cudaFree(s->p));
    }
    s->p = NULL;
    s->n = 0;
    size_t want = n < 4096 ? 4096 : n + n / 4;
    if (cudaMalloc(&s->p, want) != cudaSuccess) {
        cudaGetLastError();
        s->p = NULL;
        return NULL;
    }
    s->n = want;
    return s->p;
}

// bytes of host memory at p copied into the pinned ring: the pinned source
// of an asynchronous copy; NULL when the ring cannot take it
static const void *
ring_put(struct cu *c, const void *p, size_t bytes)
{
    size_t n = (bytes + 255) & ~(size_t)255;
    if (!c->ring || n > CU_RING_HALF)
        return NULL;
    if (c->ring_off + n > CU_RING_HALF) {
        // leave this half (its copies are queued), wait until the other one
        // was last left and its copies have run
        CU_CHECK(cudaEventRecord(c->ring_ev[c->ring_half], c->stream));
        c->ring_rec[c->ring_half] = 1;
        c->ring_half ^= 1;
        if (c->ring_rec[c->ring_half])
            CU_CHECK(cudaEventSynchronize(c->ring_ev[c->ring_half]));
        c->ring_off = 0;
    }
    uint8_t *dst = c->ring + (size_t)c->ring_half * CU_RING_HALF + c->ring_off;
    memcpy(dst, p, bytes);
    c->ring_off += n;
    return dst;
}

const void *
cu_in(struct cu *c, const void *p, size_t bytes, int slot)
{
    if (!p || cu_is_dev(c, p) || bytes == 0)
        return p;
    void *d = cu_scratch_get(c, &c->stage[slot], bytes);
    if (!d)
        cu_fail("staging a host input", cudaErrorMemoryAllocation, __FILE__, __LINE__);
    const void *src = ring_put(c, p, bytes);
    CU_CHECK(cudaMemcpyAsync(d, src ? src : p, bytes, cudaMemcpyHostToDevice, c->stream));
    return d;
}

const void *
cu_const(struct cu *c, const void *p, size_t bytes)
{
    if (!p || cu_is_dev(c, p))
        return p;
    for (int i = 0; i < c->n_mir; i++)
        if (c->mir[i].host == p && c->mir[i].bytes >= bytes)
            return c->mir[i].dev;
    if (c->n_mir == c->cap_mir) {
        int cap = c->cap_mir ? 2 * c->cap_mir : 64;
        struct cu_mirror *m = (struct cu_mirror *)realloc(c->mir, (size_t)cap * sizeof(*m));
        if (!m)
            cu_fail("mirroring a model array", cudaErrorMemoryAllocation, __FILE__, __LINE__);
        c->mir = m;
        c->cap_mir = cap;
    }
    void *d = NULL;
    CU_CHECK(cudaMalloc(&d, bytes ? bytes : 1));
    CU_CHECK(cudaMemcpyAsync(d, p, bytes, cudaMemcpyHostToDevice, c->stream));
    c->mir[c->n_mir++] = (struct cu_mirror){ p, bytes, d };
    return d;
}

void *
cu_out(struct cu *c, void *p, size_t bytes, int slot, int keep)
{
    if (!p || cu_is_dev(c, p))
        return p;
    void *d = cu_scratch_get(c, &c->stage[slot], bytes);
    if (!d)
        cu_fail("staging a host output", cudaErrorMemoryAllocation, __FILE__, __LINE__);
    if (keep)
        CU_CHECK(cudaMemcpyAsync(d, p, bytes, cudaMemcpyHostToDevice, c->stream));
    return d;
}

void
cu_out_done(struct cu *c, void *p, const void *dev, size_t bytes)
{
    if (p == dev || !p)
        return;
    CU_CHECK(cudaMemcpyAsync(p, dev, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
}

// ---- buffers ----

static void *
cuda_alloc(struct backend *be, size_t bytes)
{
    struct cu *c = cu_of(be);
    void *p = NULL;

    if (c->n_bufs == c->cap_bufs) {
        int cap = c->cap_bufs ? 2 * c->cap_bufs : 32;
        void *nb = realloc(c->bufs, (size_t)cap * sizeof(*c->bufs));
        if (!nb)
            return NULL;
        c->bufs = (decltype(c->bufs))nb;
        c->cap_bufs = cap;
    }
    // cudaMalloc aligns to 256 bytes (backend.h asks for 64)
    if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    c->bufs[c->n_bufs].p = (uintptr_t)p;
    c->bufs[c->n_bufs].n = bytes ? bytes : 64;
    c->n_bufs++;
    return p;
}

static void
cuda_free(struct backend *be, void *p)
{
    struct cu *c = cu_of(be);

    if (!p)
        return;
    for (int i = 0; i < c->n_bufs; i++) {
        if (c->bufs[i].p == (uintptr_t)p) {
            CU_CHECK(cudaStreamSynchronize(c->stream));
            CU_CHECK(cudaFree(p));
            c->bufs[i] = c->bufs[--c->n_bufs];
            return;
        }
    }
}

static cudaMemcpyKind
kind_of(const struct cu *c, void *dst, const void *src)
{
    int dd = cu_is_dev(c, dst), sd = cu_is_dev(c, src);
    return dd && sd ? cudaMemcpyDeviceToDevice : dd ? cudaMemcpyHostToDevice
                   : sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}

static void
cuda_copy(struct backend *be, void *dst, const void *src, size_t bytes)
{
    struct cu *c = cu_of(be);
    if (!bytes)
        return;
    cudaMemcpyKind k = kind_of(c, dst, src);
    if (k == cudaMemcpyHostToHost) {
        memmove(dst, src, bytes);
        return;
    }
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, k, c->stream));
    // a host destination is read as soon as we return; a host source may be
    // reused (pageable copies are staged by the driver before returning)
    if (k == cudaMemcpyDeviceToHost)
        CU_CHECK(cudaStreamSynchronize(c->stream));
}

// ---- weights ----

static int
cuda_supports(const struct backend *be, uint32_t type)
{
    (void)be;
    return cu_mm_supports(type);
}

// the device keeps a weight in its GGUF layout: pack() is the upload
static size_t
cuda_pack_size(const struct backend *be, uint32_t type, int64_t rows, int64_t cols)
{
    (void)be;
    if (!cu_mm_supports(type))
        return 0;
    return qtype_row_bytes(type, cols) * (size_t)rows;
}

static void
cuda_pack(const struct backend *be, void *dst, const struct backend_weight *w)
{
    struct cu *c = cu_of((struct backend *)be);
    CU_CHECK(cudaMemcpyAsync(dst, w->data, w->row_bytes * (size_t)w->rows, cudaMemcpyHostToDevice,
                             c->stream));
    // model.c drops the mapped pages right after: the copy must be done
    CU_CHECK(cudaStreamSynchronize(c->stream));
}

static int
cuda_mm_reserve(struct backend *be, uint32_t type, int64_t max_tok, int64_t cols)
{
    return cu_mm_reserve(cu_of(be), type, max_tok, cols);
}

static int
cuda_attn_reserve(struct backend *be, const struct backend_attn_limits *l)
{
    return cu_attn_reserve(cu_of(be), l);
}

static void
cuda_matmul(struct backend *be, const struct backend_matmul *mm)
{
    cu_matmul(cu_of(be), mm);
}

// MLA's latent cache (V a view of K: v_stride, K-only stores) is not in the
// CUDA kernels yet: refused like any other failure inside a step
static void
cuda_mla_refuse(void)
{
    fprintf(stderr, "cuda backend: multi-head latent attention (deepseek2) is not supported on "
            "--device cuda yet\n");
    exit(5);
}

static void
cuda_attention(struct backend *be, const struct backend_attn *a)
{
    if (a->v_stride)
        cuda_mla_refuse();
    cu_attention(cu_of(be), a);
}

static void
cuda_kv_store(struct backend *be, const struct backend_kv_store *s)
{
    if (!s->v)
        cuda_mla_refuse();
    cu_kv_store(cu_of(be), s);
}

// strided rows, device or host memory on either side (unified addressing)
static void
cuda_copy_rows(struct backend *be, float *y, int64_t ldy, const float *x, int64_t ldx,
               int64_t n_rows, int64_t dim)
{
    struct cu *c = cu_of(be);

    if (n_rows <= 0 || dim <= 0)
        return;
    CU_CHECK(cudaMemcpy2DAsync(y, (size_t)ldy * sizeof(float), x, (size_t)ldx * sizeof(float),
                               (size_t)dim * sizeof(float), (size_t)n_rows, cudaMemcpyDefault,
                               c->stream));
    if (!cu_is_dev(c, y))
        CU_CHECK(cudaStreamSynchronize(c->stream));
}

static void
cuda_get_rows(struct backend *be, float *y, const struct backend_weight *w, const int32_t *ids,
              int64_t n)
{
    struct cu *c = cu_of(be);
    if (n < 1)
        return;
    const void *wd = w->packed && cu_mm_supports(w->type) ? w->packed : w->data;
    wd = cu_const(c, wd, w->row_bytes * (size_t)w->rows);
    const int32_t *id = (const int32_t *)cu_in(c, ids, (size_t)n * sizeof(int32_t), ST_META0);
    size_t yb = (size_t)(n * w->cols) * sizeof(float);
    float *yd = (float *)cu_out(c, y, yb, ST_OUT0, 0);
    cu_get_rows_dev(c, yd, wd, w->row_bytes, w->type, w->cols, id, n);
    cu_out_done(c, y, yd, yb);
}

// ---- per-token ops ----

// y = rmsnorm(x) * w, one CTA per row: the mean of squares in double, as
// ops_rmsnorm_ref (the order of the double sum differs: a tree here)
__global__ void
k_rmsnorm(float *y, const float *x, const float *w, int64_t dim, float eps)
{
    __shared__ double part[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *yr = y + (int64_t)blockIdx.x * dim;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        s += (double)(xr[i] * xr[i]);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0;
        for (int o = 16; o > 0; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0)
            part[0] = s;
    }
    __syncthreads();
    float mean = (float)(part[0] / (double)dim);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i] * scale;
        yr[i] = w ? v * w[i] : v;
    }
}

static void
cuda_rmsnorm(struct backend *be, float *y, const float *x, const float *w, int64_t n_tok,
             int64_t dim, float eps)
{
    struct cu *c = cu_of(be);
    if (n_tok < 1)
        return;
    size_t b = (size_t)(n_tok * dim) * sizeof(float);
    const float *xd = (const float *)cu_in(c, x, b, ST_IN0);
    float *yd = y == x ? (float *)xd : (float *)cu_out(c, y, b, ST_OUT0, 0);
    const float *wd = (const float *)cu_const(c, w, (size_t)dim * sizeof(float));
    if (n_tok > 2147483647)
        cu_fail("rmsnorm: too many rows", cudaErrorInvalidValue, __FILE__, __LINE__);
    k_rmsnorm<<<(unsigned)n_tok, 256, 0, c->stream>>>(yd, xd, wd, dim, eps);
    CU_LAUNCHED("rmsnorm");
    cu_out_done(c, y, yd, b);
}

// rotates pair i of every head of token t (cs: the tokens' angles)
__global__ void
k_rope(float *x, int64_t n_tok, int64_t n_heads, int64_t hd, const float *cs, int64_t n_rot,
       int neox)
{
    int64_t half = n_rot / 2;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * n_heads * half)
        return;
    int64_t t = i / (n_heads * half), h = (i / half) % n_heads, k = i % half;
    const float *ct = cs + t * n_rot;
    float cv = ct[k], sv = ct[half + k];
    float *xh = x + t * n_heads * hd + h * hd;
    int64_t a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
    float x0 = xh[a], x1 = xh[b];
    // as ops_rope_pairs_ref, bit for bit: one fma each, the product apart
    xh[a] = __fmaf_rn(x0, cv, -__fmul_rn(x1, sv));
    xh[b] = __fmaf_rn(x0, sv, __fmul_rn(x1, cv));
}

static void
cuda_rope(struct backend *be, float *x, int64_t n_tok, int64_t n_heads, int64_t head_dim,
          const float *cs, const struct rope_params *p)
{
    struct cu *c = cu_of(be);
    if (n_tok < 1 || p->n_rot < 2)
        return;
    size_t b = (size_t)(n_tok * n_heads * head_dim) * sizeof(float);
    float *xd = (float *)cu_out(c, x, b, ST_OUT0, 1);
    const float *csd = (const float *)cu_in(c, cs, (size_t)(n_tok * p->n_rot) * sizeof(float),
                                            ST_META0);
    k_rope<<<cu_blocks(n_tok * n_heads * (p->n_rot / 2), 256), 256, 0, c->stream>>>(
        xd, n_tok, n_heads, head_dim, csd, p->n_rot, p->style == ROPE_NEOX);
    CU_LAUNCHED("rope");
    cu_out_done(c, x, xd, b);
}

enum ew { EW_ADD, EW_SILU, EW_GELU, EW_SCALE };

// ggml's GELU as ops_gelu_f16_ref, on the fly instead of its f16 table
static __device__ __forceinline__ float
gelu_f16(float g)
{
    const float a = 0.044715f, s2pi = 0.79788456080286535587989211986876f;
    float x = h2f(f2h(g));
    float r = 0.5f * x * (1.0f + tanhf(s2pi * x * __fmaf_rn(a * x, x, 1.0f)));
    return h2f(f2h(r));
}

__global__ void
k_ew(float *x, const float *y, int64_t n, int op, float s)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float g = x[i];
    switch (op) {
    case EW_ADD: x[i] = g + y[i]; break;
    case EW_SILU: x[i] = g / (1.0f + expf(-g)) * y[i]; break;
    case EW_GELU: x[i] = g <= -10.0f ? 0.0f : g >= 10.0f ? g * y[i] : gelu_f16(g) * y[i]; break;
    case EW_SCALE: x[i] = g * s; break;
    }
}

static void
ew(struct backend *be, float *x, const float *y, int64_t n_tok, int64_t dim, int op, float s)
{
    struct cu *c = cu_of(be);
    int64_t n = n_tok * dim;
    if (n < 1)
        return;
    size_t b = (size_t)n * sizeof(float);
    float *xd = (float *)cu_out(c, x, b, ST_OUT0, 1);
    const float *yd = y ? (const float *)cu_in(c, y, b, ST_IN0) : NULL;
    k_ew<<<cu_blocks(n, 256), 256, 0, c->stream>>>(xd, yd, n, op, s);
    CU_LAUNCHED("elementwise");
    cu_out_done(c, x, xd, b);
}

static void
cuda_add(struct backend *be, float *x, const float *y, int64_t n_tok, int64_t dim)
{
    ew(be, x, y, n_tok, dim, EW_ADD, 0.0f);
}

static void
cuda_silu_mul(struct backend *be, float *g, const float *u, int64_t n_tok, int64_t dim)
{
    ew(be, g, u, n_tok, dim, EW_SILU, 0.0f);
}

static void
cuda_gelu_mul(struct backend *be, float *g, const float *u, int64_t n_tok, int64_t dim)
{
    ew(be, g, u, n_tok, dim, EW_GELU, 0.0f);
}

static void
cuda_scale(struct backend *be, float *x, float s, int64_t n_tok, int64_t dim)
{
    ew(be, x, NULL, n_tok, dim, EW_SCALE, s);
}

// ---- open, close ----

static void
cuda_close(struct backend *be)
{
    struct cu *c = cu_of(be);

    cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->n_bufs; i++)
        cudaFree((void *)c->bufs[i].p);
    for (int i = 0; i < c->n_mir; i++)
        cudaFree(c->mir[i].dev);
    for (int i = 0; i < ST_N; i++)
        cudaFree(c->stage[i].p);
    cudaFree(c->act.p);
    cudaFree(c->attn_part.p);
    cudaFree(c->attn_meta.p);
    if (c->pinned)
        cudaFreeHost(c->pinned);
    if (c->ring)
        cudaFreeHost(c->ring);
    cudaEventDestroy(c->ring_ev[0]);
    cudaEventDestroy(c->ring_ev[1]);
    cudaEventDestroy(c->pinned_ev);
    cudaStreamDestroy(c->stream);
    free(c->bufs);
    free(c->mir);
    free(c);
}

static const struct backend_ops cuda_ops = {
    /* .name = */ "cuda",
    /* .close = */ cuda_close,
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .upload = */ cuda_copy,
    /* .download = */ cuda_copy,
    /* .copy = */ cuda_copy,
    /* .supports = */ cuda_supports,
    /* .pack_size = */ cuda_pack_size,
    /* .pack = */ cuda_pack,
    /* .mm_reserve = */ cuda_mm_reserve,
    /* .attn_reserve = */ cuda_attn_reserve,
    /* .matmul = */ cuda_matmul,
    /* .attention = */ cuda_attention,
    /* .kv_store = */ cuda_kv_store,
    /* .get_rows = */ cuda_get_rows,
    /* .rmsnorm = */ cuda_rmsnorm,
    /* .rope = */ cuda_rope,
    /* .add = */ cuda_add,
    /* .silu_mul = */ cuda_silu_mul,
    /* .gelu_mul = */ cuda_gelu_mul,
    /* .scale = */ cuda_scale,
    /* .copy_rows = */ cuda_copy_rows,
    /* .backward = */ NULL,
};

extern "C" int
backend_cuda_open(struct backend **out, const struct backend_config *cfg, char *why,
                  size_t why_len)
{
    int n = 0;
    cudaDeviceProp prop;
    cudaError_t e;

    (void)cfg;
    *out = NULL;
    if ((e = cudaGetDeviceCount(&n)) != cudaSuccess || n < 1) {
        snprintf(why, why_len, "--device cuda: no usable CUDA device (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no GPU");
        cudaGetLastError();
        return -ENODEV;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, 0)) !=
                                                     cudaSuccess) {
        snprintf(why, why_len, "--device cuda: device 0: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return -ENODEV;
    }
    // the kernels use __dp4a and 64-bit shuffles: sm_61 and up; this build
    // carries sm_90a code and compute_90 PTX, which older drivers/GPUs refuse
    if (prop.major * 10 + prop.minor < 61) {
        snprintf(why, why_len, "--device cuda: %.100s is compute capability %d.%d (6.1 or "
                 "newer needed)", prop.name, prop.major, prop.minor);
        return -ENODEV;
    }
    struct cu *c = (struct cu *)calloc(1, sizeof(*c));
    if (!c) {
        snprintf(why, why_len, "out of memory");
        return -ENOMEM;
    }
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(why, why_len, "--device cuda: %s", cudaGetErrorString(e));
        cudaGetLastError();
        free(c);
        return -ENODEV;
    }
    if ((e = cudaEventCreateWithFlags(&c->pinned_ev, cudaEventDisableTiming)) != cudaSuccess) {
        snprintf(why, why_len, "--device cuda: %s", cudaGetErrorString(e));
        cudaGetLastError();
        cudaStreamDestroy(c->stream);
        free(c);
        return -ENODEV;
    }
    if ((e = cudaEventCreateWithFlags(&c->ring_ev[0], cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&c->ring_ev[1], cudaEventDisableTiming)) != cudaSuccess) {
        snprintf(why, why_len, "--device cuda: %s", cudaGetErrorString(e));
        cudaGetLastError();
        cudaEventDestroy(c->pinned_ev);
        cudaStreamDestroy(c->stream);
        free(c);
        return -ENODEV;
    }
    // (without pinned memory the staging copies are plain ones)
    if (cudaMallocHost((void **)&c->ring, 2 * CU_RING_HALF) != cudaSuccess) {
        cudaGetLastError();
        c->ring = NULL;
    }
    // a kernel image for this GPU must exist (sm_90a runs only on sm_90;
    // the compute_90 PTX is JIT-compiled for newer ones, none for older)
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, k_ew)) != cudaSuccess) {
        snprintf(why, why_len, "--device cuda: %.100s (compute capability %d.%d): %s", prop.name,
                 prop.major, prop.minor, cudaGetErrorString(e));
        cudaGetLastError();
        cuda_close(&c->base);
        return -ENODEV;
    }
    c->sm_count = prop.multiProcessorCount;
    c->smem_optin = prop.sharedMemPerBlockOptin;
    c->base.ops = &cuda_ops;
    c->base.device = "cuda";
    c->base.kernel = "cuda";
    c->base.n_threads = 1;
    c->base.host = 0;
    *out = &c->base;
    return 0;
}
