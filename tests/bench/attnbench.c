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

    printf("%-7s %7s %10s %9s\n", "kern", "n_kv", "us/call", "GMAC/s");
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
            (const uint8_t *)pool, (const uint8_t *)pool + kbytes, block, 1, bs, table, kv_of_row,
        };
        double best = bench_best(call, &(struct call){ o, &a, NULL, scr }, 6);
        printf("%-7s %7lld %10.1f %9.2f\n", o->name, (long long)nkv, best * 1e6, mac / best / 1e9);
        free(scr);

        /* the one-row (decode) kernel: the last row alone, its KV warm */
        sb = ((size_t)o->attn_scratch_floats(nq, bs, dk, dv) * sizeof(float) + 63) / 64 * 64;
        if (!(scr = aligned_alloc(64, sb)))
            return 1;
        struct attn_args a1 = {
            q, out, nq, dk, dv, 0.125f, (const uint8_t *)pool, (const uint8_t *)pool + kbytes,
            block, 1, bs, table, nkv, NULL, 0, NULL,
        };
        best = bench_best(call, &(struct call){ o, NULL, &a1, scr }, 6);
        char nm[32];
        snprintf(nm, sizeof(nm), "%s/1", o->name);
        printf("%-7s %7lld %10.1f %9.2f\n", nm, (long long)nkv, best * 1e6,
               2.0 * (double)(nq * dk) * (double)nkv / best / 1e9);
        free(scr);
    }
    free(pool), free(table), free(q), free(out);
    return 0;
}
