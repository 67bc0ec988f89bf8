/*
 * test_kvmodel.c - KV memory formulas pinned on published configurations,
 * each value worked out by hand in the comment next to it, plus the
 * workload simulator's closed forms checked against a step-by-step loop.
 */
#include <stdlib.h>

#include "kvmodel.h"
#include "t.h"

static struct kv_model
mk(int64_t layers, int64_t heads, int64_t kv, int64_t hd)
{
    struct kv_model m;

    kv_model_init(&m);
    m.n_layers = layers;
    m.n_heads = heads;
    m.n_kv_heads = kv;
    m.head_dim_k = m.head_dim_v = hd;
    return m;
}

static void
test_dtypes(void)
{
    CHECK_EQ(kv_dtype_parse("f16"), KV_DTYPE_F16);
    CHECK_EQ(kv_dtype_parse("Q8_0"), KV_DTYPE_Q8_0);
    CHECK_EQ(kv_dtype_parse("fp16"), KV_DTYPE_F16);
    CHECK_EQ(kv_dtype_parse("q4_1"), -1);
    /* q8_0: 34 bytes / 32 values = 8.5 bits; q4_0: 18 / 32 = 4.5 bits */
    CHECK_NEAR(kv_dtype_bits(KV_DTYPE_Q8_0), 8.5, 1e-12);
    CHECK_NEAR(kv_dtype_bits(KV_DTYPE_Q4_0), 4.5, 1e-12);
    CHECK_NEAR(kv_dtype_bits(KV_DTYPE_BF16), 16.0, 1e-12);
    /* 4096 values: 128 blocks -> 128 * 34 = 4352 (q8_0), 128 * 18 = 2304 (q4_0) */
    CHECK_EQ(kv_row_bytes(KV_DTYPE_Q8_0, 4096), 4352);
    CHECK_EQ(kv_row_bytes(KV_DTYPE_Q4_0, 4096), 2304);
    /* a partial block is a whole block: 33 values = 2 blocks = 68 bytes */
    CHECK_EQ(kv_row_bytes(KV_DTYPE_Q8_0, 33), 68);
    CHECK_EQ(kv_row_bytes(KV_DTYPE_F32, 33), 132);
    CHECK_EQ(kv_row_bytes(KV_DTYPE_FP8, 33), 33);
    CHECK_EQ(kv_row_bytes(KV_DTYPE_F16, -1), -1);
}

/* Llama-2-7B: 32 layers, 32 heads, 32 KV heads, head 128 (MHA). */
static void
test_llama2_7b(void)
{
    struct kv_model m = mk(32, 32, 32, 128);

    CHECK_EQ(kv_model_check(&m, NULL), 0);
    CHECK_EQ(kv_model_attn(&m), KV_ATTN_MHA);
    /* 2 * 32 * 32 * 128 = 262144 values per token */
    CHECK_EQ(kv_elems_per_token(&m), 262144);
    /* x 2 bytes = 524288 (512 KiB); x 4 = 1048576; x 1 = 262144 */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F16), 524288);
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_BF16), 524288);
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F32), 1048576);
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_FP8), 262144);
    /* q8_0: rows of 32 * 128 = 4096 values = 4352 B, K + V = 8704, x 32 layers = 278528 */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_Q8_0), 278528);
    /* q4_0: 2304 B per row, x 2 x 32 = 147456 */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_Q4_0), 147456);
    /* 4096-token sequence: 524288 * 4096 = 2147483648 = 2 GiB */
    CHECK_EQ(kv_mul(kv_bytes_per_token(&m, KV_DTYPE_F16), 4096), 2147483648LL);
    /* 24 GiB = 25769803776 B; blocks of 16 tokens = 8 MiB -> 3072 blocks;
     * a 4096-token sequence takes 256 blocks -> 12 sequences */
    CHECK_EQ(kv_fit_seqs(24LL << 30, 524288, 4096, 16), 12);
    /* one sequence may use all 3072 blocks = 49152 tokens; 4 share them: 12288 */
    CHECK_EQ(kv_fit_ctx(24LL << 30, 524288, 1, 16), 49152);
    CHECK_EQ(kv_fit_ctx(24LL << 30, 524288, 4, 16), 12288);
    /* 24 GiB - 13 GiB of weights = 11 GiB = 1408 blocks -> 5 sequences (5 * 256 = 1280) */
    CHECK_EQ(kv_fit_seqs((24LL - 13) << 30, 524288, 4096, 16), 5);
    /* block rounding: a 4097-token sequence needs 257 blocks -> 3072 / 257 = 11 */
    CHECK_EQ(kv_fit_seqs(24LL << 30, 524288, 4097, 16), 11);
    kv_model_release(&m);
}

/* Llama-2-70B: 80 layers, 64 heads, 8 KV heads, head 128 (GQA-8). */
static void
test_llama2_70b(void)
{
    struct kv_model m = mk(80, 64, 8, 128);
    struct kv_variant v[KV_ATTN_COUNT];
    int n;

    CHECK_EQ(kv_model_check(&m, NULL), 0);
    CHECK_EQ(kv_model_attn(&m), KV_ATTN_GQA);
    /* 2 * 80 * 8 * 128 = 163840 values; x 2 B = 327680 (320 KiB) */
    CHECK_EQ(kv_elems_per_token(&m), 163840);
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F16), 327680);
    /* q8_0: row 8 * 128 = 1024 values = 32 blocks = 1088 B; x 2 x 80 = 174080 */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_Q8_0), 174080);
    n = kv_compare(&m, KV_DTYPE_F16, 0, 0, 0, v, NULL);
    CHECK_EQ(n, 4);
    /* MHA: 2 * 80 * 64 * 128 * 2 = 2621440 (2.5 MiB) -> GQA-8 is 8x smaller */
    CHECK_STR(v[0].label, "MHA");
    CHECK_EQ(v[0].bytes_per_token, 2621440);
    CHECK_STR(v[1].label, "GQA-8");
    CHECK(v[1].is_own);
    CHECK_EQ(v[1].bytes_per_token, 327680);
    CHECK_NEAR(v[1].reduction, 8.0, 1e-12);
    /* MQA: 2 * 80 * 128 * 2 = 40960 -> 64x */
    CHECK_EQ(v[2].bytes_per_token, 40960);
    CHECK_NEAR(v[2].reduction, 64.0, 1e-12);
    /* MLA default: rank 4 * 128 = 512, rope 64: 80 * 576 * 2 = 92160 */
    CHECK_STR(v[3].label, "MLA-512+64");
    CHECK_EQ(v[3].bytes_per_token, 92160);
    /* a 32768-token sequence: 327680 * 32768 = 10 GiB (GQA) vs 80 GiB (MHA) */
    CHECK_EQ(kv_mul(v[1].bytes_per_token, 32768), 10LL << 30);
    CHECK_EQ(kv_mul(v[0].bytes_per_token, 32768), 80LL << 30);
    /* --groups 16: 2 * 80 * 16 * 128 * 2 = 655360, 4x; 6 does not divide 64 */
    n = kv_compare(&m, KV_DTYPE_F16, 16, 0, 0, v, NULL);
    CHECK_EQ(v[1].bytes_per_token, 655360);
    CHECK(!v[1].is_own);
    CHECK_NEAR(v[1].reduction, 4.0, 1e-12);
    CHECK_EQ(kv_compare(&m, KV_DTYPE_F16, 6, 0, 0, v, NULL), -ST_RANGE);
    kv_model_release(&m);
}

/* Mistral-7B: 32 layers, 32 heads, 8 KV heads, head 128: GQA's 4x. */
static void
test_mistral_7b(void)
{
    struct kv_model m = mk(32, 32, 8, 128);
    struct kv_variant v[KV_ATTN_COUNT];

    /* 2 * 32 * 8 * 128 * 2 = 131072 (128 KiB); MHA 524288 (512 KiB) */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F16), 131072);
    CHECK_EQ(kv_compare(&m, KV_DTYPE_F16, 0, 0, 0, v, NULL), 4);
    CHECK_EQ(v[0].bytes_per_token, 524288);
    CHECK_NEAR(v[1].reduction, 4.0, 1e-12);
    /* at 32K: 131072 * 32768 = 4 GiB vs 16 GiB */
    CHECK_EQ(kv_mul(v[1].bytes_per_token, 32768), 4LL << 30);
    CHECK_EQ(kv_mul(v[0].bytes_per_token, 32768), 16LL << 30);
    kv_model_release(&m);
}

/* falcon-7b: 32 layers, 71 heads of 64 (hidden 4544), one KV head (MQA). */
static void
test_falcon_7b(void)
{
    struct kv_model m = mk(32, 71, 1, 64);
    struct kv_variant v[KV_ATTN_COUNT];

    CHECK_EQ(kv_model_check(&m, NULL), 0);
    CHECK_EQ(kv_model_attn(&m), KV_ATTN_MQA);
    /* 2 * 32 * 1 * 64 = 4096 values; x 2 = 8192 B */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F16), 8192);
    /* q4_0: a 64-value row = 2 blocks = 36 B; x 2 x 32 = 2304 */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_Q4_0), 2304);
    /* 71 is prime: no GQA row; MHA 2 * 32 * 71 * 64 * 2 = 581632 -> MQA 71x */
    CHECK_EQ(kv_compare(&m, KV_DTYPE_F16, 0, 0, 0, v, NULL), 3);
    CHECK_EQ(v[0].bytes_per_token, 581632);
    CHECK_STR(v[1].label, "MQA");
    CHECK(v[1].is_own);
    CHECK_NEAR(v[1].reduction, 71.0, 1e-12);
    kv_model_release(&m);
}

/* DeepSeek-V2: 60 layers, 128 heads of 128, MLA with d_c = 512, d_h^R = 64. */
static void
test_deepseek_v2(void)
{
    struct kv_model m = mk(60, 128, 128, 128);
    struct kv_model g67 = mk(95, 64, 8, 128);   /* DeepSeek-LLM-67B, GQA-8 */
    struct kv_variant v[KV_ATTN_COUNT];
    double b67;

    m.kv_lora_rank = 512;
    m.rope_dim = 64;
    CHECK_EQ(kv_model_check(&m, NULL), 0);
    CHECK_EQ(kv_model_attn(&m), KV_ATTN_MLA);
    /* 60 * (512 + 64) = 34560 values; x 2 = 69120 B */
    CHECK_EQ(kv_elems_per_token(&m), 34560);
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F16), 69120);
    /* q8_0: 576 values = 18 blocks = 612 B; x 60 = 36720.  q4_0: 18 * 18 * 60 = 19440 */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_Q8_0), 36720);
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_Q4_0), 19440);
    CHECK_EQ(kv_compare(&m, KV_DTYPE_F16, 0, 0, 0, v, NULL), 4);
    /* MHA equivalent 2 * 60 * 128 * 128 * 2 = 3932160 (3.75 MiB); 3932160 / 69120 = 56.89x,
     * a 98.24% saving */
    CHECK_EQ(v[0].bytes_per_token, 3932160);
    CHECK_STR(v[3].label, "MLA-512+64");
    CHECK(v[3].is_own);
    CHECK_NEAR(v[3].reduction, 3932160.0 / 69120.0, 1e-9);
    CHECK_NEAR(1.0 - 1.0 / v[3].reduction, 0.982421875, 1e-9);
    /* GQA-8 (default for 128 heads): 2 * 60 * 8 * 128 * 2 = 245760 */
    CHECK_STR(v[1].label, "GQA-8");
    CHECK_EQ(v[1].bytes_per_token, 245760);
    /* Against DeepSeek-LLM-67B (the paper's 93.3%): 2 * 95 * 8 * 128 * 2 = 389120 B.
     * f16 MLA: 1 - 69120 / 389120 = 82.24%; fp8: 1 - 34560 / 389120 = 91.12%;
     * at ~6 bits (the paper's deployment) 34560 * 0.75 = 25920: 93.34%. */
    b67 = (double)kv_bytes_per_token(&g67, KV_DTYPE_F16);
    CHECK_EQ((int64_t)b67, 389120);
    CHECK_NEAR(1.0 - 69120.0 / b67, 0.82237, 1e-5);
    CHECK_NEAR(1.0 - (double)kv_bytes_per_token(&m, KV_DTYPE_FP8) / b67, 0.91118, 1e-5);
    CHECK_NEAR(1.0 - 34560.0 * 6.0 / 8.0 / b67, 0.93339, 1e-5);
    /* --kv-lora-rank 256 --rope-dim 32: 60 * 288 * 2 = 34560 */
    kv_compare(&m, KV_DTYPE_F16, 0, 256, 32, v, NULL);
    CHECK_EQ(v[3].bytes_per_token, 34560);
    CHECK(!v[3].is_own);
    kv_model_release(&m);
    kv_model_release(&g67);
}

static void
test_checks(void)
{
    struct kv_model m = mk(32, 32, 6, 128);   /* 32 heads do not split into 6 groups */
    struct diag d;

    CHECK_EQ(kv_model_check(&m, &d), -ST_FORMAT);
    m.n_kv_heads = 8;
    m.n_layers = 0;
    CHECK_EQ(kv_model_check(&m, &d), -ST_FORMAT);
    m.n_layers = KV_MAX_LAYERS + 1;
    CHECK_EQ(kv_model_check(&m, &d), -ST_FORMAT);
    m.n_layers = 2;
    m.layer_kv_heads = malloc(2 * sizeof(int64_t));
    m.layer_kv_heads[0] = 8;
    m.layer_kv_heads[1] = 0;     /* a layer without attention */
    CHECK_EQ(kv_model_check(&m, &d), 0);
    /* one layer of 8 KV heads of 128: 2 * 8 * 128 * 2 = 4096 B */
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F16), 4096);
    m.layer_kv_heads[1] = 9;     /* more than n_kv_heads */
    CHECK_EQ(kv_model_check(&m, &d), -ST_FORMAT);
    m.layer_kv_heads[1] = -1;
    CHECK_EQ(kv_model_check(&m, &d), -ST_FORMAT);
    kv_model_release(&m);
    CHECK_EQ(kv_mul(INT64_MAX / 2, 3), -1);
    CHECK_EQ(kv_mul(-1, 3), -1);
    CHECK_EQ(kv_blocks_for(17, 16), 2);
    CHECK_EQ(kv_blocks_for(16, 16), 1);
}

/* The closed forms of kv_simulate against a literal step loop. */
static void
brute(const struct kv_req *r, size_t n, int64_t maxl, int64_t B, double slots[4], double stored[4],
      double frag[4])
{
    size_t i;
    int p;

    for (p = 0; p < 4; p++)
        slots[p] = stored[p] = frag[p] = 0;
    for (i = 0; i < n; i++) {
        int64_t len = r[i].prompt + r[i].output, s, lo = r[i].output ? 1 : 0;
        int64_t pw = 1;
        while (pw < len)
            pw *= 2;
        if (pw > maxl)
            pw = maxl;
        for (s = lo; s <= r[i].output; s++) {
            int64_t x = r[i].prompt + s;
            int64_t res[4] = { maxl, pw, len, (x + B - 1) / B * B };
            for (p = 0; p < 4; p++) {
                slots[p] += (double)res[p];
                stored[p] += (double)x;
                frag[p] += (double)(res[p] > len ? res[p] - len : 0);
            }
        }
    }
}

static void
test_simulate(void)
{
    struct kv_req r[200];
    struct kv_workload w;
    double slots[4], stored[4], frag[4];
    struct rng rng;
    size_t i;
    int p;

    /* one request, prompt 7, output 2, blocks of 4 (the vLLM paper's Fig. 6
     * prompt): stored 8 then 9 tokens; paged holds 8 then 12 slots; the last
     * block's 3 spare slots are never written (held 1 step) */
    r[0].prompt = 7;
    r[0].output = 2;
    CHECK_EQ(kv_simulate(r, 1, 16, 4, &w, NULL), 0);
    CHECK_NEAR(w.steps, 2, 0);
    CHECK_NEAR(w.pol[KV_POLICY_PAGED].slot_steps, 20, 0);
    CHECK_NEAR(w.pol[KV_POLICY_PAGED].stored_steps, 17, 0);
    CHECK_NEAR(w.pol[KV_POLICY_PAGED].frag_steps, 3, 0);
    CHECK_NEAR(w.pol[KV_POLICY_PAGED].reserved_steps, 0, 0);
    /* contiguous-max: 16 + 16 slots, 7 never used each step, 1 reserved at step 1 */
    CHECK_NEAR(w.pol[KV_POLICY_MAX].slot_steps, 32, 0);
    CHECK_NEAR(w.pol[KV_POLICY_MAX].frag_steps, 14, 0);
    CHECK_NEAR(w.pol[KV_POLICY_MAX].reserved_steps, 1, 0);
    CHECK_NEAR(w.pol[KV_POLICY_MAX].waste, 1.0 - 17.0 / 32.0, 1e-12);
    /* pow2 of 9 is 16 too; oracle holds 9 */
    CHECK_NEAR(w.pol[KV_POLICY_POW2].slot_steps, 32, 0);
    CHECK_NEAR(w.pol[KV_POLICY_ORACLE].slot_steps, 18, 0);
    CHECK_NEAR(w.pol[KV_POLICY_ORACLE].final_waste, 0, 1e-12);
    /* final: paged 12 slots for 9 tokens */
    CHECK_NEAR(w.pol[KV_POLICY_PAGED].final_waste, 0.25, 1e-12);

    rng_seed(&rng, 7);
    for (i = 0; i < 200; i++) {
        r[i].prompt = (int64_t)(rng_next(&rng) % 300);
        r[i].output = (int64_t)(rng_next(&rng) % 200);
        if (r[i].prompt + r[i].output == 0)
            r[i].prompt = 1;
    }
    CHECK_EQ(kv_simulate(r, 200, 512, 16, &w, NULL), 0);
    brute(r, 200, 512, 16, slots, stored, frag);
    for (p = 0; p < 4; p++) {
        CHECK_NEAR(w.pol[p].slot_steps, slots[p], 0);
        CHECK_NEAR(w.pol[p].stored_steps, stored[p], 0);
        CHECK_NEAR(w.pol[p].frag_steps, frag[p], 0);
        CHECK_NEAR(w.pol[p].reservation + w.pol[p].fragmentation, w.pol[p].waste, 1e-12);
    }
    CHECK(w.pol[KV_POLICY_PAGED].waste < w.pol[KV_POLICY_ORACLE].waste ||
          w.pol[KV_POLICY_PAGED].fragmentation < 0.05);
    /* bad requests */
    r[0].prompt = 600;
    CHECK_EQ(kv_simulate(r, 200, 512, 16, &w, NULL), -ST_RANGE);
    r[0].prompt = 0;
    r[0].output = 0;
    CHECK_EQ(kv_simulate(r, 1, 512, 16, &w, NULL), -ST_RANGE);
}

static void
test_concurrency(void)
{
    struct kv_req r[2] = { { 100, 0 }, { 100, 0 } };
    struct kv_workload w;

    /* two prefill-only requests of 100 tokens, max 400, blocks of 16:
     * contiguous-max holds 400, paged 112 (7 blocks) */
    CHECK_EQ(kv_simulate(r, 2, 400, 16, &w, NULL), 0);
    CHECK_NEAR(w.pol[KV_POLICY_MAX].mean_slots, 400, 0);
    CHECK_NEAR(w.pol[KV_POLICY_PAGED].mean_slots, 112, 0);
    /* 1 MiB at 256 B/token = 4096 slots: 10 at 400, 4096 / 112 = 36 */
    CHECK_EQ(kv_concurrency(&w, KV_POLICY_MAX, 1 << 20, 256), 10);
    CHECK_EQ(kv_concurrency(&w, KV_POLICY_PAGED, 1 << 20, 256), 36);
    CHECK_EQ(kv_concurrency(&w, KV_POLICY_PAGED, 0, 256), 0);
}

static void
test_dists(void)
{
    struct rng a, b;
    struct kv_req *r = malloc(20000 * sizeof(*r));
    int k, i;
    size_t clipped;

    rng_seed(&a, 42);
    rng_seed(&b, 42);
    for (i = 0; i < 100; i++)
        CHECK(rng_next(&a) == rng_next(&b));
    CHECK_EQ(kv_dist_parse("exponential"), KV_DIST_GEOMETRIC);
    CHECK_EQ(kv_dist_parse("pareto"), KV_DIST_ZIPF);
    CHECK_EQ(kv_dist_parse("normal"), -1);
    /* sample means land near the requested mean (heavy tails get more slack) */
    for (k = 0; k < KV_DIST_COUNT; k++) {
        double sum = 0, mean = 200;
        rng_seed(&a, 1);
        for (i = 0; i < 200000; i++) {
            int64_t x = kv_dist_sample((enum kv_dist)k, mean, 0, &a);
            CHECK(x >= 1);
            sum += (double)x;
        }
        CHECK_NEAR(sum / 200000, mean, k == KV_DIST_ZIPF ? 20 : 4);
    }
    /* the same seed draws the same workload; clipping keeps every request <= max */
    kv_workload_generate(KV_DIST_LOGNORMAL, 161, 338, 1.0, 2048, 9, r, 10000, &clipped);
    kv_workload_generate(KV_DIST_LOGNORMAL, 161, 338, 1.0, 2048, 9, r + 10000, 10000, NULL);
    for (i = 0; i < 10000; i++) {
        CHECK(r[i].prompt == r[10000 + i].prompt && r[i].output == r[10000 + i].output);
        CHECK(r[i].prompt >= 1 && r[i].prompt + r[i].output <= 2048);
    }
    CHECK(clipped > 0 && clipped < 500);
    free(r);
}

/* Sliding windows layer by layer: Gemma 3 270M's shape (18 layers, 1 K/V
 * head of 256: 1024 bytes per layer and token in f16), every 6th layer
 * global, a 512-token window in the others. */
static void
test_sliding_window(void)
{
    struct kv_model m = mk(18, 4, 1, 256);
    int64_t l;

    m.sliding_window = 512;
    m.n_swa_layers = 15;
    m.layer_window = calloc(18, sizeof(*m.layer_window));
    for (l = 0; l < 18; l++)
        m.layer_window[l] = l % 6 < 5 ? 512 : 0;
    CHECK_EQ(kv_model_check(&m, NULL), 0);
    CHECK_EQ(kv_bytes_per_token(&m, KV_DTYPE_F16), 18 * 1024);
    /* exact tokens: 3 * 32768 + 15 * 512 */
    CHECK_EQ(kv_seq_bytes(&m, KV_DTYPE_F16, 32768, 0), (3 * 32768 + 15 * 512) * 1024);
    CHECK_EQ(kv_seq_bytes(&m, KV_DTYPE_F16, 300, 0), 18 * 300 * 1024);   /* inside the window */
    CHECK_EQ(kv_seq_tokens(&m, 0, 513, 0), 512);
    CHECK_EQ(kv_seq_tokens(&m, 5, 513, 0), 513);
    /* blocks of 16, as generate's pool holds them (kv_swa_slots): the window,
     * 128 slots of slack and a 512-token chunk in whole blocks and a partial
     * block at each end, 74 blocks, once the sequence is that long; a full
     * layer rounds up */
    CHECK_EQ(kv_seq_tokens(&m, 0, 1024, 16), 1024);
    CHECK_EQ(kv_seq_tokens(&m, 0, 1184, 16), 1184);
    CHECK_EQ(kv_seq_tokens(&m, 0, 1185, 16), 1184);
    CHECK_EQ(kv_seq_tokens(&m, 0, 32768, 16), 1184);
    CHECK_EQ(kv_seq_tokens(&m, 5, 1025, 16), 1040);
    CHECK_EQ(kv_seq_tokens(&m, 0, 100, 16), 112);
    /* a budget of 2 sequences of 1024 tokens, exactly */
    int64_t two = 2 * kv_seq_bytes(&m, KV_DTYPE_F16, 1024, 16);
    CHECK_EQ(kv_fit_seqs_model(&m, KV_DTYPE_F16, two, 1024, 16), 2);
    CHECK_EQ(kv_fit_seqs_model(&m, KV_DTYPE_F16, two - 1, 1024, 16), 1);
    CHECK_EQ(kv_fit_ctx_model(&m, KV_DTYPE_F16, two, 2, 16), 1024);
    /* every layer sliding: the cost stops growing, the context is capped */
    for (l = 0; l < 18; l++)
        m.layer_window[l] = 512;
    CHECK_EQ(kv_fit_ctx_model(&m, KV_DTYPE_F16, (int64_t)1 << 40, 1, 16), KV_MAX_LEN);
    m.layer_window[3] = -1;
    CHECK(kv_model_check(&m, NULL) < 0);
    kv_model_release(&m);
    CHECK(m.layer_window == NULL);
}

int
main(void)
{
    test_dtypes();
    test_llama2_7b();
    test_llama2_70b();
    test_mistral_7b();
    test_falcon_7b();
    test_deepseek_v2();
    test_checks();
    test_simulate();
    test_concurrency();
    test_dists();
    test_sliding_window();
    T_DONE();
}
