/*
 * sample.c - the sampling chain of sample.h.  The order of the stages and
 * their "off" values follow llama.cpp's default sampler chain
 * (common/sampling.cpp, src/llama-sampling.cpp); the code is our own.
 */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

void
sample_params_init(struct sample_params *p)
{
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 0;
}

uint64_t
sample_random_seed(void)
{
    uint64_t s;

    if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s))
        s = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return s & (((uint64_t)1 << 53) - 1);   /* exact in a JSON number */
}

/* ---- candidate sets ---- */

/* a ranks before b: higher logit, or the same logit and a lower id. */
static inline bool
cand_before(const struct sample_cand *a, const struct sample_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int
cand_cmp(const void *pa, const void *pb)
{
    const struct sample_cand *a = pa, *b = pb;

    if (cand_before(a, b))
        return -1;
    if (cand_before(b, a))
        return 1;
    return 0;
}

static void
set_sort(struct sample_set *s)
{
    if (!s->sorted) {
        if (s->n > 1)
            qsort(s->c, s->n, sizeof(*s->c), cand_cmp);
        s->sorted = true;
    }
}

void
sample_set_fill(struct sample_set *s, struct sample_cand *c, const float *logits, int32_t n_vocab)
{
    int32_t i;

    for (i = 0; i < n_vocab; i++) {
        c[i].id = i;
        /* A NaN would make every comparison false; it ranks last instead. */
        c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i];
        c[i].p = 0.0f;
    }
    s->c = c;
    s->n = (size_t)n_vocab;
    s->sorted = false;
}

void
sample_penalty(struct sample_set *s, const int32_t *hist, size_t n_hist, float penalty)
{
    size_t i;

    if (penalty == 1.0f || n_hist == 0)
        return;
    /* p is free scratch until softmax: it marks tokens already penalised, so
     * a token seen several times is penalised once. */
    for (i = 0; i < n_hist; i++) {
        int32_t t = hist[i];
        struct sample_cand *c;

        if (t < 0 || (size_t)t >= s->n)
            continue;
        c = &s->c[t];
        if (c->p != 0.0f)
            continue;
        c->p = 1.0f;
        if (c->logit > 0.0f)
            c->logit /= penalty;
        else
            c->logit *= penalty;
    }
    for (i = 0; i < n_hist; i++)
        if (hist[i] >= 0 && (size_t)hist[i] < s->n)
            s->c[hist[i]].p = 0.0f;
}

/* Sift c[i] down a heap of n whose root is the candidate ranked last. */
static void
heap_down(struct sample_cand *c, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        struct sample_cand t;

        if (l < n && cand_before(&c[w], &c[l]))
            w = l;
        if (r < n && cand_before(&c[w], &c[r]))
            w = r;
        if (w == i)
            return;
        t = c[i];
        c[i] = c[w];
        c[w] = t;
        i = w;
    }
}

void
sample_top_k(struct sample_set *s, int32_t k)
{
    size_t i, kk;

    if (k <= 0)
        return;
    kk = (size_t)k;
    if (kk >= s->n) {
        set_sort(s);
        return;
    }
    if (!s->sorted) {
        /* Keep the k best in a heap whose root is the worst of them:
         * O(n log k) instead of sorting the whole vocabulary. */
        for (i = kk / 2; i-- > 0;)
            heap_down(s->c, kk, i);
        for (i = kk; i < s->n; i++) {
            if (cand_before(&s->c[i], &s->c[0])) {
                s->c[0] = s->c[i];
                heap_down(s->c, kk, 0);
            }
        }
    }
    s->n = kk;
    set_sort(s);
}

void
sample_softmax(struct sample_set *s)
{
    double sum = 0.0;
    float max;
    size_t i;

    if (s->n == 0)
        return;
    set_sort(s);
    max = s->c[0].logit;
    if (isinf(max)) {
        /* Every candidate -inf, or some +inf: the ones equal to the
         * maximum share the mass. */
        size_t m = 0;
        for (i = 0; i < s->n; i++)
            m += s->c[i].logit == max;
        for (i = 0; i < s->n; i++)
            s->c[i].p = s->c[i].logit == max ? (float)(1.0 / (double)m) : 0.0f;
        return;
    }
    for (i = 0; i < s->n; i++) {
        float e = expf(s->c[i].logit - max);
        s->c[i].p = e;
        sum += e;
    }
    for (i = 0; i < s->n; i++)
        s->c[i].p = (float)(s->c[i].p / sum);
}

void
sample_top_p(struct sample_set *s, float p)
{
    double cum = 0.0;
    size_t i;

    if (p >= 1.0f || s->n == 0)
        return;
    sample_softmax(s);
    for (i = 0; i < s->n; i++) {
        cum += s->c[i].p;
        if (cum >= p) {
            s->n = i + 1;
            return;
        }
    }
}

void
sample_min_p(struct sample_set *s, float min_p)
{
    float max, thr;
    size_t i, j;

    if (min_p <= 0.0f || s->n == 0)
        return;
    if (s->sorted) {
        thr = s->c[0].logit + logf(min_p);
        for (i = 1; i < s->n && s->c[i].logit >= thr; i++)
            ;
        s->n = i;
        return;
    }
    max = s->c[0].logit;
    for (i = 1; i < s->n; i++)
        if (s->c[i].logit > max)
            max = s->c[i].logit;
    thr = max + logf(min_p);
    for (i = j = 0; i < s->n; i++)
        if (s->c[i].logit >= thr)
            s->c[j++] = s->c[i];
    s->n = j;   /* the maximum always passes, so j >= 1 */
}

void
sample_temperature(struct sample_set *s, float t)
{
    size_t i;

    for (i = 0; i < s->n; i++)
        s->c[i].logit /= t;
}

int32_t
sample_draw(struct sample_set *s, struct rng *r)
{
    double u, total = 0.0, acc = 0.0;
    size_t i, last = 0;

    sample_softmax(s);
    for (i = 0; i < s->n; i++)
        total += s->c[i].p;
    u = rng_uniform(r) * total;
    for (i = 0; i < s->n; i++) {
        if (s->c[i].p <= 0.0f)
            continue;
        last = i;
        acc += s->c[i].p;
        if (u < acc)
            return s->c[i].id;
    }
    return s->c[last].id;   /* rounding left u at the very top */
}

int32_t
sample_argmax(const float *logits, int32_t n)
{
    int32_t i, best = 0;

    for (i = 1; i < n; i++)
        if (logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i])))
            best = i;
    return best;
}

/* ---- the chain ---- */

struct sampler {
    struct sample_params p;
    struct rng rng;
    int32_t n_vocab;
    struct sample_cand *cand;   /* (n_vocab) */
    int32_t *hist;              /* ring of the last repeat_last_n tokens */
    size_t hist_cap, hist_n, hist_pos;
};

int
sampler_new(struct sampler **out, const struct sample_params *p, int32_t n_vocab, struct diag *d)
{
    struct sampler *s;

    *out = NULL;
    if (n_vocab <= 0)
        return diag_set(d, ST_RANGE, "sampler: empty vocabulary");
    if (!isfinite(p->temp))
        return diag_set(d, ST_RANGE, "sampler: temperature is not finite");
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return diag_set(d, ST_RANGE, "sampler: top-p %g is outside [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return diag_set(d, ST_RANGE, "sampler: min-p %g is outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return diag_set(d, ST_RANGE, "sampler: repetition penalty %g is not positive",
                        (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return diag_set(d, ST_RANGE, "sampler: negative repeat-last-n %d", (int)p->repeat_last_n);
    s = calloc(1, sizeof(*s));
    if (!s)
        return diag_set(d, ST_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof(*s->cand));
    s->hist_cap = (size_t)p->repeat_last_n;
    if (s->hist_cap)
        s->hist = malloc(s->hist_cap * sizeof(*s->hist));
    if (!s->cand || (s->hist_cap && !s->hist)) {
        sampler_free(s);
        return diag_set(d, ST_NOMEM, "sampler: out of memory");
    }
    rng_seed(&s->rng, p->seed);
    *out = s;
    return 0;
}

void
sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->hist);
    free(s);
}

void
sampler_accept(struct sampler *s, int32_t token)
{
    if (!s->hist_cap)
        return;
    s->hist[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->hist_cap;
    if (s->hist_n < s->hist_cap)
        s->hist_n++;
}

void
sampler_reset(struct sampler *s, uint64_t seed)
{
    s->hist_n = s->hist_pos = 0;
    s->p.seed = seed;
    rng_seed(&s->rng, seed);
}

int32_t
sampler_sample(struct sampler *s, const float *logits)
{
    struct sample_set set;
    bool penalise = s->p.repeat_penalty != 1.0f && s->hist_n > 0;
    size_t i;
    int32_t best;

    if (s->p.temp <= 0.0f && !penalise)
        return sample_argmax(logits, s->n_vocab);
    sample_set_fill(&set, s->cand, logits, s->n_vocab);
    if (penalise)
        sample_penalty(&set, s->hist, s->hist_n, s->p.repeat_penalty);
    if (s->p.temp <= 0.0f) {
        /* still in id order: the first maximum is the lowest id */
        for (best = 0, i = 1; i < set.n; i++)
            if (set.c[i].logit > set.c[best].logit)
                best = (int32_t)i;
        return set.c[best].id;
    }
    sample_top_k(&set, s->p.top_k);
    sample_top_p(&set, s->p.top_p);
    sample_min_p(&set, s->p.min_p);
    sample_temperature(&set, s->p.temp);
    return sample_draw(&set, &s->rng);
}
