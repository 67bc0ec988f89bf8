/*
 * test_sample.c - every stage of the sampling chain on hand-made logits, the
 * RNG against splitmix64's published first output, determinism by seed,
 * greedy = argmax, and sampled frequencies against the distributions they
 * should follow (tolerances of several standard errors).
 */
#include <math.h>
#include <stdlib.h>

#include "sample.h"
#include "t.h"

static void
test_rng(void)
{
    struct rng a, b;
    uint64_t x0, diff = 0;
    double sum = 0.0, lo = 1.0, hi = 0.0;
    int i;

    /* splitmix64 from state 0 first yields 0xe220a8397b1dcdaf (Vigna's
     * reference splitmix64.c); it is the first word of our state. */
    rng_seed(&a, 0);
    CHECK(a.s[0] == 0xe220a8397b1dcdafULL);
    /* xoshiro256**: result = rotl(s1 * 5, 7) * 9 on the state before the step. */
    x0 = a.s[1] * 5;
    x0 = ((x0 << 7) | (x0 >> 57)) * 9;
    CHECK(rng_next(&a) == x0);

    rng_seed(&a, 12345);
    rng_seed(&b, 12345);
    for (i = 0; i < 1000; i++)
        diff += rng_next(&a) != rng_next(&b);
    CHECK_EQ(diff, 0);
    rng_seed(&b, 12346);
    diff = 0;
    for (i = 0; i < 100; i++)
        diff += rng_next(&a) != rng_next(&b);
    CHECK(diff > 95);

    for (i = 0; i < 100000; i++) {
        double u = rng_uniform(&a);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK(lo >= 0.0 && hi < 1.0);
    CHECK(lo < 0.001 && hi > 0.999);
    /* mean of U(0,1): 0.5, standard error sqrt(1/12/1e5) = 0.0009 */
    CHECK_NEAR(sum / 100000, 0.5, 0.005);
}

static void
test_argmax(void)
{
    const float l[] = { 1.0f, 5.0f, 3.0f, 5.0f, -2.0f };
    const float n[] = { NAN, -1.0f, NAN, 2.0f };

    CHECK_EQ(sample_argmax(l, 5), 1);       /* tie -> lowest id */
    CHECK_EQ(sample_argmax(l + 2, 3), 1);   /* 5.0 at index 1 of the slice */
    CHECK_EQ(sample_argmax(n, 4), 3);
}

static void
test_top_k(void)
{
    const float l[] = { 1.0f, 5.0f, 3.0f, 5.0f, 2.0f, -1.0f, 4.0f };
    struct sample_cand c[7];
    struct sample_set s;

    sample_set_fill(&s, c, l, 7);
    sample_top_k(&s, 3);
    CHECK_EQ(s.n, 3);
    CHECK(s.sorted);
    CHECK_EQ(s.c[0].id, 1);
    CHECK_EQ(s.c[1].id, 3);
    CHECK_EQ(s.c[2].id, 6);

    sample_set_fill(&s, c, l, 7);
    sample_top_k(&s, 0);                     /* off */
    CHECK_EQ(s.n, 7);
    CHECK(!s.sorted);
    sample_top_k(&s, 100);                   /* k >= n: everything, sorted */
    CHECK_EQ(s.n, 7);
    CHECK_EQ(s.c[0].id, 1);
    CHECK_EQ(s.c[6].id, 5);

    sample_set_fill(&s, c, l, 7);
    sample_top_k(&s, 1);
    CHECK_EQ(s.n, 1);
    CHECK_EQ(s.c[0].id, 1);
}

static void
test_softmax_top_p_min_p(void)
{
    /* probabilities 1/7, 2/7, 4/7 */
    const float l[] = { 0.0f, (float)M_LN2, (float)(2 * M_LN2) };
    struct sample_cand c[3];
    struct sample_set s;

    sample_set_fill(&s, c, l, 3);
    sample_softmax(&s);
    CHECK_EQ(s.c[0].id, 2);
    CHECK_NEAR(s.c[0].p, 4.0 / 7, 1e-6);
    CHECK_NEAR(s.c[1].p, 2.0 / 7, 1e-6);
    CHECK_NEAR(s.c[2].p, 1.0 / 7, 1e-6);

    sample_set_fill(&s, c, l, 3);
    sample_top_p(&s, 0.5f);                  /* 4/7 >= 0.5 */
    CHECK_EQ(s.n, 1);
    CHECK_EQ(s.c[0].id, 2);
    sample_set_fill(&s, c, l, 3);
    sample_top_p(&s, 0.6f);                  /* 4/7 < 0.6 <= 6/7 */
    CHECK_EQ(s.n, 2);
    CHECK_EQ(s.c[1].id, 1);
    sample_set_fill(&s, c, l, 3);
    sample_top_p(&s, 0.9f);
    CHECK_EQ(s.n, 3);
    sample_set_fill(&s, c, l, 3);
    sample_top_p(&s, 1.0f);                  /* off: not even sorted */
    CHECK_EQ(s.n, 3);
    CHECK(!s.sorted);
    sample_set_fill(&s, c, l, 3);
    sample_top_p(&s, 0.0f);                  /* keeps one */
    CHECK_EQ(s.n, 1);

    /* min-p 0.3: keep p >= 0.3 * 4/7, i.e. 2/7 (ratio 0.5) but not 1/7 (0.25) */
    sample_set_fill(&s, c, l, 3);
    sample_min_p(&s, 0.3f);                  /* unsorted path keeps id order */
    CHECK_EQ(s.n, 2);
    CHECK_EQ(s.c[0].id, 1);
    CHECK_EQ(s.c[1].id, 2);
    sample_set_fill(&s, c, l, 3);
    sample_softmax(&s);
    sample_min_p(&s, 0.3f);                  /* sorted path */
    CHECK_EQ(s.n, 2);
    CHECK_EQ(s.c[0].id, 2);
    CHECK_EQ(s.c[1].id, 1);
    sample_set_fill(&s, c, l, 3);
    sample_min_p(&s, 0.25f);                 /* the boundary is kept */
    CHECK_EQ(s.n, 3);
    sample_set_fill(&s, c, l, 3);
    sample_min_p(&s, 1.0f);                  /* only the maximum */
    CHECK_EQ(s.n, 1);
    CHECK_EQ(s.c[0].id, 2);
    sample_set_fill(&s, c, l, 3);
    sample_min_p(&s, 0.0f);                  /* off */
    CHECK_EQ(s.n, 3);

    /* -inf everywhere but two +inf: they share the mass */
    {
        const float m[] = { -INFINITY, INFINITY, -INFINITY, INFINITY };
        struct sample_cand c4[4];
        sample_set_fill(&s, c4, m, 4);
        sample_softmax(&s);
        CHECK_NEAR(s.c[0].p, 0.5, 1e-7);
        CHECK_NEAR(s.c[1].p, 0.5, 1e-7);
        CHECK_NEAR(s.c[2].p, 0.0, 0.0);
    }
}

static void
test_penalty_temperature(void)
{
    const float l[] = { 2.0f, -2.0f, 1.0f, 0.0f };
    const int32_t hist[] = { 0, 1, 0, 0, 99, -5 };   /* repeats, out-of-range ids ignored */
    struct sample_cand c[4];
    struct sample_set s;

    sample_set_fill(&s, c, l, 4);
    sample_penalty(&s, hist, 6, 2.0f);
    CHECK_NEAR(s.c[0].logit, 1.0, 0);       /* positive: divided once */
    CHECK_NEAR(s.c[1].logit, -4.0, 0);      /* negative: multiplied */
    CHECK_NEAR(s.c[2].logit, 1.0, 0);       /* not in the history */
    CHECK_NEAR(s.c[3].logit, 0.0, 0);
    CHECK_NEAR(s.c[0].p, 0.0, 0);           /* scratch marks cleared */

    sample_set_fill(&s, c, l, 4);
    sample_penalty(&s, hist, 6, 1.0f);       /* off */
    CHECK_NEAR(s.c[0].logit, 2.0, 0);

    sample_set_fill(&s, c, l, 4);
    sample_temperature(&s, 0.5f);
    CHECK_NEAR(s.c[0].logit, 4.0, 0);
    CHECK_NEAR(s.c[1].logit, -4.0, 0);
}

/* Frequencies of n draws from a fresh sampler on logits l (length nv). */
static void
histogram(const struct sample_params *p, const float *l, int32_t nv, int n, double *freq)
{
    struct sampler *s;
    int i;

    if (sampler_new(&s, p, nv, NULL) != 0) {
        CHECK(!"sampler_new");
        return;
    }
    for (i = 0; i < nv; i++)
        freq[i] = 0.0;
    for (i = 0; i < n; i++) {
        int32_t t = sampler_sample(s, l);
        CHECK(t >= 0 && t < nv);
        if (t >= 0 && t < nv)
            freq[t] += 1.0 / n;
    }
    sampler_free(s);
}

static struct sample_params
plain(uint64_t seed)
{
    struct sample_params p;

    sample_params_init(&p);
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

static void
test_distributions(void)
{
    /* p = 0.5, 0.3, 0.2, 0 (the last at -inf) */
    const float l[] = { logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY };
    const int n = 200000;   /* standard error <= sqrt(0.25 / n) = 0.0011 */
    struct sample_params p = plain(7);
    double f[4];

    histogram(&p, l, 4, n, f);
    CHECK_NEAR(f[0], 0.5, 0.006);
    CHECK_NEAR(f[1], 0.3, 0.006);
    CHECK_NEAR(f[2], 0.2, 0.006);
    CHECK_NEAR(f[3], 0.0, 0.0);

    /* temperature 0.5 squares the probabilities: 25, 9, 4 over 38 */
    p.temp = 0.5f;
    histogram(&p, l, 4, n, f);
    CHECK_NEAR(f[0], 25.0 / 38, 0.006);
    CHECK_NEAR(f[1], 9.0 / 38, 0.006);
    CHECK_NEAR(f[2], 4.0 / 38, 0.006);

    /* top-k 2 renormalises 0.5 and 0.3: 0.625, 0.375 */
    p = plain(8);
    p.top_k = 2;
    histogram(&p, l, 4, n, f);
    CHECK_NEAR(f[0], 0.625, 0.006);
    CHECK_NEAR(f[1], 0.375, 0.006);
    CHECK_NEAR(f[2], 0.0, 0.0);

    /* top-p 0.75: 0.5 + 0.3 reaches it; same two tokens */
    p = plain(9);
    p.top_p = 0.75f;
    histogram(&p, l, 4, n, f);
    CHECK_NEAR(f[0], 0.625, 0.006);
    CHECK_NEAR(f[2], 0.0, 0.0);

    /* min-p 0.5 keeps p >= 0.25: only 0.5 and 0.3 */
    p = plain(10);
    p.min_p = 0.5f;
    histogram(&p, l, 4, n, f);
    CHECK_NEAR(f[0], 0.625, 0.006);
    CHECK_NEAR(f[2], 0.0, 0.0);

    /* the order matters: top-p 0.6 on the untempered distribution keeps two
     * tokens (0.5 < 0.6 <= 0.8), then temperature 0.5 sharpens them to
     * 0.25 : 0.09.  (Tempering first would give 25/38 >= 0.6: one token.) */
    p = plain(11);
    p.top_p = 0.6f;
    p.temp = 0.5f;
    histogram(&p, l, 4, n, f);
    CHECK_NEAR(f[0], 0.25 / 0.34, 0.006);
    CHECK_NEAR(f[1], 0.09 / 0.34, 0.006);
    CHECK_NEAR(f[2], 0.0, 0.0);

    /* repetition penalty 2 on token 0 (logit log 0.5 < 0, so multiplied):
     * weights 0.25, 0.3, 0.2 -> 1/3, 0.4, 0.2667 */
    {
        struct sampler *s;
        int i;
        p = plain(12);
        p.repeat_penalty = 2.0f;
        p.repeat_last_n = 4;
        if (sampler_new(&s, &p, 4, NULL) == 0) {
            for (i = 0; i < 4; i++)
                f[i] = 0;
            sampler_accept(s, 0);
            for (i = 0; i < n; i++)
                f[sampler_sample(s, l)] += 1.0 / n;
            CHECK_NEAR(f[0], 0.25 / 0.75, 0.006);
            CHECK_NEAR(f[1], 0.3 / 0.75, 0.006);
            CHECK_NEAR(f[2], 0.2 / 0.75, 0.006);
            /* the window slides: after 4 more accepts token 0 is out of it */
            for (i = 0; i < 4; i++)
                sampler_accept(s, 3);
            for (i = 0; i < 4; i++)
                f[i] = 0;
            for (i = 0; i < n; i++)
                f[sampler_sample(s, l)] += 1.0 / n;
            CHECK_NEAR(f[0], 0.5, 0.006);
            sampler_free(s);
        }
    }
}

static void
test_determinism_and_greedy(void)
{
    enum { NV = 1000, STEPS = 200 };
    static float l[STEPS][NV];
    struct rng g;
    struct sample_params p;
    struct sampler *a, *b, *c;
    int32_t ta[STEPS];
    int i, j, same = 0, diff_c = 0;

    rng_seed(&g, 99);
    for (i = 0; i < STEPS; i++)
        for (j = 0; j < NV; j++)
            l[i][j] = (float)(rng_uniform(&g) * 8.0 - 4.0);

    sample_params_init(&p);                  /* the default chain */
    p.seed = 42;
    p.repeat_penalty = 1.1f;
    CHECK_EQ(sampler_new(&a, &p, NV, NULL), 0);
    CHECK_EQ(sampler_new(&b, &p, NV, NULL), 0);
    p.seed = 43;
    CHECK_EQ(sampler_new(&c, &p, NV, NULL), 0);
    for (i = 0; i < STEPS; i++) {
        int32_t x = sampler_sample(a, l[i]), y = sampler_sample(b, l[i]), z = sampler_sample(c, l[i]);
        ta[i] = x;
        same += x == y;
        diff_c += x != z;
        sampler_accept(a, x);
        sampler_accept(b, y);
        sampler_accept(c, z);
    }
    CHECK_EQ(same, STEPS);
    CHECK(diff_c > STEPS / 4);
    /* reset replays the same sequence */
    sampler_reset(a, 42);
    same = 0;
    for (i = 0; i < STEPS; i++) {
        int32_t x = sampler_sample(a, l[i]);
        same += x == ta[i];
        sampler_accept(a, x);
    }
    CHECK_EQ(same, STEPS);
    sampler_free(a);
    sampler_free(b);
    sampler_free(c);

    /* greedy = argmax, whatever the seed and the other stages */
    sample_params_init(&p);
    p.temp = 0.0f;
    p.seed = 1;
    CHECK_EQ(sampler_new(&a, &p, NV, NULL), 0);
    same = 0;
    for (i = 0; i < STEPS; i++)
        same += sampler_sample(a, l[i]) == sample_argmax(l[i], NV);
    CHECK_EQ(same, STEPS);
    sampler_free(a);

    /* greedy with a penalty: 3.0 / 1.1 = 2.73 falls below 2.9 */
    {
        const float two[] = { 3.0f, 2.9f };
        p.repeat_penalty = 1.1f;
        CHECK_EQ(sampler_new(&a, &p, 2, NULL), 0);
        CHECK_EQ(sampler_sample(a, two), 0);
        sampler_accept(a, 0);
        CHECK_EQ(sampler_sample(a, two), 1);
        sampler_free(a);
    }
}

static void
test_params(void)
{
    struct sample_params p;
    struct sampler *s = (struct sampler *)&p;
    struct diag d;

    sample_params_init(&p);
    CHECK_NEAR(p.temp, 0.8, 1e-7);
    CHECK_EQ(p.top_k, 40);
    CHECK_NEAR(p.top_p, 0.95, 1e-7);
    CHECK_NEAR(p.min_p, 0.05, 1e-7);
    CHECK_EQ(p.repeat_last_n, 64);
    p.top_p = 1.5f;
    CHECK_EQ(sampler_new(&s, &p, 10, &d), -ST_RANGE);
    CHECK(s == NULL);
    sample_params_init(&p);
    p.repeat_penalty = 0.0f;
    CHECK_EQ(sampler_new(&s, &p, 10, &d), -ST_RANGE);
    sample_params_init(&p);
    CHECK_EQ(sampler_new(&s, &p, 0, &d), -ST_RANGE);
    p.temp = NAN;
    CHECK_EQ(sampler_new(&s, &p, 10, &d), -ST_RANGE);
}

int
main(void)
{
    test_rng();
    test_argmax();
    test_top_k();
    test_softmax_top_p_min_p();
    test_penalty_temperature();
    test_distributions();
    test_determinism_and_greedy();
    test_params();
    T_DONE();
}
