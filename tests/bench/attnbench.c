/*
 * attnbench.c - single-thread speed of the tiled (prompt) attention of each
 * kernel table here: one call per ATTN_TILE_Q query rows of a 512-token
 * prompt's last tile, SmolLM2-135M's shape (3 query heads per KV head, head
 * size 64, f16 cache in 16-slot blocks), scratch 64-byte aligned as the
 * forward pass allocates it.
 *
 *   build/attnbench [n_kv [table...]]
 *
 * Prints per table the time per call and the multiply-adds per second
 * (scores and values of the visible slots); a table named but missing here
 * is an error.  Then, as "TABLE/1", the one-row (decode) kernel on the last
 * row alone: one step of a sequence of n_kv slots, its KV warm in cache.
 * And, for n_kv up to 4096, as "TABLE/step", a decode step's attention with
 * its KV out of the caches: the one-row kernel for each of 30 layers x 3 KV
 * heads over a paged pool laid out as common/model/kvcache.c lays it out (a block
 * holds every layer's keys, then values, of 16 slots), with 85 MiB (about
 * SmolLM2's Q4_1 weights) read between layers as a decode reads its
 * weights; the time is the step's minus the same loop's without the
 * attention, per step (us/call) and per kernel call (GMAC/s).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "benchtime.h"


/* one kernel call, as timed */
struct call {
    const struct kernel_ops *o;
    const struct attn_tiled_args *tiled;    /* or */
    const struct attn_args *one;
    float *scr;
};

static void
call(void *p)
{
    const struct call *c = p;
    if (c->tiled)
        c->o->attn_tiled(c->tiled, c->scr);
    else
        c->o->attn(c->one, c->scr);
}

/* the weights of layer l read (one word per cache line) */
static uint64_t
read_layer(const uint64_t *w, size_t words, int64_t l, int64_t n_layer)
{
    uint64_t sum = 0;
    size_t per = words / (size_t)n_layer;
    for (size_t i = (size_t)l * per; i < (size_t)(l + 1) * per; i += 8)
        sum += w[i];
    return sum;
}

#define STEP_LAYERS 30
#define STEP_WEIGHTS ((size_t)85 << 20)

/* seconds of the best of 5 decode-like steps: per layer its weights, then
 * (attn) the one-row kernel per KV head over the pool */
static volatile uint64_t sink;  /* the weights' sum, so that they are read */

static double
step_time(const struct kernel_ops *o, struct attn_args *a, const uint8_t *pool, size_t kbytes,
          size_t hbytes, int64_t nkvh, const uint64_t *w, float *scr, int attn)
{
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now();
        for (int64_t l = 0; l < STEP_LAYERS; l++) {
            sink += read_layer(w, STEP_WEIGHTS / 8, l, STEP_LAYERS);
            for (int64_t h = 0; attn && h < nkvh; h++) {
                a->k_base = pool + (size_t)l * (size_t)nkvh * hbytes + (size_t)h * kbytes;
                a->v_base = pool + (size_t)l * (size_t)nkvh * hbytes + (size_t)nkvh * kbytes +
                            (size_t)h * (hbytes - kbytes);
                o->attn(a, scr);
            }
        }
        double t = bench_now() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

int
main(int argc, char **argv)
{
    const int64_t nr = ATTN_TILE_Q, nq = 3, dk = 64, dv = 64, bs = 16;
    int64_t nkv = argc > 1 ? atoll(argv[1]) : 512;
    static const char *const all[] = { "ref", "avx2", "avx512" };
    const char *const *names = argc > 2 ? (const char *const *)argv + 2 : all;
    int n_names = argc > 2 ? argc - 2 : 3;

    if (nkv < nr || nkv > (1 << 20)) {
        fprintf(stderr, "attnbench: n_kv must be %lld..%d\n", (long long)nr, 1 << 20);
        return 1;
    }
    int64_t nblk = (nkv + bs - 1) / bs;
    size_t kbytes = (size_t)(bs * dk) * 2, block = kbytes + (size_t)(bs * dv) * 2;
    uint16_t *pool = malloc((size_t)nblk * block);
    int32_t *table = malloc((size_t)nblk * sizeof(int32_t));
    float *q = malloc((size_t)(nr * nq * dk) * sizeof(float));
    float *out = malloc((size_t)(nr * nq * dv) * sizeof(float));
    int64_t kv_of_row[ATTN_TILE_Q];
    if (!pool || !table || !q || !out)
        return 1;
    /* f16 values in [0.125, 0.5) and queries in [-0.5, 0.5) */
    for (size_t i = 0; i < (size_t)nblk * block / 2; i++)
        pool[i] = (uint16_t)(0x3000 + (i * 37) % 2048);
    for (int64_t b = 0; b < nblk; b++)
        table[b] = (int32_t)(nblk - 1 - b);
    for (int64_t i = 0; i < nr * nq * dk; i++)
        q[i] = (float)((i * 13) % 17) / 17.0f - 0.5f;
    for (int64_t r = 0; r < nr; r++)
        kv_of_row[r] = nkv - nr + r + 1;
    double mac = 2.0 * (double)(nr * nq * dk) * ((double)nkv - (double)nr / 2.0);

    printf("%-10s %7s %10s %9s\n", "kern", "n_kv", "us/call", "GMAC/s");
    for (int k = 0; k < n_names; k++) {
        const struct kernel_ops *o = ops_select(names[k]);
        if (!o || !o->attn_tiled) {
            if (argc > 2) {     /* a table asked for by name */
                fprintf(stderr, "attnbench: no %s kernels here\n", names[k]);
                return 1;
            }
            continue;
        }
        size_t sb = ((size_t)o->attn_tiled_scratch_floats(nq, dk, dv) * sizeof(float) + 63) / 64 * 64;
        float *scr = aligned_alloc(64, sb);
        if (!scr)
            return 1;
        struct attn_tiled_args a = {
            q, out, nq * dk, nq * dv, nr, nq, dk, dv, 0.125f,
            (const uint8_t *)pool, (const uint8_t *)pool + kbytes, block, 1, bs, table, kv_of_row, NULL, 0,
        };
        double best = bench_best(call, &(struct call){ o, &a, NULL, scr }, 6);
        printf("%-10s %7lld %10.1f %9.2f\n", o->name, (long long)nkv, best * 1e6, mac / best / 1e9);
        free(scr);

        /* the one-row (decode) kernel: the last row alone, its KV warm */
        sb = ((size_t)o->attn_scratch_floats(nq, bs, dk, dv) * sizeof(float) + 63) / 64 * 64;
        if (!(scr = aligned_alloc(64, sb)))
            return 1;
        struct attn_args a1 = {
            q, out, nq, dk, dv, 0.125f, (const uint8_t *)pool, (const uint8_t *)pool + kbytes,
            block, 1, bs, table, nkv, NULL, 0, NULL, 0, 0,
        };
        best = bench_best(call, &(struct call){ o, NULL, &a1, scr }, 6);
        char nm[32];
        snprintf(nm, sizeof(nm), "%s/1", o->name);
        printf("%-10s %7lld %10.1f %9.2f\n", nm, (long long)nkv, best * 1e6,
               2.0 * (double)(nq * dk) * (double)nkv / best / 1e9);

        /* a decode step's attention with its KV from memory */
        if (nkv <= 4096) {
            const int64_t nkvh = 3;
            size_t hbytes = block, stride = (size_t)(STEP_LAYERS * nkvh) * hbytes;
            uint8_t *sp = malloc((size_t)nblk * stride);
            uint64_t *w = malloc(STEP_WEIGHTS);
            if (!sp || !w)
                return 1;
            memset(sp, 0x30, (size_t)nblk * stride);    /* f16 0x3030: 0.13 */
            memset(w, 1, STEP_WEIGHTS);
            struct attn_args as = a1;
            as.block_stride = stride;
            double t1 = step_time(o, &as, sp, kbytes, hbytes, nkvh, w, scr, 1);
            double t0 = step_time(o, &as, sp, kbytes, hbytes, nkvh, w, scr, 0);
            snprintf(nm, sizeof(nm), "%s/step", o->name);
            double ta = t1 > t0 ? t1 - t0 : 1e-9;
            printf("%-10s %7lld %10.1f %9.2f\n", nm, (long long)nkv, ta * 1e6,
                   2.0 * (double)(STEP_LAYERS * nkvh * nq * dk) * (double)nkv / ta / 1e9);
            free(sp), free(w);
        }
        free(scr);
    }
    free(pool), free(table), free(q), free(out);
    return 0;
}
