/*
 * draft_train.c - the draft-train run (draft_train.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef LLMKIT_HAVE_ZSTD
#include <zstd.h>
#endif

#include "blas.h"
#include "chat.h"
#include "cli.h"
#include "distill.h"
#include "draft_train.h"
#include "eagle.h"
#include "eagle3.h"
#include "eagle_io.h"
#include "eagle_target.h"
#include "gguf_write.h"
#include "json.h"
#include "model.h"
#include "qconv.h"
#include "quantize.h"
#include "rng.h"
#include "tokenizer.h"
#include "xio.h"

#define DATA_MAX ((size_t)1 << 30)
#define W_CLS 0.1f
#define BETA1 0.9
#define BETA2 0.95
#define ADAM_EPS 1e-8
#define WARMUP 0.05             /* of the run */
#define LR_FLOOR 0.1            /* of lr, at the end */
#define DISTILL_SEQS 8          /* responses generated together */
#define PREP_FEAT 0.25          /* of --max-time: the features stop this long after
                                 * the self-distillation (--gen-share) */

/* a file of text or JSON Lines being read: --data's, or --eval's, whose
 * prompts are all answered whatever --max-time and --resume */
struct dsrc {
    const char *name;
    bool eval;
    int64_t n_prompts, n_generated;     /* self-distillation: prompts, response tokens */
    int64_t n_answered;         /* the prompts up to the last answered */
    bool gen_cut;               /* some left unanswered by --max-time or --resume */
};

struct run {
    const struct draft_train_opts *o;
    struct model *m;
    struct tokenizer tok;
    struct eagle_target tgt;
    struct eagle_head h;
    struct eagle_ws *ws;
    struct eagle3_ws *ws3;      /* EAGLE-3 instead of ws */
    int64_t S, n_seq, n_hold, n_tok, d;
    int64_t fd;                 /* floats kept per position: d (EAGLE-1); 3d inputs + d (EAGLE-3) */
    int32_t *seq_tok;           /* [n_seq][S + 1] */
    uint8_t *mask;              /* [n_seq][S]: row i (token i + 1 read) counts in the loss
                                 * (tokenize_data: EAGLE's loss mask) */
    double mask_frac;           /* the share of the data's rows counted */
    int64_t n_no_resp;          /* the data's sequences without one: left out */
    uint16_t *feat;             /* [n_seq][S + 1][fd] f16, or bf16 when feat_bf16 */
    uint8_t *have;              /* [n_seq]: 1 when feat's row holds the sequence's features,
                                 * taken from the self-distillation's forward passes */
    bool feat_bf16;             /* gemma3's EAGLE-3 features: its hidden states between
                                 * layers outgrow f16 (max 65504); bf16 keeps f32's range */
    float *f32;                 /* [S + 1][fd] one sequence's features */
    float *fin;                 /* EAGLE-3: [S + 1][d] the final features of f32 */
    float *noisy;               /* [S][fd] */
    float *grad, *am, *av;      /* [n_param] */
    struct eagle_frozen fz;     /* the embedding, the CE's LM head rows */
    float *lm_red;              /* owned [fz.n_lm][d] when a subset */
    uint8_t *keep;              /* EAGLE-3 with a subset: [n_seq][S], 1 when the target's
                                 * argmax at row i (position i + 1) is in the draft vocabulary */
    double keep_frac;           /* the share of the data's positions counted that are kept */
    bool keep_hit;              /* keep came from the cache */
    int32_t *lm_ids;            /* owned [fz.n_lm] their token ids, ascending (subset) */
    char base_sha[65], data_sha[65];
    char data_raw[65];          /* the SHA-256 of --data's bytes */
    char label[160];            /* the progress line */
    char *ckpt;                 /* OUTPUT.ckpt */
    struct chat_template ct;    /* for "messages" lines, when ct_loaded */
    bool ct_loaded;
    struct dsrc data;            /* --data */
    int64_t n_ev;               /* --eval: its sequences, the last n_hold of seq_tok */
    /* --max-time covers the whole run: no prompt starts its response after
     * o->gen_share of it, the features at PREP_FEAT after (a prefix of the
     * sequences in spread order), and training has what is left */
    double t_start;             /* now_seconds() at the start */
    double t_eval;              /* s spent preparing --eval's sequences: outside the budget */
    int64_t n_seq_data;         /* sequences in the data (n_seq: those with features) */
    double train_time;          /* training's share of --max-time, s (0 = none) */
    /* --resume: the data the checkpoint's run trained on, repeated whatever
     * the time (eagle_io.h: eagle.ckpt.prompts, .sequences, .train_time) */
    bool pinned;
    bool init_target;           /* the head started from the target's last layer */
    int64_t pin_prompts, pin_seqs;
    double pin_train_time;
    struct eagle_head ck_h;
    struct eagle_meta ck_mt;
    float *ck_m, *ck_v;         /* its optimizer state */
    bool ck_loaded;             /* the checkpoint is in ck_* (until resume() took it) */
    bool no_ckpt;               /* the output is a device or a FIFO: no OUTPUT.ckpt */
};

/* a feature as stored, and back */
static uint16_t
feat_enc(const struct run *r, float x)
{
    return r->feat_bf16 ? qconv_fp32_to_bf16(x) : qconv_fp32_to_fp16(x);
}

static float
feat_dec(const struct run *r, uint16_t h)
{
    return r->feat_bf16 ? qconv_bf16_to_fp32(h) : qconv_fp16_to_fp32(h);
}

/* ---- data ---- */

/* one JSON line's tokens into seg: text as it is; a prompt with BOS; a
 * chat through the model's template (loaded on first use).  *gen set for
 * a prompt or a chat (a response is to follow). */
static int
line_tokens(struct run *r, const struct distill_line *l, struct tok_ids *seg, bool *gen,
            struct diag *d)
{
    int rc;

    *gen = l->kind != DISTILL_TEXT;
    if (l->kind == DISTILL_TEXT)
        return tok_encode(&r->tok, l->text, l->text_len, false, false, seg, d);
    if (l->kind == DISTILL_PROMPT)
        return tok_encode(&r->tok, l->text, l->text_len, true, true, seg, d);
    if (!r->ct_loaded) {
        if ((rc = chat_template_from_gguf(&r->ct, &r->m->gguf, &r->tok, d)) < 0)
            return rc;
        r->ct_loaded = true;
        if (r->ct.guessed)
            runcb_warn(&r->o->cb, "%s", r->ct.note);
    }
    return chat_encode(&r->ct, &r->tok, l->msgs, l->n_msgs, false, seg, d);
}

/* The features the self-distillation's forward passes compute (distill.h's
 * sink), so that its tokens need no second pass: prompt j's rows, prompt
 * and response, from row slot[j] of rows (one allocation for every
 * prompt's rows at most, its pages touched only where a prompt is
 * answered), its first n_fed[j] positions computed.  Without the room for
 * it (rows NULL) the features are computed afterwards, as for text.  rows
 * is an anonymous mapping of rows_bytes whose first rows_gone (whole
 * pages) take_seqs unmaps once no later sequence reads them, so that the
 * rows and the sequences' copies (r->feat) do not both fill memory. */
struct capture {
    const struct run *r;
    struct eagle_capture cap;   /* EAGLE-3: the hooks' rows, [DISTILL_BATCH_TOKENS][3d] */
    struct model_hooks hooks;
    uint16_t *rows;             /* [n_rows][fd] */
    size_t rows_bytes, rows_gone;
    int64_t *slot, *n_fed, *len;        /* [n prompts] */
    bool bad;                   /* a feature outside its store's range: computed again */
};

static int
capture_rows(void *ctx, int64_t tag, int64_t pos0, const float *hidden, int64_t row0, int64_t n)
{
    struct capture *c = ctx;
    const struct run *r = c->r;
    int64_t w = r->fd - r->d;   /* EAGLE-3's 3d layer inputs before the final feature */

    for (int64_t i = 0; i < n && pos0 + i < c->len[tag]; i++) {
        uint16_t *f = c->rows + (c->slot[tag] + pos0 + i) * r->fd;
        const float *h = hidden + (row0 + i) * r->d;
        for (int64_t j = 0; j < w; j++)
            f[j] = feat_enc(r, c->cap.feat3[(row0 + i) * w + j]);
        for (int64_t j = 0; j < r->d; j++)
            f[w + j] = feat_enc(r, h[j]);
        for (int64_t j = 0; j < r->fd; j++)
            c->bad |= !isfinite(feat_dec(r, f[j]));
        if (pos0 + i + 1 > c->n_fed[tag])
            c->n_fed[tag] = pos0 + i + 1;
    }
    return 0;
}

static void
capture_release(struct capture *c)
{
    if (c->rows && c->rows_gone < c->rows_bytes)
        munmap((char *)c->rows + c->rows_gone, c->rows_bytes - c->rows_gone);
    free(c->cap.feat3), free(c->slot), free(c->n_fed), free(c->len);
    memset(c, 0, sizeof *c);
}

/* c set up for the np prompts pr[] and responses of up to gen tokens:
 * false (c empty) when there is no room for it */
static bool
capture_init(struct capture *c, const struct run *r, const struct tok_ids *pr, int64_t np,
             int64_t gen)
{
    int64_t total = 0, w = r->fd - r->d;

    memset(c, 0, sizeof *c);
    c->r = r;
    c->slot = malloc((size_t)(np ? np : 1) * sizeof(int64_t));
    c->n_fed = calloc((size_t)(np ? np : 1), sizeof(int64_t));
    c->len = malloc((size_t)(np ? np : 1) * sizeof(int64_t));
    if (!c->slot || !c->n_fed || !c->len) {
        capture_release(c);
        return false;
    }
    for (int64_t j = 0; j < np; j++) {
        c->slot[j] = total;
        c->len[j] = (int64_t)pr[j].n + gen;
        total += c->len[j];
    }
    if (total > (int64_t)(SIZE_MAX / 4 / sizeof(uint16_t)) / r->fd) {
        capture_release(c);
        return false;
    }
    size_t bytes = (size_t)((total ? total : 1) * r->fd) * sizeof(uint16_t);
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map != MAP_FAILED)
        c->rows = map, c->rows_bytes = bytes;
    if (!c->rows ||
        (w > 0 && !(c->cap.feat3 = malloc((size_t)(DISTILL_BATCH_TOKENS * w) * sizeof(float))))) {
        capture_release(c);
        return false;
    }
    if (w > 0) {
        c->cap = (struct eagle_capture){ r->tgt.c.feat_layer, r->d, c->cap.feat3,
                                         DISTILL_BATCH_TOKENS };
        c->hooks = (struct model_hooks){ eagle_capture_hook, &c->cap, EAGLE_CAPTURE_SITES };
    }
    return true;
}

/* the base model's responses to the prompts among segs[0 .. n) (gen[i]),
 * appended to them (distill.h); with cap, the features computed of each
 * prompt's tokens (capture: its prompts the gen[i] ones, in order) */
static int
self_distill(struct run *r, struct dsrc *src, struct tok_ids *segs, const bool *gen, int64_t n,
             struct capture *cap, struct diag *d)
{
    const struct draft_train_opts *o = r->o;
    bool pinned = r->pinned && !src->eval;
    struct distill_gen g = { o->gen_tokens, o->gen_temp, o->seed, DISTILL_SEQS, o->stop,
                             o->max_time > 0 && !pinned && !src->eval
                                 ? r->t_start + o->gen_share * o->max_time : 0, NULL, NULL, NULL };
    struct tok_ids *pr = malloc((size_t)(n ? n : 1) * sizeof(*pr));
    struct tok_ids *resp = calloc((size_t)(n ? n : 1), sizeof(*resp));
    bool *ans = malloc((size_t)(n ? n : 1) * sizeof(*ans));
    int64_t np = 0, n_gen = 0;
    int rc = 0;

    if (!pr || !resp || !ans) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < n; i++)
        if (gen[i])
            pr[np++] = segs[i];
    if (capture_init(cap, r, pr, np, o->gen_tokens)) {
        g.feat_hooks = cap->cap.feat3 ? &cap->hooks : NULL;
        g.feat_rows = capture_rows;
        g.feat_ctx = cap;
    }
    /* resumed: the prompts the checkpoint's run answered */
    int64_t n_ask = pinned && r->pin_prompts < np ? r->pin_prompts : np;
    char until[96] = "";
    if (g.deadline > 0)
        snprintf(until, sizeof until, "; none started after %.1f s of --max-time (--gen-share "
                 "%g)", g.deadline - r->t_start, o->gen_share);
    runcb_info(&o->cb, "'%s': generating the model's responses to %lld prompts, up to %lld "
               "tokens each (self-distillation%s)", src->name, (long long)n_ask,
               (long long)o->gen_tokens, until);
    double t0 = now_seconds();
    if ((rc = distill_generate(r->m, &r->tok, pr, n_ask, &g, resp, ans, &n_gen, d)) < 0)
        goto out;
    rc = 0;
    for (int64_t j = n_ask; j < np; j++)
        ans[j] = false;
    src->n_prompts = np;
    src->n_generated = n_gen;
    /* n_answered: the prompts up to the last one answered (those too
     * long for the context among them, left out every time) */
    int64_t ctx = distill_ctx(r->m), n_long = 0, first_long = 0;
    for (int64_t j = 0; j < np; j++) {
        if ((int64_t)pr[j].n >= ctx && n_long++ == 0)
            first_long = j;
        else if ((int64_t)pr[j].n >= ctx)
            continue;
        else if (ans[j])
            src->n_answered = j + 1;
        else
            src->gen_cut = true;
    }
    if (n_long)
        runcb_warn(&o->cb, "'%s': %lld prompts have no fewer tokens than the model's context of "
                   "%lld (the first: prompt %lld, %lld tokens): left out", src->name,
                   (long long)n_long, (long long)ctx, (long long)first_long + 1,
                   (long long)pr[first_long].n);
    if (src->gen_cut)
        runcb_info(&o->cb, "'%s': %s: the model's responses to the first %lld of %lld prompts "
                   "(%lld tokens, %.1f s; the others left out)", src->name,
                   pinned ? "--resume" : "--max-time", (long long)src->n_answered, (long long)np,
                   (long long)n_gen, now_seconds() - t0);
    else
        runcb_info(&o->cb, "'%s': %lld prompts, %lld response tokens generated by the model in "
                   "%.1f s (self-distillation)", src->name, (long long)np, (long long)n_gen,
                   now_seconds() - t0);
    /* a prompt left unanswered is left out of the training text */
    for (int64_t i = 0, j = 0; i < n && rc == 0; i++) {
        if (!gen[i])
            continue;
        if (!ans[j])
            tok_ids_release(&segs[i]);
        for (size_t k = 0; k < resp[j].n && rc == 0; k++)
            if (tok_ids_push(&segs[i], resp[j].v[k]) < 0)
                rc = diag_set(d, ST_NOMEM, "out of memory");
        j++;
    }
out:
    for (int64_t j = 0; resp && j < np; j++)
        tok_ids_release(&resp[j]);
    free(pr);
    free(resp);
    free(ans);
    return rc;
}

/* JSON Lines when the first non-blank byte is '{' (distill.h: text,
 * prompts, chats), else plain text.  *use [ids->n] (malloc'd): 1 on a
 * token of a text or of a response, 0 on a prompt's or a chat's own
 * tokens: EAGLE's loss mask, a head row counting when the token it reads
 * is a response's (the mask shifted with the tokens, as the EAGLE-3
 * reference shifts it; the row's targets are the base model's at that
 * token, whatever follows it). */
static int
tokenize_data(struct run *r, struct dsrc *src, const char *buf, size_t len, struct tok_ids *ids,
              uint8_t **use, struct capture *fc, int64_t **crow, struct diag *d)
{
    struct tok_ids *segs = NULL;
    bool *gen = NULL;
    size_t *plen = NULL;        /* a prompt's or a chat's own tokens */
    int64_t n = 0, cap = 0, line = 0, n_gen = 0;
    size_t i = 0;
    int rc = 0;

    *use = NULL;
    *crow = NULL;
    memset(fc, 0, sizeof *fc);
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
        i++;
    if (i >= len || buf[i] != '{') {
        if ((rc = tok_encode(&r->tok, buf, len, false, false, ids, d)) == 0 &&
            !(*use = malloc(ids->n ? ids->n : 1)))
            rc = diag_set(d, ST_NOMEM, "out of memory");
        if (rc == 0)
            memset(*use, 1, ids->n);
    }
    for (size_t p = 0; p < len && i < len && buf[i] == '{';) {
        const char *nl = memchr(buf + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - buf) : len;
        struct distill_line l;
        line++;
        rc = distill_line_parse(buf + p, e - p, &l, d);
        p = e + 1;
        if (rc == 0 && n == cap) {
            int64_t nc = cap ? 2 * cap : 64;
            struct tok_ids *ns = realloc(segs, (size_t)nc * sizeof(*segs));
            bool *ng = ns ? realloc(gen, (size_t)nc * sizeof(*gen)) : NULL;
            size_t *np = ng ? realloc(plen, (size_t)nc * sizeof(*plen)) : NULL;
            if (ns)
                segs = ns;
            if (ng)
                gen = ng;
            if (np)
                plen = np, cap = nc;
            else
                rc = diag_set(d, ST_NOMEM, "out of memory");
        }
        if (rc == 0) {
            memset(&segs[n], 0, sizeof(segs[n]));
            rc = line_tokens(r, &l, &segs[n], &gen[n], d);
            plen[n] = gen[n] ? segs[n].n : 0;
            n_gen += gen[n];
            n++;
        }
        distill_line_release(&l);
        if (rc < 0) {
            diag_prefix(d, "line %lld", (long long)line);
            goto out;
        }
        rc = 0;
    }
    if (rc == 0 && r->o->gen_set && n_gen == 0 && !r->o->eval)  /* (load_eval: either file) */
        rc = diag_set(d, ST_RANGE, "--gen-tokens and --gen-temp need \"prompt\" or "
                      "\"messages\" lines");
    if (rc == 0 && r->o->gen_share_set && n_gen == 0 && !src->eval)
        rc = diag_set(d, ST_RANGE, "--gen-share needs \"prompt\" or \"messages\" lines");
    if (rc == 0 && n_gen > 0)
        rc = self_distill(r, src, segs, gen, n, fc, d);
    size_t total = 0;
    for (int64_t k = 0; k < n; k++)
        total += segs[k].n;
    if (rc == 0 && n > 0 && !(*use = malloc(total ? total : 1)))
        rc = diag_set(d, ST_NOMEM, "out of memory");
    /* each token's captured row, or -1 (text, a token not computed) */
    if (rc == 0 && fc->rows && !fc->bad && !(*crow = malloc((total ? total : 1) *
                                                               sizeof(int64_t))))
        rc = diag_set(d, ST_NOMEM, "out of memory");
    for (int64_t k = 0, j = 0; k < n && rc == 0; j += gen[k], k++)
        for (size_t t = 0; t < segs[k].n && rc == 0; t++) {
            (*use)[ids->n] = t >= plen[k];
            if (*crow)
                (*crow)[ids->n] = gen[k] && (int64_t)t < fc->n_fed[j] ? fc->slot[j] + (int64_t)t
                                                                       : -1;
            if (tok_ids_push(ids, segs[k].v[t]) < 0)
                rc = diag_set(d, ST_NOMEM, "out of memory");
        }
out:
    for (int64_t k = 0; k < n; k++)
        tok_ids_release(&segs[k]);
    free(segs);
    free(gen);
    free(plen);
    if (rc < 0) {
        free(*use);
        *use = NULL;
    }
    if (rc < 0 || !*crow) {
        free(*crow);
        *crow = NULL;
        capture_release(fc);
    }
    return rc;
}

/* the order of the data's n sequences in training (the held-out slice is
 * the last ones) and in feature extraction (--max-time keeps the first
 * ones): the bit-reversed indices below n, so that the first k of them, for
 * any k, spread over the whole data */
static void
spread_order(int64_t n, int64_t *out)
{
    int bits = 0;
    int64_t k = 0;

    while (((int64_t)1 << bits) < n)
        bits++;
    for (int64_t j = 0; j < (int64_t)1 << bits; j++) {
        int64_t v = 0;
        for (int b = 0; b < bits; b++)
            v |= (j >> b & 1) << (bits - 1 - b);
        if (v < n)
            out[k++] = v;
    }
}

/* src's file read and tokenized into ids (the model's responses to its
 * prompts appended), *use, cap and *crow (tokenize_data); raw_sha: the
 * SHA-256 of its bytes */
static int
read_src(struct run *r, struct dsrc *src, struct tok_ids *ids, uint8_t **use,
         struct capture *cap, int64_t **crow, char raw_sha[65], struct diag *d)
{
    char *buf;
    size_t len;
    int rc;

    *crow = NULL;
    memset(cap, 0, sizeof *cap);
    if ((rc = read_file_all(src->name, DATA_MAX, &buf, &len, d)) < 0) {
        diag_prefix(d, "%s'%s'", src->eval ? "--eval " : "", src->name);
        return rc;
    }
    if ((rc = quantize_sha256_hex(buf, len, raw_sha)) == 0)
        rc = tokenize_data(r, src, buf, len, ids, use, cap, crow, d);
    free(buf);
    if (rc < 0) {
        tok_ids_release(ids);
        diag_prefix(d, "%s'%s'", src->eval ? "--eval " : "", src->name);
    }
    return rc;
}

/* whether row i of the data's (seq_tok's [n_seq][S]) trains: counted by
 * the loss mask, or every row with --train-on-prompts */
static int
row_trains(const struct run *r, int64_t i)
{
    return r->mask[i] | r->o->train_prompts;
}

/* the sequences ids[order[j] * S ..][S + 1] (j < n) with a row counted in
 * the loss, or all of them (all: --train-on-prompts' training data; a
 * sequence without one has nothing to train or to measure otherwise) into
 * seq_tok and mask from sequence at on, in that order, and with crow (each
 * token's row of cap, or -1) the features of those whose tokens were all
 * computed into feat (have); their number, or -1 out of memory; *counted
 * += their rows counted.  The features are copied in the text's order, in
 * which a token's row only grows (cap's rows are the prompts' in turn), so
 * that the rows no later sequence reads are given back as it goes. */
static int64_t
take_seqs(struct run *r, const struct tok_ids *ids, const uint8_t *use, struct capture *cap,
          const int64_t *crow, const int64_t *order, int64_t n, int64_t at, bool all,
          int64_t *counted)
{
    int64_t k = 0, S1 = r->S + 1;
    int64_t *dest = malloc((size_t)(n ? n : 1) * sizeof(int64_t));    /* of sequence o, or -1 */
    if (!dest)
        return -1;
    for (int64_t j = 0; j < n; j++) {
        int64_t o = order ? order[j] : j, c = 0;
        const uint8_t *u = use + o * r->S + 1;  /* row i reads token i + 1 */
        for (int64_t i = 0; i < r->S; i++)
            c += u[i];
        dest[o] = -1;
        if (c == 0 && !all)
            continue;
        memcpy(r->seq_tok + (at + k) * (r->S + 1), ids->v + o * r->S,
               (size_t)(r->S + 1) * sizeof(int32_t));
        memcpy(r->mask + (at + k) * r->S, u, (size_t)r->S);
        r->have[at + k] = false;
        *counted += c;
        dest[o] = at + k++;
    }
    const long pg = sysconf(_SC_PAGESIZE);
    for (int64_t o = 0, next = 0; crow && o < n; o++) {
        const int64_t *cr = crow + o * r->S;
        bool got = dest[o] >= 0;
        for (int64_t i = 0; got && i < S1; i++)
            got = cr[i] >= 0;
        for (int64_t i = 0; got && i < S1; i++)
            memcpy(r->feat + (dest[o] * S1 + i) * r->fd, cap->rows + cr[i] * r->fd,
                   (size_t)r->fd * sizeof(uint16_t));
        if (dest[o] >= 0)
            r->have[dest[o]] = got;
        /* the later sequences read the rows from the first computed token
         * of the next one's on: the whole pages before it go */
        if (next < (o + 1) * r->S)
            next = (o + 1) * r->S;
        while (next < (int64_t)ids->n && crow[next] < 0)
            next++;
        size_t keep = next < (int64_t)ids->n ? (size_t)(crow[next] * r->fd) * sizeof(uint16_t)
                                             : cap->rows_bytes;
        keep -= pg > 0 ? keep % (size_t)pg : keep;
        if (pg > 0 && keep > cap->rows_gone &&
            munmap((char *)cap->rows + cap->rows_gone, keep - cap->rows_gone) == 0)
            cap->rows_gone = keep;
    }
    free(dest);
    return k;
}

/* r->feat and r->have with room for n sequences */
static int
feat_room(struct run *r, int64_t n, struct diag *d)
{
    int64_t rows = n * (r->S + 1) * r->fd;
    uint16_t *f = realloc(r->feat, (size_t)rows * sizeof(uint16_t));
    if (f)
        r->feat = f;
    uint8_t *h = f ? realloc(r->have, (size_t)n) : NULL;
    if (h)
        r->have = h;
    if (!f || !h)
        return diag_set(d, ST_NOMEM, "out of memory for the features (%lld MiB)",
                        (long long)((rows * 2) >> 20));
    return 0;
}

static int
load_data(struct run *r, struct diag *d)
{
    const struct draft_train_opts *o = r->o;
    struct tok_ids ids = { 0 };
    struct capture cap;
    int64_t *crow = NULL;
    uint8_t *use = NULL;
    int rc;

    r->data.name = o->data;
    if ((rc = read_src(r, &r->data, &ids, &use, &cap, &crow, r->data_sha, d)) < 0)
        return rc;
    memcpy(r->data_raw, r->data_sha, sizeof r->data_raw);
    if (r->data.n_prompts > 0) {
        /* the features' key: the prompts and how the responses were made */
        char key[160];
        snprintf(key, sizeof key, "%s distill %lld %.9g %llu", r->data_sha,
                 (long long)o->gen_tokens, (double)o->gen_temp, (unsigned long long)o->seed);
        if (r->data.n_answered < r->data.n_prompts)   /* the first n_answered prompts' responses */
            snprintf(key + strlen(key), sizeof key - strlen(key), " first %lld",
                     (long long)r->data.n_answered);
        if (quantize_sha256_hex(key, strlen(key), r->data_sha) < 0) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
    }
    if (o->train_prompts && r->data.n_prompts == 0) {
        rc = diag_set(d, ST_RANGE, "'%s': --train-on-prompts needs \"prompt\" or \"messages\" "
                      "lines", o->data);
        goto out;
    }
    r->n_tok = (int64_t)ids.n;
    r->n_seq = ids.n > 0 ? ((int64_t)ids.n - 1) / r->S : 0;
    if (r->n_seq < 2) {
        rc = diag_set(d, ST_RANGE, "'%s': %lld tokens: need at least 2 sequences of %lld + 1 "
                      "(--seq-len)%s", o->data, (long long)r->n_tok, (long long)r->S,
                      r->data.gen_cut ? "; --max-time left the self-distillation "
                      "too little time" : "");
        goto out;
    }
    int64_t *order = malloc((size_t)r->n_seq * sizeof(int64_t));
    if (!order || !(r->seq_tok = malloc((size_t)(r->n_seq * (r->S + 1)) * sizeof(int32_t))) ||
        !(r->mask = malloc((size_t)(r->n_seq * r->S)))) {
        free(order);
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = feat_room(r, r->n_seq, d)) < 0) {
        free(order);
        goto out;
    }
    spread_order(r->n_seq, order);
    int64_t counted = 0;
    r->n_seq = take_seqs(r, &ids, use, &cap, crow, order, r->n_seq, 0, o->train_prompts,
                         &counted);
    if (r->n_seq < 0) {
        r->n_seq = 0;
        free(order);
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    r->n_no_resp = (int64_t)(ids.n - 1) / r->S - r->n_seq;
    r->mask_frac = (double)counted / (double)((r->n_seq + r->n_no_resp) * r->S);
    free(order);
    free(use);
    free(crow);
    capture_release(&cap);
    tok_ids_release(&ids);
    if (counted == 0 && !o->train_prompts)
        return diag_set(d, ST_RANGE, "'%s': no position to train on: the loss counts the "
                        "responses' tokens, and no sequence of --seq-len holds one", o->data);
    if (r->n_seq < 2)
        return diag_set(d, ST_RANGE, "'%s': one sequence of %lld + 1 tokens (--seq-len) holds "
                        "positions of a response: need at least 2", o->data, (long long)r->S);
    r->n_hold = r->n_seq / 20 > 0 ? r->n_seq / 20 : 1;
    return 0;
out:
    free(use);
    free(crow);
    capture_release(&cap);
    tok_ids_release(&ids);
    return rc;
}

/* --eval: its text (its prompts answered by the model, as --data's are,
 * all of them: the time it takes, r->t_eval, is outside --max-time's
 * budget) cut into sequences as the data is, in its order, put after the
 * data's in seq_tok (r->n_ev of them: eval_features() makes them the
 * held-out slice) */
static int
load_eval(struct run *r, struct diag *d)
{
    struct dsrc ev = { r->o->eval, true, 0, 0, 0, false };
    struct tok_ids ids = { 0 };
    struct capture cap;
    int64_t *crow = NULL;
    uint8_t *use = NULL;
    char sha[65];
    int rc;

    if (!ev.name)
        return 0;
    double t0 = now_seconds();
    if ((rc = read_src(r, &ev, &ids, &use, &cap, &crow, sha, d)) < 0)
        return rc;
    if (r->o->gen_set && r->data.n_prompts == 0 && ev.n_prompts == 0) {
        rc = diag_set(d, ST_RANGE, "'%s', '%s': --gen-tokens and --gen-temp need \"prompt\" "
                      "or \"messages\" lines", r->o->data, ev.name);
        goto out;
    }
    int64_t n = ids.n > 0 ? ((int64_t)ids.n - 1) / r->S : 0;
    if (n < 1) {
        rc = diag_set(d, ST_RANGE, "--eval '%s': %lld tokens: need at least one sequence of "
                      "%lld + 1 (--seq-len)", ev.name, (long long)ids.n, (long long)r->S);
        goto out;
    }
    if (strcmp(sha, r->data_raw) == 0)
        runcb_warn(&r->o->cb, "--eval '%s': the same text as --data: the held-out figures are "
                   "of text trained on", ev.name);
    int32_t *st = realloc(r->seq_tok, (size_t)((r->n_seq + n) * (r->S + 1)) * sizeof(int32_t));
    if (st)
        r->seq_tok = st;
    uint8_t *mk = st ? realloc(r->mask, (size_t)((r->n_seq + n) * r->S)) : NULL;
    if (mk)
        r->mask = mk;
    if (!st || !mk) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = feat_room(r, r->n_seq + n, d)) < 0)
        goto out;
    int64_t counted = 0;
    if ((r->n_ev = take_seqs(r, &ids, use, &cap, crow, NULL, n, r->n_seq, false,
                             &counted)) < 0) {
        r->n_ev = 0;
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    tok_ids_release(&ids);
    free(use);
    free(crow);
    capture_release(&cap);
    if (r->n_ev == 0)
        return diag_set(d, ST_RANGE, "--eval '%s': no position to measure: the loss counts the "
                        "responses' tokens, and no sequence of --seq-len holds one", ev.name);
    r->t_eval += now_seconds() - t0;
    return 0;
out:
    tok_ids_release(&ids);
    free(use);
    free(crow);
    capture_release(&cap);
    return rc;
}

/* ---- features and their cache ---- */

#define CACHE_MAGIC "LLMKFEAT"
#define CACHE_VERSION 6u        /* 2: sequences in spread_order, a prefix of them;
                                   3: the zstd frame carries its content checksum;
                                   4: without the sequences of no row counted;
                                   5: a row counted when the token it reads is a
                                      response's; --train-on-prompts' entries apart;
                                   6: the features of answered prompts those of the
                                      passes that answered them (struct capture) */
#define CACHE_HDR 32            /* magic, u32 version, u32 d, u64 n_seq (in the entry), u64 seq_len */

#ifdef LLMKIT_HAVE_ZSTD
/* an entry's bytes before compression: the tokens of its n sequences,
 * then their features */
static size_t
feat_raw_bytes(const struct run *r, int64_t n)
{
    return (size_t)(n * (r->S + 1)) * (sizeof(int32_t) + (size_t)r->fd * sizeof(uint16_t));
}

static char *
cache_path(const struct run *r)
{
    char key[256], sha[65], *p;
    /* (--train-on-prompts keeps other sequences and counts another draft
     * vocabulary: the loss mask's entry, named after this one, differs) */
    snprintf(key, sizeof key, "eagle%d-features v%u %s %s %lld%s%s", r->o->arch, CACHE_VERSION,
             r->base_sha, r->data_sha, (long long)r->S, r->feat_bf16 ? " bf16" : "",
             r->o->train_prompts ? " all" : "");
    if (quantize_sha256_hex(key, strlen(key), sha) < 0)
        return NULL;
    size_t n = strlen(r->o->cache_dir) + 64;
    if (!(p = malloc(n)))
        return NULL;
    snprintf(p, n, "%s/%.32s.eaglefeat.zst", r->o->cache_dir, sha);
    return p;
}

/* path, an entry of --cache (what: "feature cache" ...), before it is read
 * (then: "recomputing") or written ("written again"): 1 when it is a regular
 * file, 0 when there is none.  An entry that is something else (a symbolic
 * link, a FIFO, a device node) is neither followed nor opened: a FIFO would
 * block, and a link would have the entry written through it to whatever it
 * names; it is removed, with a warning, and 0.  A directory, or an entry
 * that cannot be removed, is -ST_IO naming it, before any work is done. */
static int
cache_entry(struct run *r, const char *path, const char *what, const char *then,
            struct diag *d)
{
    struct stat st;

    if (lstat(path, &st) < 0)   /* none (else the write names the problem) */
        return 0;
    if (S_ISREG(st.st_mode))
        return 1;
    if (S_ISDIR(st.st_mode))
        return diag_set(d, ST_IO, "%s '%s': is a directory", what, path);
    if (unlink(path) < 0)
        return diag_set(d, ST_IO, "%s '%s': not a regular file, and cannot be removed: %s",
                        what, path, strerror(errno));
    runcb_warn(&r->o->cb, "%s '%s': not a regular file; removed, %s", what, path, then);
    return 0;
}

/* The entry holds the features of the first n sequences (spread_order; a
 * run cut by --max-time writes the ones it had, and the next run goes on
 * from them).  Returns how many of the first want sequences it gave (0: no
 * usable entry; a warning says why when one exists but is bad), or < 0. */
static int64_t
cache_read(struct run *r, const char *path, int64_t want, struct diag *d)
{
    char *buf;
    size_t len;
    struct diag dd;
    int rc;

    if ((rc = cache_entry(r, path, "feature cache", "recomputing", d)) <= 0)
        return rc;
    if ((rc = read_file_all(path, feat_raw_bytes(r, r->n_seq) * 3 / 2 + 4096, &buf, &len,
                            &dd)) < 0) {
        runcb_warn(&r->o->cb, "feature cache '%s': %s; recomputing", path, dd.msg);
        return 0;
    }
    uint32_t ver, dim;
    uint64_t n_seq, S;
    if (len < CACHE_HDR || memcmp(buf, CACHE_MAGIC, 8) != 0)
        goto bad;
    memcpy(&ver, buf + 8, 4), memcpy(&dim, buf + 12, 4);
    memcpy(&n_seq, buf + 16, 8), memcpy(&S, buf + 24, 8);
    if (ver != CACHE_VERSION || dim != (uint32_t)r->fd || n_seq < 1 ||
        n_seq > (uint64_t)r->n_seq || S != (uint64_t)r->S)
        goto bad;
    int64_t c = (int64_t)n_seq, m = c < want ? c : want;
    size_t raw = feat_raw_bytes(r, c);
    /* the frame's descriptor (RFC 8878, after the 4-byte magic): bit 2,
     * Content_Checksum_flag, must be set */
    unsigned long long fs = ZSTD_getFrameContentSize(buf + CACHE_HDR, len - CACHE_HDR);
    if (fs != raw || len < CACHE_HDR + 5 || !((uint8_t)buf[CACHE_HDR + 4] & 4))
        goto bad;
    uint8_t *out = malloc(raw);
    if (!out) {
        free(buf);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    size_t got = ZSTD_decompress(out, raw, buf + CACHE_HDR, len - CACHE_HDR);
    free(buf);
    size_t nt = (size_t)(c * (r->S + 1)) * sizeof(int32_t);
    size_t nf = (size_t)(m * (r->S + 1) * r->fd);
    if (ZSTD_isError(got) || got != raw ||
        memcmp(out, r->seq_tok, (size_t)(m * (r->S + 1)) * sizeof(int32_t)) != 0) {
        free(out);
        runcb_warn(&r->o->cb, "feature cache '%s': corrupt or not for this data; recomputing",
                   path);
        return 0;
    }
    memcpy(r->feat, out + nt, nf * sizeof(uint16_t));
    free(out);
    for (size_t i = 0; i < nf; i++) {
        float f = feat_dec(r, r->feat[i]);
        if (!isfinite(f)) {
            runcb_warn(&r->o->cb, "feature cache '%s': non-finite feature; recomputing", path);
            return 0;
        }
    }
    return m;
bad:
    free(buf);
    runcb_warn(&r->o->cb, "feature cache '%s': not a feature cache of this run; recomputing",
               path);
    return 0;
}

/* the entry of the first n sequences' features */
static int
cache_write(struct run *r, const char *path, int64_t n, struct diag *d)
{
    size_t raw = feat_raw_bytes(r, n), nt = (size_t)(n * (r->S + 1)) * sizeof(int32_t);
    uint8_t *src = malloc(raw);
    size_t cap = CACHE_HDR + ZSTD_compressBound(raw);
    uint8_t *dst = malloc(cap);
    int rc;

    if (!src || !dst) {
        free(src), free(dst);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    memcpy(src, r->seq_tok, nt);
    memcpy(src + nt, r->feat, raw - nt);
    uint32_t ver = CACHE_VERSION, dim = (uint32_t)r->fd;
    uint64_t n_seq = (uint64_t)n, S = (uint64_t)r->S;
    memcpy(dst, CACHE_MAGIC, 8), memcpy(dst + 8, &ver, 4), memcpy(dst + 12, &dim, 4);
    memcpy(dst + 16, &n_seq, 8), memcpy(dst + 24, &S, 8);
    /* with the content checksum, which ZSTD_decompress checks: a byte
     * changed inside the frame is caught, not trained on */
    ZSTD_CCtx *zc = ZSTD_createCCtx();
    size_t z = 0;
    bool zok = zc && !ZSTD_isError(ZSTD_CCtx_setParameter(zc, ZSTD_c_compressionLevel, 3)) &&
               !ZSTD_isError(ZSTD_CCtx_setParameter(zc, ZSTD_c_checksumFlag, 1)) &&
               !ZSTD_isError(z = ZSTD_compress2(zc, dst + CACHE_HDR, cap - CACHE_HDR, src, raw));
    ZSTD_freeCCtx(zc);
    free(src);
    if (!zok) {
        free(dst);
        return diag_set(d, ST_NOMEM, "feature cache: zstd: %s",
                        z && ZSTD_isError(z) ? ZSTD_getErrorName(z) : "out of memory");
    }
    if ((rc = cache_entry(r, path, "feature cache", "written again", d)) >= 0)
        rc = write_file_atomic(path, dst, CACHE_HDR + z, true, d);
    free(dst);
    if (rc < 0)
        diag_prefix(d, "feature cache '%s'", path);
    return rc;
}

/* --cache's directory, made when missing */
static int
cache_mkdir(const struct run *r, struct diag *d)
{
    if (mkdir(r->o->cache_dir, 0777) < 0 && errno != EEXIST)
        return diag_set(d, ST_IO, "--cache: cannot create '%s': %s", r->o->cache_dir,
                        strerror(errno));
    return 0;
}

/* cache_write() into --cache, made when missing */
static int
cache_put(struct run *r, const char *path, int64_t n, struct diag *d)
{
    int rc = cache_mkdir(r, d);

    return rc < 0 ? rc : cache_write(r, path, n, d);
}

/* The loss mask's entry beside the features' (keep, draft_keep): magic,
 * u64 n_seq, S and draft vocabulary size, the SHA-256 (64 hex digits) of
 * all after the header, that of the draft vocabulary's token ids; then
 * per sequence the SHA-256 of what its rows are taken from, its final
 * features (positions 1 .. S, as feat stores them), and keep's n_seq * S
 * bytes.  A sequence whose hash is 64 zeros has no rows (a run
 * interrupted before it).  The key names the data and options, not the
 * answers to its prompts (on which the features of a sequence of them
 * depend, through all before it) or the draft vocabulary counted from them:
 * a run whose answers or vocabulary differ (--max-time answering fewer,
 * another machine's greedy tokens) takes the rows of the sequences whose
 * features are the entry's and computes the others. */
#define KEEP_MAGIC "LLMKKEP4"     /* 4: each sequence's features and the draft vocabulary checked */
#define KEEP_HDR 160
#define KEEP_SEQ 64               /* a sequence's hash, before the rows */

static char *
keep_path(const struct run *r)
{
    char *f = cache_path(r), *p = NULL;
    size_t n;
    if (f && (p = malloc((n = strlen(f) + 40))))
        snprintf(p, n, "%.*s.%lld.eaglekeep", (int)(strlen(f) - strlen(".eaglefeat.zst")), f,
                 (long long)r->fz.n_lm);
    free(f);
    return p;
}

/* the SHA-256 of sequence s's final features, those its loss mask rows
 * are computed from (p and n: room for S pointers and sizes) */
static int
keep_seq_sha(const struct run *r, int64_t s, const void **p, size_t *n, char out[65])
{
    for (int64_t i = 0; i < r->S; i++) {
        p[i] = r->feat + (s * (r->S + 1) + i + 1) * r->fd + (r->fd - r->d);
        n[i] = (size_t)r->d * sizeof(uint16_t);
    }
    return quantize_sha256_hexv(p, n, (int)r->S, out);
}

/* the rows of r->keep an entry gives, of the data's sequences (n_seq -
 * n_ev) whose features are the entry's: got[s] set; their number (0 when
 * none, a bad entry: a warning); < 0 (cache_entry, out of memory) */
static int64_t
keep_read(struct run *r, const char *path, uint8_t *got, struct diag *d)
{
    size_t len;
    uint64_t h[3];
    char *buf, sha[65];
    struct diag dd;
    int rc;

    if ((rc = cache_entry(r, path, "loss mask cache", "recomputing", d)) <= 0)
        return rc;
    if (read_file_all(path, KEEP_HDR + (size_t)(r->n_seq_data * (KEEP_SEQ + r->S)), &buf, &len,
                      &dd) < 0) {
        runcb_warn(&r->o->cb, "loss mask cache '%s': %s; recomputing", path, dd.msg);
        return 0;
    }
    bool ok = len >= KEEP_HDR && memcmp(buf, KEEP_MAGIC, 8) == 0;
    if (ok) {
        memcpy(h, buf + 8, sizeof h);
        ok = h[0] >= 1 && h[0] <= (uint64_t)r->n_seq_data && h[1] == (uint64_t)r->S &&
             h[2] == (uint64_t)r->fz.n_lm && len == KEEP_HDR + h[0] * (KEEP_SEQ + h[1]) &&
             quantize_sha256_hex(buf + KEEP_HDR, len - KEEP_HDR, sha) == 0 &&
             memcmp(buf + 32, sha, 64) == 0 &&
             quantize_sha256_hex(r->lm_ids, (size_t)r->fz.n_lm * sizeof(int32_t), sha) == 0 &&
             memcmp(buf + 96, sha, 64) == 0;
    }
    int64_t nd = r->n_seq - r->n_ev;    /* the data's rows (--eval's are never cached) */
    int64_t top = !ok ? 0 : (int64_t)h[0] < nd ? (int64_t)h[0] : nd, m = 0;
    const char *rows = buf + KEEP_HDR + (ok ? h[0] : 0) * KEEP_SEQ;
    for (size_t i = 0; ok && i < (size_t)(top * r->S); i++)
        ok = (uint8_t)rows[i] <= 1;
    const void **p = malloc((size_t)r->S * sizeof *p);
    size_t *n = malloc((size_t)r->S * sizeof *n);
    int64_t other = 0;  /* sequences of the entry's whose features are not this run's */
    for (int64_t s = 0; ok && p && n && s < top; s++) {
        const char *e = buf + KEEP_HDR + s * KEEP_SEQ;
        int z = 0;
        while (z < KEEP_SEQ && e[z] == '0')
            z++;
        if (z == KEEP_SEQ)      /* no rows */
            continue;
        if (keep_seq_sha(r, s, p, n, sha) == 0 && memcmp(e, sha, 64) == 0) {
            memcpy(r->keep + s * r->S, rows + s * r->S, (size_t)r->S);
            got[s] = 1, m++;
        } else {
            other++;
        }
    }
    free(buf);
    if (ok && (!p || !n)) {
        free(p), free(n);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    free(p), free(n);
    if (!ok || m == 0)
        runcb_warn(&r->o->cb, "loss mask cache '%s': not one of this run; recomputing", path);
    else if (other > 0)
        runcb_warn(&r->o->cb, "loss mask cache '%s': %lld of its sequences' features are not "
                   "this run's; recomputing those", path, (long long)other);
    return ok ? m : 0;
}

/* the entry of the data's sequences (n_seq - n_ev), those without
 * done[s] as no rows */
static int
keep_write(struct run *r, const char *path, const uint8_t *done, struct diag *d)
{
    int64_t nd = r->n_seq - r->n_ev;
    size_t n = (size_t)(nd * r->S), nh = (size_t)nd * KEEP_SEQ;
    uint64_t h[3] = { (uint64_t)nd, (uint64_t)r->S, (uint64_t)r->fz.n_lm };
    uint8_t *b = malloc(KEEP_HDR + nh + n);
    const void **p = malloc((size_t)r->S * sizeof *p);
    size_t *ns = malloc((size_t)r->S * sizeof *ns);
    char sha[65];
    int rc = 0;

    if (!b || !p || !ns) {
        free(b), free(p), free(ns);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    if ((rc = cache_mkdir(r, d)) < 0) {
        free(b), free(p), free(ns);
        return rc;
    }
    memcpy(b, KEEP_MAGIC, 8);
    memcpy(b + 8, h, sizeof h);
    for (int64_t s = 0; s < nd && rc == 0; s++) {
        uint8_t *e = b + KEEP_HDR + s * KEEP_SEQ, *row = b + KEEP_HDR + nh + s * r->S;
        if (!done[s]) {
            memset(e, '0', KEEP_SEQ), memset(row, 0, (size_t)r->S);
        } else if ((rc = keep_seq_sha(r, s, p, ns, sha)) == 0) {
            memcpy(e, sha, KEEP_SEQ);
            memcpy(row, r->keep + s * r->S, (size_t)r->S);
        }
    }
    free(p), free(ns);
    if (rc == 0 && (rc = quantize_sha256_hex(b + KEEP_HDR, nh + n, sha)) == 0)
        memcpy(b + 32, sha, 64);
    if (rc == 0 && (rc = quantize_sha256_hex(r->lm_ids, (size_t)r->fz.n_lm * sizeof(int32_t),
                                             sha)) == 0)
        memcpy(b + 96, sha, 64);
    if (rc < 0) {
        free(b);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    if ((rc = cache_entry(r, path, "loss mask cache", "written again", d)) >= 0)
        rc = write_file_atomic(path, b, KEEP_HDR + nh + n, true, d);
    free(b);
    if (rc < 0)
        diag_prefix(d, "loss mask cache '%s'", path);
    return rc;
}
#endif

/* sequence s's features through the base model into r->feat (row s);
 * errors name it as sequence ix (of the data, or of --eval's) */
static int
seq_compute(struct run *r, int64_t s, int64_t ix, struct diag *d)
{
    const int32_t *st = r->seq_tok + s * (r->S + 1);
    int rc = r->fin ? eagle_target_features3(&r->tgt, st, r->S + 1, r->f32, r->fin, d)
                    : eagle_target_features(&r->tgt, st, r->S + 1, r->f32, d);
    if (rc < 0)
        return rc;
    /* a position's row: its features, then (EAGLE-3) its final feature */
    uint16_t *f = r->feat + s * (r->S + 1) * r->fd;
    int64_t w = r->fin ? 3 * r->d : r->d;
    for (int64_t i = 0; i <= r->S; i++) {
        for (int64_t j = 0; j < w; j++)
            f[i * r->fd + j] = feat_enc(r, r->f32[i * w + j]);
        for (int64_t j = w; j < r->fd; j++)
            f[i * r->fd + j] = feat_enc(r, r->fin[i * r->d + j - w]);
    }
    for (int64_t j = 0; j < (r->S + 1) * r->fd; j++)
        if (!isfinite(feat_dec(r, f[j])))
            return diag_set(d, ST_RANGE, "sequence %lld: a feature outside the range of its %s "
                            "store", (long long)ix, r->feat_bf16 ? "bf16" : "f16");
    return 0;
}

/* The features of the first sequences (spread_order): all of them; with
 * --max-time as many as are done at gen_share + PREP_FEAT of the budget
 * (at least 2: one to train on, one held out); resumed, as many as the
 * checkpoint's run had.  With --cache, those of an entry first, and the
 * entry then holds every one this run has (so that runs cut short add up)
 * when it computed some.  r->n_seq becomes their number; *hit when they
 * all came from the cache. */
static int
features(struct run *r, bool *hit, struct diag *d)
{
    const struct draft_train_opts *o = r->o;
    double deadline = o->max_time > 0 && !r->pinned
                          ? r->t_start + r->t_eval + (o->gen_share + PREP_FEAT) * o->max_time : 0;
    int64_t want = r->pinned && r->pin_seqs < r->n_seq ? r->pin_seqs : r->n_seq, done = 0, s;
    char *path = NULL;
    int rc;

    *hit = false;
    r->n_seq_data = r->n_seq;   /* (feat has room for --eval's after: load_eval) */
    if (o->cache_dir) {
#ifdef LLMKIT_HAVE_ZSTD
        if (!(path = cache_path(r)))
            return diag_set(d, ST_NOMEM, "out of memory");
        if ((done = cache_read(r, path, want, d)) < 0) {
            free(path);
            return (int)done;
        }
#else
        return diag_set(d, ST_RANGE, "--cache: built without zstd");
#endif
    }
    int64_t cached = done, computed = 0;
    bool stopped = false;
    for (s = done; s < want; s++) {
        if (r->have[s])         /* computed while answering */
            continue;
        if (deadline > 0 && s >= 2 && now_seconds() >= deadline)
            break;
        computed++;
        runcb_progress(&o->cb, "features", s, want);
        if ((rc = seq_compute(r, s, s, d)) < 0) {
            free(path);
            return rc;
        }
        if (o->stop && *o->stop) {
            s++;
            stopped = true;
            break;
        }
    }
    done = s;
    if (stopped) {      /* the sequences done are kept for the next run */
        rc = 0;
#ifdef LLMKIT_HAVE_ZSTD
        if (path && done > cached)
            rc = cache_put(r, path, done, d);
#endif
        if (rc == 0 && path && done > cached)
            rc = diag_set(d, ST_FAIL, "'%s': interrupted during the features, after %lld of "
                          "%lld sequences (cached in '%s')", o->data, (long long)done,
                          (long long)want, path);
        else if (rc == 0)
            rc = diag_set(d, ST_FAIL, "'%s': interrupted during the features, after %lld of "
                          "%lld sequences", o->data, (long long)done, (long long)want);
        free(path);
        return rc;
    }
    runcb_progress(&o->cb, "features", done, want);
    *hit = done == cached;
    if (r->data.n_prompts > 0) {
        char from[64] = "";
        if (cached)
            snprintf(from, sizeof from, ", %lld from the cache", (long long)cached);
        runcb_info(&o->cb, "'%s': the features of %lld sequences taken from the passes that "
                   "answered its prompts, %lld computed%s", o->data,
                   (long long)(done - cached - computed), (long long)computed, from);
    }
    if (done < r->n_seq)
        runcb_info(&o->cb, "'%s': %s: the features of the first %lld of the data's %lld sequences "
                   "(spread over it; %lld from the cache)", o->data,
                   r->pinned ? "--resume" : "--max-time", (long long)done, (long long)r->n_seq,
                   (long long)cached);
    r->n_seq = done;
    r->n_hold = done / 20 > 0 ? done / 20 : 1;
    rc = 0;
#ifdef LLMKIT_HAVE_ZSTD
    /* an entry of nothing but features taken while answering would save a
     * later run nothing: it answers the prompts again (its tokens are
     * checked against the entry's) and takes them again */
    if (path && done > cached && computed > 0)
        rc = cache_put(r, path, done, d);
#endif
    free(path);
    return rc;
}

/* --eval: its r->n_ev sequences (after the data's n_seq_data in seq_tok)
 * moved after the data's sequences with features (r->n_seq), their features
 * computed (never cached: the cache holds the data's), and made the
 * held-out slice: every data sequence with features then trains */
static int
eval_features(struct run *r, struct diag *d)
{
    int64_t S1 = r->S + 1;
    int rc;

    if (!r->n_ev)
        return 0;
    double t0 = now_seconds();
    memmove(r->seq_tok + r->n_seq * S1, r->seq_tok + r->n_seq_data * S1,
            (size_t)(r->n_ev * S1) * sizeof(int32_t));
    memmove(r->mask + r->n_seq * r->S, r->mask + r->n_seq_data * r->S, (size_t)(r->n_ev * r->S));
    memmove(r->feat + r->n_seq * S1 * r->fd, r->feat + r->n_seq_data * S1 * r->fd,
            (size_t)(r->n_ev * S1 * r->fd) * sizeof(uint16_t));
    memmove(r->have + r->n_seq, r->have + r->n_seq_data, (size_t)r->n_ev);
    for (int64_t e = 0; e < r->n_ev; e++) {
        if (r->have[r->n_seq + e])
            continue;
        runcb_progress(&r->o->cb, "held-out features", e, r->n_ev);
        if ((rc = seq_compute(r, r->n_seq + e, e, d)) < 0) {
            diag_prefix(d, "--eval '%s'", r->o->eval);
            return rc;
        }
        if (r->o->stop && *r->o->stop)
            return diag_set(d, ST_FAIL, "--eval '%s': interrupted during its features",
                            r->o->eval);
    }
    runcb_progress(&r->o->cb, "held-out features", r->n_ev, r->n_ev);
    r->n_seq += r->n_ev;
    r->n_hold = r->n_ev;
    r->t_eval += now_seconds() - t0;
    return 0;
}

/* ---- the CE's vocabulary ---- */

static int
int32_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int
by_count(const void *a, const void *b, void *ctx)
{
    const int64_t *cnt = ctx;
    int64_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (cnt[x] != cnt[y])
        return cnt[x] > cnt[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* r->fz: the full LM head, or the rows of the draft_vocab most frequent
 * tokens of the data's rows counted in the loss (the responses' tokens with
 * prompts; ties: lower id first), in id order */
static int
draft_vocab(struct run *r, struct diag *d)
{
    int64_t V = r->tgt.c.n_vocab, n = r->o->draft_vocab;
    r->fz = r->tgt.fz;
    if (n <= 0 || n >= V)
        return 0;
    int64_t *cnt = calloc((size_t)V, sizeof *cnt);
    int32_t *ids = malloc((size_t)V * sizeof *ids);
    if (!cnt || !ids || !(r->lm_red = malloc((size_t)(n * r->d) * sizeof(float)))) {
        free(cnt), free(ids);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    for (int64_t s = 0; s < r->n_seq; s++)
        for (int64_t i = 0; i < r->S; i++)
            cnt[r->seq_tok[s * (r->S + 1) + i + 1]] += row_trains(r, s * r->S + i);
    for (int64_t i = 0; i < V; i++)
        ids[i] = (int32_t)i;
    qsort_r(ids, (size_t)V, sizeof *ids, by_count, cnt);
    qsort(ids, (size_t)n, sizeof *ids, int32_cmp);
    for (int64_t i = 0; i < n; i++)
        memcpy(r->lm_red + i * r->d, r->tgt.lm + (int64_t)ids[i] * r->d,
               (size_t)r->d * sizeof(float));
    free(cnt);
    r->lm_ids = ids;            /* the first n, ascending */
    r->fz.lm = r->lm_red;
    r->fz.n_lm = n;
    return 0;
}

/* ---- training ---- */

/* sequence s's features into r->f32 [S + 1][d] (EAGLE-3: [S + 1][3d],
 * and the final features into r->fin [S + 1][d]) */
static void
seq_features(struct run *r, int64_t s)
{
    const uint16_t *f = r->feat + s * (r->S + 1) * r->fd;
    int64_t w = r->fin ? 3 * r->d : r->d;
    for (int64_t i = 0; i <= r->S; i++) {
        for (int64_t j = 0; j < w; j++)
            r->f32[i * w + j] = feat_dec(r, f[i * r->fd + j]);
        for (int64_t j = w; j < r->fd; j++)
            r->fin[i * r->d + j - w] = feat_dec(r, f[i * r->fd + j]);
    }
}

#define KEEP_ROWS 64

/* EAGLE-3 over a draft vocabulary: r->keep, the positions whose target
 * argmax over the whole vocabulary (the full LM head on the final feature)
 * is a draft token; the others carry no loss (EAGLE-3's loss mask).  The
 * features are r->feat's (f16 or bf16), as the loss reads them.  The cache
 * holds the data's rows only, not --eval's. */
static int
draft_keep(struct run *r, struct diag *d)
{
    const struct backend_backward_ops *bw = r->m->be->ops->backward;
    int64_t V = r->tgt.c.n_vocab, S = r->S, kept = 0, have = 0, nd = r->n_seq - r->n_ev, c = 0;

    if (!r->ws3 || !r->lm_ids)
        return 0;
    uint8_t *in = calloc((size_t)V, 1), *got = calloc((size_t)r->n_seq, 1);
    float *z = malloc((size_t)(KEEP_ROWS * V) * sizeof(float));
    r->keep = malloc((size_t)(r->n_seq * S));
    if (!in || !got || !z || !r->keep) {
        free(in), free(got), free(z);
        return diag_set(d, ST_NOMEM, "out of memory for the draft vocabulary's loss mask");
    }
    char *path = NULL;
#ifdef LLMKIT_HAVE_ZSTD
    if (r->o->cache_dir && !(path = keep_path(r))) {
        free(in), free(got), free(z);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    if (path && (have = keep_read(r, path, got, d)) < 0) {
        free(in), free(got), free(z), free(path);
        return (int)have;
    }
#endif
    r->keep_hit = have == nd;   /* (the data's rows; --eval's are never cached) */
    for (int64_t i = 0; i < r->fz.n_lm; i++)
        in[r->lm_ids[i]] = 1;
    int64_t fresh = 0;          /* the data's sequences computed */
    for (int64_t s = 0; s < r->n_seq; s++) {
        if (got[s]) {
            for (int64_t i = s * S; i < (s + 1) * S; i++)
                kept += r->keep[i] & row_trains(r, i);
            continue;
        }
        runcb_progress(&r->o->cb, "loss mask", s, r->n_seq);
        seq_features(r, s);
        for (int64_t i0 = 0; i0 < S; i0 += KEEP_ROWS) {
            int64_t n = S - i0 < KEEP_ROWS ? S - i0 : KEEP_ROWS;
            bw->matmul_fwd(z, r->fin + (i0 + 1) * r->d, r->tgt.lm, NULL, n, V, r->d);
            for (int64_t i = 0; i < n; i++) {
                uint8_t k = r->keep[s * S + i0 + i] = in[eagle_argmax(z + i * V, V)];
                kept += s < nd ? k & row_trains(r, s * S + i0 + i) : 0;
            }
        }
        got[s] = 1;
        fresh += s < nd;
        if (r->o->stop && *r->o->stop) {    /* the data's rows done are kept for the next run */
            int rc = 0;
            int64_t w = 0;
            for (int64_t j = 0; j < nd; j++)
                w += got[j];
            bool put = path && fresh > 0;
#ifdef LLMKIT_HAVE_ZSTD
            if (put)
                rc = keep_write(r, path, got, d);
#endif
            if (rc == 0 && s < nd)
                rc = diag_set(d, ST_FAIL, "'%s': interrupted during the loss mask, after %lld of "
                              "%lld sequences%s%s%s", r->o->data, (long long)w, (long long)nd,
                              put ? " (cached in '" : "", put ? path : "", put ? "')" : "");
            else if (rc == 0)
                rc = diag_set(d, ST_FAIL, "--eval '%s': interrupted during the loss mask of its "
                              "sequences%s%s%s", r->o->eval, put ? " (the data's cached in '" : "",
                              put ? path : "", put ? "')" : "");
            free(in), free(got), free(z), free(path);
            return rc;
        }
    }
    runcb_progress(&r->o->cb, "loss mask", r->n_seq, r->n_seq);
    for (int64_t i = 0; i < nd * S; i++)     /* (the share: of the data's rows trained) */
        c += row_trains(r, i);
    r->keep_frac = (double)kept / (double)(c ? c : 1);
    int rc = 0;
#ifdef LLMKIT_HAVE_ZSTD
    if (path && fresh > 0)
        rc = keep_write(r, path, got, d);
#endif
    free(in), free(got), free(z), free(path);
    return rc;
}

/* the loss of sequence s over its rows counted (training with
 * --train-on-prompts: all); with grad, its gradient (scaled) added, and
 * the input features noised from rng */
static void
seq_step(struct run *r, const struct backend_backward_ops *bw, int64_t s, struct rng *rng,
         float scale, float *grad, struct eagle_loss *l)
{
    int64_t n = r->S * (r->fin ? 3 * r->d : r->d);
    seq_features(r, s);
    const float *in = r->f32;
    if (grad && r->o->noise > 0) {
        for (int64_t i = 0; i < n; i++)
            r->noisy[i] = r->f32[i] + (float)((2 * rng_uniform(rng) - 1) * r->o->noise);
        in = r->noisy;
    }
    const int32_t *next = r->seq_tok + s * (r->S + 1) + 1;
    const uint8_t *mask = grad && r->o->train_prompts ? NULL : r->mask + s * r->S;
    if (r->ws3) {
        eagle3_forward(bw, &r->h, &r->fz, r->ws3, next, in, r->S);
        eagle3_loss_backward(bw, &r->h, &r->fz, r->ws3, r->fin + r->d,
                             r->keep ? r->keep + s * r->S : NULL, mask, scale, grad, l);
        return;
    }
    eagle_forward(bw, &r->h, &r->fz, r->ws, next, in, r->S, NULL);
    eagle_loss_backward(bw, &r->h, &r->fz, r->ws, r->f32 + r->d, mask, W_CLS, scale, grad, l);
}

/* sequence s's rows counted in the loss (training: all with
 * --train-on-prompts) */
static int64_t
seq_counted(const struct run *r, int64_t s, bool train)
{
    int64_t c = 0;
    for (int64_t i = 0; i < r->S; i++)
        c += train ? row_trains(r, s * r->S + i) : r->mask[s * r->S + i];
    return c;
}

/* the weight of a sequence of cs rows counted in a mean over sequences
 * whose rows counted are c (of them all; n_seqs of them with any):
 * EAGLE-1's loss is a mean over the rows counted, EAGLE-3's over all the
 * rows (the references': main.py, cnets.py) */
static double
seq_weight(const struct run *r, int64_t cs, int64_t c, int64_t n_seqs)
{
    if (r->ws3)
        return cs > 0 ? 1.0 / (double)n_seqs : 0;
    return c > 0 ? (double)cs / (double)c : 0;
}

/* the held-out loss and top-1 agreement, over the rows counted (cut short
 * by a stop signal: the caller sees *r->o->stop) */
static void
evaluate(struct run *r, const struct backend_backward_ops *bw, double *loss, double *acc,
         int64_t *counted)
{
    double sl = 0;
    int64_t ok = 0, n = 0, c = 0, nz = 0;
    for (int64_t s = r->n_seq - r->n_hold; s < r->n_seq; s++) {
        int64_t cs = seq_counted(r, s, false);
        c += cs;
        nz += cs > 0;   /* (--train-on-prompts keeps sequences of none) */
    }
    for (int64_t s = r->n_seq - r->n_hold; s < r->n_seq; s++) {
        struct eagle_loss l;
        if (r->o->stop && *r->o->stop)
            break;
        seq_step(r, bw, s, NULL, 1, NULL, &l);
        sl += seq_weight(r, seq_counted(r, s, false), c, nz) * l.total;
        ok += l.correct;
        n += l.n;
    }
    *loss = sl;
    *acc = n ? (double)ok / (double)n : 0;
    *counted = n;
}

static void
shuffle(int64_t *v, int64_t n, uint64_t seed)
{
    struct rng g;
    rng_seed(&g, seed);
    for (int64_t i = 0; i < n; i++)
        v[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_next(&g) % (uint64_t)(i + 1)), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static double
lr_at(const struct draft_train_opts *o, double frac)
{
    if (frac < WARMUP)
        return o->lr * frac / WARMUP;
    if (frac > 1)
        frac = 1;
    return o->lr * (1 - (1 - LR_FLOOR) * (frac - WARMUP) / (1 - WARMUP));
}

/* one AdamW update of the parameters with r->grad at step t (1-based) */
static void
adamw(struct run *r, double lr, int64_t t)
{
    double c1 = 1 - pow(BETA1, (double)t), c2 = 1 - pow(BETA2, (double)t);
    double wd = r->o->weight_decay;
    for (int64_t j = 0; j < r->h.n_param; j++) {
        double g = r->grad[j];
        r->am[j] = (float)(BETA1 * r->am[j] + (1 - BETA1) * g);
        r->av[j] = (float)(BETA2 * r->av[j] + (1 - BETA2) * g * g);
        double upd = (r->am[j] / c1) / (sqrt(r->av[j] / c2) + ADAM_EPS);
        r->h.param[j] -= (float)(lr * (upd + wd * r->h.param[j]));
    }
}

/* the options that shape a run's result, as a checkpoint records them */
static void
run_options(const struct run *r, char *buf, size_t cap)
{
    const struct draft_train_opts *o = r->o;
    snprintf(buf, cap, "epochs=%lld max_time=%.9g lr=%.9g batch=%lld seq_len=%lld "
             "draft_vocab=%lld noise=%.9g clip=%.9g", (long long)o->epochs, o->max_time, o->lr,
             (long long)o->batch, (long long)o->seq_len, (long long)o->draft_vocab,
             (double)o->noise, (double)o->clip);
    if (o->arch == EAGLE_ARCH_3) {
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, " arch=eagle3 ttt_steps=%d", o->ttt_steps);
    }
    if (o->no_fc_bias) {
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, " fc_bias=no");
    }
    if (o->weight_decay != DRAFT_WEIGHT_DECAY) {  /* the default's runs: as before the option */
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, " weight_decay=%.9g", o->weight_decay);
    }
    if (o->eval) {      /* every data sequence trains: another split */
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, " eval=yes");
    }
    size_t n = strlen(buf);     /* the loss over the responses' rows (EAGLE's loss mask), or all */
    snprintf(buf + n, cap - n, " loss=%s", o->train_prompts ? "all" : "read-responses");
}

static void
fill_meta(const struct run *r, struct eagle_meta *mt, int64_t steps, double elapsed)
{
    const char *name = NULL;
    memset(mt, 0, sizeof *mt);
    snprintf(mt->base_sha256, sizeof mt->base_sha256, "%s", r->base_sha);
    if (gguf_get_str(&r->m->gguf, "general.name", &name, NULL) < 0 || !name)
        name = r->o->model;
    snprintf(mt->base_name, sizeof mt->base_name, "%s", name);
    snprintf(mt->base_arch, sizeof mt->base_arch, "%s", r->m->hp.arch_name);
    snprintf(mt->data_sha256, sizeof mt->data_sha256, "%s", r->data_sha);
    mt->steps = (uint64_t)steps;
    mt->tokens = (uint64_t)(steps * r->o->batch * r->S);
    mt->ckpt_step = (uint64_t)steps;
    mt->ckpt_seed = r->o->seed;
    mt->ckpt_elapsed = (float)elapsed;
    run_options(r, mt->ckpt_options, sizeof mt->ckpt_options);
    mt->ckpt_prompts = (uint64_t)r->data.n_answered;
    mt->ckpt_sequences = (uint64_t)(r->n_seq - r->n_ev);      /* the data's, not --eval's */
    mt->ckpt_train_time = (float)r->train_time;
    mt->draft_ids = r->lm_ids;
    mt->n_draft = r->lm_ids ? r->fz.n_lm : 0;
}

static int
checkpoint(struct run *r, int64_t steps, double elapsed, struct diag *d)
{
    struct eagle_meta mt;
    fill_meta(r, &mt, steps, elapsed);
    return eagle_head_write(&r->h, &mt, r->am, r->av, r->ckpt, true, d);
}

static void
json_step(const struct run *r, const char *type, int64_t step, double lr, double loss, double reg,
          double cls, double acc, int64_t positions, double elapsed)
{
    if (!r->o->json)
        return;
    fprintf(r->o->json, "{\"schema\":\"draft-train/1\",\"type\":\"%s\",\"step\":%lld,"
            "\"lr\":%.9g,\"loss\":%.9g,\"reg\":%.9g,\"cls\":%.9g,\"acc\":%.9g,\"positions\":%lld,"
            "\"elapsed_s\":%.9g}\n", type, (long long)step, lr, loss, reg, cls, acc,
            (long long)positions, elapsed);
    fflush(r->o->json);
}

/* --resume, before the data: the checkpoint (kept for resume()) and what
 * its run trained on, to be repeated (r->pin_*) */
static int
pin_data(struct run *r, struct diag *d)
{
    int rc;
    struct stat st;

    /* (a FIFO would block the open until a writer came) */
    if (stat(r->ckpt, &st) == 0 && !S_ISREG(st.st_mode))
        return diag_set(d, ST_IO, "--resume: '%s': is %s, not a regular file", r->ckpt,
                        file_kind_name(st.st_mode));
    if ((rc = eagle_head_read(&r->ck_h, &r->ck_mt, &r->ck_m, &r->ck_v, r->ckpt, d)) < 0) {
        diag_prefix(d, "--resume: '%s'", r->ckpt);
        return rc;
    }
    r->pinned = r->ck_loaded = true;
    /* what the options alone decide, before the data's preparation (the
     * model and the data: resume()) */
    char opts[256];
    run_options(r, opts, sizeof opts);
    if (r->ck_h.c.arch != r->o->arch || r->ck_mt.ckpt_seed != r->o->seed)
        return diag_set(d, ST_FORMAT, "--resume: '%s' is a checkpoint of another run (model, "
                        "data or --seed differ)", r->ckpt);
    if (strcmp(r->ck_mt.ckpt_options, opts) != 0)
        return diag_set(d, ST_FORMAT, "--resume: '%s' was written with other options (%s)",
                        r->ckpt, r->ck_mt.ckpt_options);
    /* (the training's share of this run's --max-time, 0 without one) */
    if (r->ck_mt.ckpt_sequences < 2 || !(r->ck_mt.ckpt_train_time >= 0) ||
        r->ck_mt.ckpt_train_time > (r->o->max_time > 0 ? r->o->max_time : 0))
        return diag_set(d, ST_FORMAT, "--resume: '%s': the run's data or time is out of range "
                        "(%llu sequences, %g s)", r->ckpt,
                        (unsigned long long)r->ck_mt.ckpt_sequences,
                        (double)r->ck_mt.ckpt_train_time);
    r->pin_prompts = (int64_t)(r->ck_mt.ckpt_prompts < INT64_MAX ? r->ck_mt.ckpt_prompts
                                                                 : INT64_MAX);
    r->pin_seqs = (int64_t)(r->ck_mt.ckpt_sequences < INT64_MAX ? r->ck_mt.ckpt_sequences
                                                                : INT64_MAX);
    r->pin_train_time = r->ck_mt.ckpt_train_time;
    return 0;
}

static void
ckpt_release(struct run *r)
{
    if (!r->ck_loaded)
        return;
    eagle_head_release(&r->ck_h);
    free(r->ck_mt.draft_ids);
    free(r->ck_m), free(r->ck_v);
    r->ck_mt.draft_ids = NULL;
    r->ck_m = r->ck_v = NULL;
    r->ck_loaded = false;
}

/* the checkpoint's head and optimizer state into r, when it is one of this run */
static int
resume(struct run *r, int64_t total, int64_t *step, double *elapsed, struct diag *d)
{
    const struct eagle_head *h = &r->ck_h;
    const struct eagle_meta *mt = &r->ck_mt;
    /* the steps a run can reach: those of its epochs, and at most what the
     * positions' count (steps x batch x rows) holds */
    uint64_t most = (uint64_t)INT64_MAX / ((uint64_t)r->o->batch * (uint64_t)(r->S + 1));

    if ((total < INT64_MAX && mt->ckpt_step > (uint64_t)total) || mt->ckpt_step > most ||
        !(mt->ckpt_elapsed >= 0) || !isfinite(mt->ckpt_elapsed))
        return diag_set(d, ST_FORMAT, "--resume: '%s': its step or time is out of range "
                        "(step %llu, %g s)", r->ckpt, (unsigned long long)mt->ckpt_step,
                        (double)mt->ckpt_elapsed);

    /* (arch, seed and options: pin_data, before the data) */
    if (strcmp(mt->base_sha256, r->base_sha) != 0 || strcmp(mt->data_sha256, r->data_sha) != 0 ||
        h->n_param != r->h.n_param)
        return diag_set(d, ST_FORMAT, "--resume: '%s' is a checkpoint of another run (model, "
                        "data or --seed differ)", r->ckpt);
    memcpy(r->h.param, h->param, (size_t)h->n_param * sizeof(float));
    memcpy(r->am, r->ck_m, (size_t)h->n_param * sizeof(float));
    memcpy(r->av, r->ck_v, (size_t)h->n_param * sizeof(float));
    *step = (int64_t)mt->ckpt_step;
    *elapsed = mt->ckpt_elapsed;
    runcb_info(&r->o->cb, "resuming from '%s' at step %lld", r->ckpt, (long long)*step);
    return 0;
}

/* a stop signal in training after step steps (at elapsed s; in_step: it
 * came during the next, dropped): their checkpoint, which --resume
 * continues, and ST_FAIL saying so */
static int
stopped(struct run *r, int64_t step, double elapsed, bool in_step, struct diag *d)
{
    char when[64];
    int rc;

    if (in_step)
        snprintf(when, sizeof when, "in step %lld (dropped)", (long long)step + 1);
    else
        snprintf(when, sizeof when, "at step %lld", (long long)step);
    if (r->no_ckpt)
        return diag_set(d, ST_FAIL, "interrupted %s (no checkpoint beside '%s')", when,
                        r->o->output);
    if ((rc = checkpoint(r, step, elapsed, d)) < 0)
        return rc;
    return diag_set(d, ST_FAIL, "interrupted %s; checkpoint '%s' %swritten (--resume "
                    "continues)", when, r->ckpt, in_step ? "of the steps before it " : "");
}

static int
train(struct run *r, struct draft_train_report *rep, struct diag *d)
{
    const struct draft_train_opts *o = r->o;
    const struct backend_backward_ops *bw = r->m->be->ops->backward;
    int64_t n_train = r->n_seq - r->n_hold, step = 0;
    int64_t per_epoch = (n_train + o->batch - 1) / o->batch;
    int64_t total = o->epochs ? o->epochs * per_epoch : INT64_MAX;
    int64_t *order = malloc((size_t)n_train * sizeof(int64_t));
    double elapsed0 = 0, last_loss = 0;
    int rc = 0;

    if (!order)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (o->resume)
        rc = resume(r, total, &step, &elapsed0, d);
    ckpt_release(r);
    if (rc < 0) {
        free(order);
        return rc;
    }
    double t0 = now_seconds();
    int64_t shuffled = -1;
    runcb_progress(&o->cb, r->label, 0, o->epochs ? total : (int64_t)(r->train_time * 10));
    for (;; step++) {
        double elapsed = elapsed0 + now_seconds() - t0;
        double frac = o->epochs ? (double)step / (double)total : 0;
        if (r->train_time > 0 && elapsed / r->train_time > frac)
            frac = elapsed / r->train_time;
        if (step >= total || (r->train_time > 0 && elapsed >= r->train_time))
            break;
        if (o->stop && *o->stop) {
            rc = stopped(r, step, elapsed, false, d);
            break;
        }
        int64_t epoch = step / per_epoch, pos = step % per_epoch;
        if (epoch != shuffled) {
            shuffle(order, n_train, o->seed * 1000003u + (uint64_t)epoch);
            shuffled = epoch;
        }
        struct rng rng;
        rng_seed(&rng, o->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(step + 1)));
        memset(r->grad, 0, (size_t)r->h.n_param * sizeof(float));
        double sl = 0, sr = 0, sc = 0;
        int64_t ok = 0, np = 0, nb = 0;
        int64_t c = 0;
        for (int64_t b = 0; b < o->batch; b++) {
            int64_t k = pos * o->batch + b;
            if (k >= n_train)
                break;
            c += seq_counted(r, order[k], true);
            nb++;
        }
        for (int64_t b = 0; b < nb; b++) {
            struct eagle_loss l;
            int64_t s = order[pos * o->batch + b];
            /* a step can take minutes (--batch 4096 --ttt-steps 16): a
             * stop signal is heeded between its sequences */
            if (o->stop && *o->stop)
                break;
            double w = seq_weight(r, seq_counted(r, s, true), c, nb);
            seq_step(r, bw, s, &rng, (float)w, r->grad, &l);
            sl += w * l.total, sr += w * l.reg, sc += w * l.cls;
            ok += l.correct, np += l.n;
        }
        if (o->stop && *o->stop) {
            /* the step under way is dropped (its gradient unused, the
             * optimizer untouched): the checkpoint is of the steps before
             * it, at their time, and --resume does this one again */
            rc = stopped(r, step, elapsed, true, d);
            break;
        }
        if (o->no_fc_bias && o->arch != EAGLE_ARCH_3)     /* held at zero: no step, no decay */
            memset(r->grad + (r->h.t[EAGLE_FC_B] - r->h.param), 0, (size_t)r->d * sizeof(float));
        double gn = 0;
        for (int64_t j = 0; j < r->h.n_param; j++)
            gn += (double)r->grad[j] * r->grad[j];
        gn = sqrt(gn);
        if (!isfinite(gn)) {
            rc = diag_set(d, ST_FAIL, "step %lld: the gradient is not finite (try a lower --lr)",
                          (long long)step);
            break;
        }
        if (gn > o->clip)
            for (int64_t j = 0; j < r->h.n_param; j++)
                r->grad[j] *= (float)(o->clip / gn);
        double lr = lr_at(o, frac + (o->epochs ? 1.0 / (double)total : 0));
        adamw(r, lr, step + 1);
        last_loss = sl;
        elapsed = elapsed0 + now_seconds() - t0;
        json_step(r, "step", step + 1, lr, last_loss, sr, sc, np ? (double)ok / (double)np : 0, np,
                  elapsed);
        double done = o->epochs ? (double)(step + 1) / (double)total : 0;
        if (r->train_time > 0 && elapsed / r->train_time > done)
            done = elapsed / r->train_time;
        double eta = done > 0 ? elapsed * (1 - done) / done : 0;
        snprintf(r->label, sizeof r->label, "step %lld loss %.4f acc %.3f eta %.0fs",
                 (long long)(step + 1), last_loss, np ? (double)ok / (double)np : 0, eta);
        runcb_progress(&o->cb, r->label, o->epochs ? step + 1 : (int64_t)(elapsed * 10),
                       o->epochs ? total : (int64_t)(r->train_time * 10));
        if (o->ckpt_every > 0 && (step + 1) % o->ckpt_every == 0) {
            double hl, ha;
            int64_t hn;
            if ((rc = checkpoint(r, step + 1, elapsed, d)) < 0)
                break;
            evaluate(r, bw, &hl, &ha, &hn);
            json_step(r, "eval", step + 1, lr, hl, 0, 0, ha, hn, elapsed);
        }
    }
    free(order);
    if (rep) {
        rep->steps = step;
        rep->tokens = step * o->batch * r->S;
        rep->train_loss = last_loss;
        rep->seconds = elapsed0 + now_seconds() - t0;
    }
    return rc;
}

int
run_draft_train(const struct draft_train_opts *o, struct draft_train_report *rep, struct diag *d)
{
    struct draft_train_report tmp;
    struct model_opts mo = MODEL_OPTS_INIT;
    struct run r;
    bool hit = false;
    int rc;

    if (!rep)
        rep = &tmp;
    memset(rep, 0, sizeof *rep);
    memset(&r, 0, sizeof r);
    r.o = o;
    r.S = o->seq_len;
    r.t_start = now_seconds();
    if (o->epochs <= 0 && o->max_time <= 0)
        return diag_set(d, ST_RANGE, "give --epochs or --max-time");
    /* no output may replace an input, --force or not */
    xio_note_input(o->model);
    xio_note_input(o->data);
    xio_note_input(o->eval);
    if ((rc = xout_check(o->output, o->force, d)) < 0) {
        diag_prefix_output(d, o->output);
        return rc;
    }
    /* the checkpoint goes beside the output: none beside a device or a FIFO
     * (such an output is allowed: asking for a checkpoint with it is the
     * usage error, 2) */
    struct stat st;
    r.no_ckpt = stat(o->output, &st) == 0 && !S_ISREG(st.st_mode);
    if (r.no_ckpt && (o->ckpt_every > 0 || o->resume))
        return diag_set(d, ST_RANGE, "'%s' is not a regular file: no checkpoint can go beside "
                        "it (--checkpoint-every, --resume)", o->output);
    size_t plen = strlen(o->output) + 6;
    if (!(r.ckpt = malloc(plen)))
        return diag_set(d, ST_NOMEM, "out of memory");
    snprintf(r.ckpt, plen, "%s.ckpt", o->output);
    /* a checkpoint already there is another run's: continued (--resume)
     * or replaced (--force), never overwritten unasked; a link, device,
     * FIFO or folder of that name is no checkpoint, and left alone (an
     * I/O error, 4, as when --resume would read it: pin_data()) */
    if (!o->resume && !r.no_ckpt && lstat(r.ckpt, &st) == 0 && !S_ISREG(st.st_mode)) {
        rc = diag_set(d, ST_IO, "'%s': is %s, not a regular file: refusing to write the "
                      "checkpoint there", r.ckpt, file_kind_name(st.st_mode));
        goto out;
    }
    if (!o->resume && !r.no_ckpt && lstat(r.ckpt, &st) == 0 && !o->force) {
        rc = diag_set(d, ST_RANGE, "'%s' already exists (--resume continues that run, --force "
                      "overwrites it)", r.ckpt);
        goto out;
    }
    if (o->resume && (rc = pin_data(&r, d)) < 0)
        goto out;
    /* the checkpoint is written through a temporary too, whose name
     * (OUTPUT.ckpt.tmp.llmkit-XXXXXX) is 5 bytes longer than the output's:
     * checked now, as the output was, so that a signal or the first
     * --checkpoint-every does not find it too long after the work */
    if (!r.no_ckpt && (rc = xout_check(r.ckpt, true, d)) < 0) {
        diag_prefix(d, "checkpoint '%s'", r.ckpt);
        goto out;
    }
    /* the trainer's products are OpenBLAS's: its buffer mapped before the
     * model and the data take the room, or out of memory now (blas.h) */
    if (blas_prime(0) < 0) {
        rc = diag_set(d, ST_NOMEM, "out of memory for OpenBLAS's work buffer");
        goto out;
    }
    mo.n_threads = o->n_threads;
    mo.kernel = o->kernel;
    mo.max_batch = r.S + 1;
    if ((rc = model_open(&r.m, o->model, &mo, d)) < 0) {
        diag_prefix(d, "'%s'", o->model);
        goto out;
    }
    if (!r.m->be->ops->backward) {
        rc = diag_set(d, ST_DEVICE, "the %s backend has no training kernels", r.m->be->device);
        goto out;
    }
    if ((rc = tok_load(&r.tok, &r.m->gguf, d)) < 0) {
        diag_prefix(d, "'%s'", o->model);
        goto out;
    }
    if ((rc = eagle_target_init(&r.tgt, r.m, r.S + 1, d)) < 0) {
        diag_prefix(d, "'%s'", o->model);
        goto out;
    }
    r.d = r.tgt.c.d;
    r.fd = o->arch == EAGLE_ARCH_3 ? 4 * r.d : r.d;
    r.feat_bf16 = o->arch == EAGLE_ARCH_3 && r.m->hp.arch == MODEL_ARCH_GEMMA3;
    /* (before the data's preparation, which may answer prompts for minutes;
     * --resume: the checkpoint's head replaces the start, and --init is no
     * option of the run's result then, so run_options leaves it out) */
    r.init_target = o->init == DRAFT_INIT_TARGET ||
                    (o->init == DRAFT_INIT_AUTO && o->arch == EAGLE_ARCH_3 &&
                     r.m->hp.arch == MODEL_ARCH_LLAMA);
    if (r.init_target && (o->arch != EAGLE_ARCH_3 || r.m->hp.arch != MODEL_ARCH_LLAMA)) {
        rc = diag_set(d, ST_RANGE, "'%s': --init target: the head starts from a llama model's "
                      "last layer, and this is a %s model", o->model, r.m->hp.arch_name);
        goto out;
    }
    if ((rc = eagle_base_sha256(r.m, r.base_sha)) < 0) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = load_data(&r, d)) < 0 || (rc = load_eval(&r, d)) < 0)
        goto out;
    if ((rc = draft_vocab(&r, d)) < 0)
        goto out;
    struct eagle_config hc = r.tgt.c;
    hc.arch = o->arch;
    hc.n_draft = r.fz.n_lm;
    if ((rc = eagle_head_init(&r.h, &hc, o->seed)) < 0 ||
        (rc = o->arch == EAGLE_ARCH_3 ? eagle3_ws_new(&r.ws3, &hc, r.S, o->ttt_steps)
                                      : eagle_ws_new(&r.ws, &hc, r.S)) < 0) {
        rc = diag_set(d, rc == -ST_NOMEM ? ST_NOMEM : ST_RANGE, "cannot set up the head for '%s'",
                      o->model);
        goto out;
    }
    if (r.init_target && (rc = eagle_target_init_head(&r.tgt, &r.h, r.fz.lm)) < 0) {
        rc = rc == -ST_NOMEM ? diag_set(d, ST_NOMEM, "out of memory")
                             : diag_set(d, ST_RANGE, "'%s': --init target: the model's last layer "
                                        "does not have the head's shapes", o->model);
        goto out;
    }
    if (o->no_fc_bias && o->arch != EAGLE_ARCH_3)
        memset(r.h.t[EAGLE_FC_B], 0, (size_t)r.d * sizeof(float));
    if (o->arch == EAGLE_ARCH_3 && !(r.fin = malloc((size_t)((r.S + 1) * r.d) * sizeof(float)))) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    r.f32 = malloc((size_t)((r.S + 1) * r.fd) * sizeof(float));
    r.noisy = malloc((size_t)(r.S * r.fd) * sizeof(float));
    r.grad = malloc((size_t)r.h.n_param * sizeof(float));
    r.am = calloc((size_t)r.h.n_param, sizeof(float));
    r.av = calloc((size_t)r.h.n_param, sizeof(float));
    if (!r.f32 || !r.noisy || !r.grad || !r.am || !r.av) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = features(&r, &hit, d)) < 0 || (rc = eval_features(&r, d)) < 0 ||
        (rc = draft_keep(&r, d)) < 0)
        goto out;
    rep->n_lm = r.fz.n_lm;
    rep->keep_frac = r.keep ? r.keep_frac : 1.0;
    rep->cache_hit = hit;
    rep->n_seq = r.n_seq;
    rep->n_hold = r.n_hold;
    rep->n_tok = r.n_tok;
    rep->n_prompts = r.data.n_prompts;
    rep->n_generated = r.data.n_generated;
    if (r.data.n_prompts > 0 && o->train_prompts) {
        runcb_info(&o->cb, "'%s': the loss over every position (--train-on-prompts); the "
                   "responses' (the held-out figures'): %.1f%% of them", o->data,
                   100.0 * r.mask_frac);
    } else if (r.data.n_prompts > 0) {
        char left[64] = "";
        if (r.n_no_resp > 0)
            snprintf(left, sizeof left, "; %lld sequence%s without one left out",
                     (long long)r.n_no_resp, r.n_no_resp > 1 ? "s" : "");
        runcb_info(&o->cb, "'%s': the loss over the responses: %.1f%% of the positions (the "
                   "prompts' are read, not trained on)%s", o->data, 100.0 * r.mask_frac, left);
    }
    char kept[128] = "";
    if (r.keep)
        snprintf(kept, sizeof kept, " (the target's argmax among them at %.1f%% of the positions "
                 "counted%s)",
                 100.0 * r.keep_frac, r.keep_hit ? ", from the cache" : "");
    runcb_info(&o->cb, "%lld tokens, %lld sequences of %lld (%lld held out%s%s%s), %s head %lld "
               "parameters (%s), CE over %lld tokens%s, kernels '%s'", (long long)r.n_tok,
               (long long)r.n_seq, (long long)r.S, (long long)r.n_hold,
               r.n_ev ? ": --eval '" : "", r.n_ev ? o->eval : "", r.n_ev ? "'" : "",
               o->arch == EAGLE_ARCH_3 ? "EAGLE-3" : "EAGLE-1", (long long)r.h.n_param,
               r.pinned        ? "from the checkpoint"
               : r.init_target ? "started from the model's last layer"
                               : "random start",
               (long long)r.fz.n_lm, kept, r.m->be->ops->backward->name);
    if (r.pinned) {
        r.train_time = r.pin_train_time;
    } else if (o->max_time > 0) {
        /* training has what the data's preparation left of the budget */
        double prep = now_seconds() - r.t_start - r.t_eval;
        r.train_time = o->max_time - prep > 0.001 ? o->max_time - prep : 0.001;
        runcb_info(&o->cb, "data ready in %.1f s; training for the %.1f s left of --max-time",
                   prep, r.train_time);
    }
    if ((rc = train(&r, rep, d)) < 0)
        goto out;
    evaluate(&r, r.m->be->ops->backward, &rep->hold_loss, &rep->hold_acc, &rep->hold_n);
    if (o->stop && *o->stop) {
        /* the steps are done: a checkpoint of them, which --resume finishes */
        if (r.no_ckpt)
            rc = diag_set(d, ST_FAIL, "interrupted during the held-out evaluation after step "
                          "%lld (no checkpoint beside '%s')", (long long)rep->steps, o->output);
        else if ((rc = checkpoint(&r, rep->steps, rep->seconds, d)) == 0)
            rc = diag_set(d, ST_FAIL, "interrupted during the held-out evaluation after step "
                          "%lld; checkpoint '%s' written (--resume finishes the run)",
                          (long long)rep->steps, r.ckpt);
        goto out;
    }
    json_step(&r, "eval", rep->steps, 0, rep->hold_loss, 0, 0, rep->hold_acc, rep->hold_n,
              rep->seconds);
    struct eagle_meta mt;
    fill_meta(&r, &mt, rep->steps, rep->seconds);
    if ((rc = eagle_head_write(&r.h, &mt, NULL, NULL, o->output, o->force, d)) < 0)
        goto out;
    if (!r.no_ckpt)
        remove(r.ckpt);
out:;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        rep->peak_rss = (int64_t)ru.ru_maxrss * 1024;
    free(r.seq_tok), free(r.feat), free(r.have), free(r.f32), free(r.fin), free(r.noisy), free(r.grad), free(r.am),
        free(r.av), free(r.ckpt), free(r.lm_red), free(r.lm_ids), free(r.keep);
    free(r.mask);
    ckpt_release(&r);
    eagle_ws_free(r.ws);
    eagle3_ws_free(r.ws3);
    eagle_head_release(&r.h);
    eagle_target_release(&r.tgt);
    if (r.ct_loaded)
        chat_template_release(&r.ct);
    tok_release(&r.tok);
    model_free(r.m);
    return rc;
}
