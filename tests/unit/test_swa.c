/*
 * test_swa.c - sliding-window layers' rows released from the paged KV cache
 * (kvcache.h): a model whose layers all attend over a 6-token window runs a
 * long sequence in a pool that releases them and in one that keeps
 * everything; the logits are the same bits, the releasing pool's charge
 * stays bounded by the window, and rollbacks, forks, prefix sharing and
 * swap stay correct around released blocks.
 */
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "t.h"

#define N_TOK 420
#define WIN 6

static int
feed(struct model *m, struct kvcache *kv, int32_t seq, int64_t pos0, const int32_t *toks,
     int64_t n, float *out)
{
    struct batch_tok bt[16];
    struct diag d;
    for (int64_t i = 0; i < n; i++)
        bt[i] = (struct batch_tok){ seq, (int32_t)(pos0 + i), toks[i], i == n - 1, 0, 0 };
    struct batch b = { n, bt, NULL, 0 };
    struct model_out mo = { out, NULL };
    return model_forward(m, kv, &b, NULL, &mo, &d);
}

int
main(void)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct kvcache *rel = NULL, *all = NULL;
    struct kv_config c;
    struct kv_stats st;
    struct diag d;
    int32_t toks[N_TOK], sr, sa;

    mo.n_threads = 1;
    if (model_open(&m, "tests/fixtures/tiny-llama-f32.gguf", &mo, &d)) {
        fprintf(stderr, "test_swa: %s (make fixtures)\n", d.msg);
        return 1;
    }
    /* every layer on a 6-token window */
    m->hp.n_swa = WIN;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        m->layers[l].swa = (m->swa_layers[l] = 1) != 0;
    int64_t nv = m->hp.n_vocab;
    for (int i = 0; i < N_TOK; i++)
        toks[i] = (int32_t)((5 + 11 * i + i * i) % nv);

    /* a pool charged for the window, and one for everything */
    model_kv_config(m, 0, GGML_TYPE_F16, &c);
    CHECK(c.swa == m->swa_layers && c.swa_window == WIN);
    size_t bb = kv_block_bytes(&c), need = kv_mem_for(&c, N_TOK, 7);
    CHECK(need > 0 && need < (size_t)(N_TOK / 16 + 1) * bb);   /* less than every block whole */
    CHECK_EQ(kv_tokens_for(&c, need, 7) >= N_TOK, 1);
    c.mem = need;
    CHECK_EQ(kv_new(&rel, &c, &d), 0);
    struct kv_config ca = c;
    ca.swa = NULL;
    ca.mem = (size_t)(N_TOK / 16 + 2) * bb;
    CHECK_EQ(kv_new(&all, &ca, &d), 0);
    /* the budget that holds N_TOK tokens whole would not do in the releasing
     * pool's place: it is smaller than N_TOK tokens' blocks */
    CHECK(need < ca.mem);

    float *lr = malloc((size_t)nv * sizeof(float)), *la = malloc((size_t)nv * sizeof(float));
    CHECK(lr && la);
    CHECK_EQ(kv_seq_new(rel, &sr), 0);
    CHECK_EQ(kv_seq_new(all, &sa), 0);
    size_t peak = 0;
    int same = 1;
    for (int64_t p = 0; p < N_TOK; p += 7) {
        int64_t n = N_TOK - p < 7 ? N_TOK - p : 7;
        CHECK_EQ(feed(m, rel, sr, p, toks + p, n, lr), 0);
        CHECK_EQ(feed(m, all, sa, p, toks + p, n, la), 0);
        same &= memcmp(lr, la, (size_t)nv * sizeof(float)) == 0;
        kv_stats(rel, &st);
        if (st.bytes_charged > peak)
            peak = st.bytes_charged;
    }
    CHECK(same);
    kv_stats(rel, &st);
    CHECK(st.swa_released > 0);
    CHECK(peak <= need);
    /* every block holds only sliding-window layers: what stays charged is
     * the window, the slack and the last chunk */
    CHECK(st.bytes_charged <= (size_t)((WIN + KV_SWA_SLACK + 7) / 16 + 3) * bb);

    /* a rollback within the slack is fine; one whose window would reach a
     * released block is refused */
    CHECK_EQ(kv_seq_truncate(rel, sr, N_TOK - 40), 0);
    CHECK_EQ(kv_seq_truncate(all, sa, N_TOK - 40), 0);
    CHECK_EQ(kv_seq_truncate(rel, sr, 100), -ST_RANGE);
    CHECK_EQ(kv_seq_len(rel, sr), N_TOK - 40);
    CHECK_EQ(feed(m, rel, sr, N_TOK - 40, toks, 3, lr), 0);
    CHECK_EQ(feed(m, all, sa, N_TOK - 40, toks, 3, la), 0);
    CHECK(memcmp(lr, la, (size_t)nv * sizeof(float)) == 0);

    /* swap out and in: the released rows stay released (charged as before),
     * and the sequence goes on as the keeping pool's does */
    struct kv_swap *sw = NULL;
    size_t charged = (kv_stats(rel, &st), st.bytes_charged);
    CHECK_EQ(kv_seq_swap_out(rel, sr, &sw, &d), 0);
    CHECK_EQ((kv_stats(rel, &st), st.bytes_charged), 0);
    CHECK_EQ(kv_seq_swap_in(rel, sw, &sr, &d), 0);
    CHECK_EQ((kv_stats(rel, &st), st.bytes_charged), charged);
    CHECK_EQ(feed(m, rel, sr, N_TOK - 37, toks + 9, 5, lr), 0);
    CHECK_EQ(feed(m, all, sa, N_TOK - 37, toks + 9, 5, la), 0);
    CHECK(memcmp(lr, la, (size_t)nv * sizeof(float)) == 0);

    /* a fork shares its blocks: neither sequence releases a shared block,
     * and both go on as the unshared pool does */
    int32_t fr, fa;
    CHECK_EQ(kv_seq_fork(rel, sr, &fr), 0);
    CHECK_EQ(kv_seq_fork(all, sa, &fa), 0);
    int64_t len = kv_seq_len(rel, sr);
    CHECK_EQ(feed(m, rel, fr, len, toks + 50, 16, lr), 0);
    CHECK_EQ(feed(m, all, fa, len, toks + 50, 16, la), 0);
    CHECK(memcmp(lr, la, (size_t)nv * sizeof(float)) == 0);
    CHECK_EQ(feed(m, rel, sr, len, toks + 70, 16, lr), 0);
    CHECK_EQ(feed(m, all, sa, len, toks + 70, 16, la), 0);
    CHECK(memcmp(lr, la, (size_t)nv * sizeof(float)) == 0);

    kv_seq_free(rel, sr);
    kv_seq_free(rel, fr);

    /* a published block whose rows are released leaves the prefix cache */
    struct kv_prefix_key k0, k1;
    int32_t sp, sq;
    kv_prefix_key_root(&k0);
    kv_prefix_key_next(&k0, toks, 16, &k1);
    CHECK_EQ(kv_seq_new(rel, &sp), 0);
    CHECK_EQ(feed(m, rel, sp, 0, toks, 16, lr), 0);
    CHECK(kv_prefix_publish(rel, sp, 0, &k1) >= 0);
    CHECK_EQ(kv_prefix_lookup(rel, &k1), 1);
    for (int64_t p = 16; p < 16 * 12; p += 16)
        CHECK_EQ(feed(m, rel, sp, p, toks + p, 16, lr), 0);
    CHECK_EQ(kv_prefix_lookup(rel, &k1), 0);
    CHECK_EQ(kv_seq_new(rel, &sq), 0);
    CHECK_EQ(kv_prefix_attach(rel, sq, &k1), 0);

    /* giving everything back returns the budget */
    kv_seq_free(rel, sp);
    kv_seq_free(rel, sq);
    kv_stats(rel, &st);
    CHECK_EQ(st.bytes_charged, 0);
    CHECK_EQ(st.blocks_used, 0);

    free(lr);
    free(la);
    kv_free(rel);
    kv_free(all);
    model_free(m);
    T_DONE();
}
