/*
 * qmethod.c - GPTQ and RTN over a whole model, with checkpoints of finished
 * blocks (qmethod.h).
 *
 * Checkpoint file <dir>/blk.<L>.grid (host byte order; a run resumes on the
 * machine that wrote it):
 *   "LLMKGRD2"  magic
 *   char key[64]   hex SHA-256 of what determines the grids (qmethod_key)
 *   int64 layer, int64 n  linears
 *   n x { char name[64]; int32 bits, sym; int64 group_size, rows, cols,
 *         n_groups; double damp; int64 dead; double loss;
 *         uint8 q[rows * cols]; float scale[n_groups * rows];
 *         int32 zero[n_groups * rows]; int32 g_idx[cols] }
 *   char seal[64]  hex SHA-256 of every byte before it
 * The seal is checked first (a flipped byte inside the valid ranges would
 * otherwise resume into another model), then every count against the model
 * and the file's size.  "LLMKGRD1" files (no seal) are refused.
 */
#include "qmethod.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "awq.h"
#include "blas.h"
#include "calib.h"
#include "model.h"
#include "quantize.h"
#include "threadpool.h"
#include "xio.h"

#ifdef LLMKIT_HAVE_OPENBLAS
#include <cblas.h>
#endif

#define CKPT_MAGIC "LLMKGRD2"
#define CKPT_MAGIC_V1 "LLMKGRD1"   /* unsealed: refused */
#define CKPT_SEAL 64
#define N_LIN_MAX 8

int
qmethod_parse(const char *s)
{
    if (s && !strcmp(s, "gptq"))
        return QM_GPTQ;
    if (s && !strcmp(s, "rtn"))
        return QM_RTN;
    if (s && !strcmp(s, "awq"))
        return QM_AWQ;
    return -1;
}

const char *
qmethod_name(enum qmethod m)
{
    return m == QM_GPTQ ? "gptq" : m == QM_AWQ ? "awq" : "rtn";
}

void
qmethod_report_release(struct qmethod_report *rep)
{
    free(rep->lin);
    memset(rep, 0, sizeof *rep);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double
cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* ---- checkpoints ---- */

/* what determines the grids: the model file (size and modification time),
 * the text's hash, and every option that changes a bit */
static int
qmethod_key(const struct qmethod_opts *o, const char *calib_sha, char key[65], struct diag *d)
{
    struct stat st;
    char buf[1024];
    int n;

    if (stat(o->input, &st) < 0)
        return diag_set(d, ST_IO, "'%s': %s", o->input, strerror(errno));
    n = snprintf(buf, sizeof buf,
                 "llmkit-grid/1 %s size=%lld mtime=%lld.%09ld calib=%s ctx=%lld chunks=%lld "
                 "bits=%d g=%lld sym=%d act=%d static=%d mse=%d damp=%.17g kernel=%s",
                 qmethod_name(o->method), (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                 st.st_mtim.tv_nsec, calib_sha, (long long)o->calib_ctx, (long long)o->calib_chunks,
                 o->g.bits, (long long)o->g.group_size, o->g.sym, o->g.act_order,
                 o->g.static_groups, o->g.mse, o->g.damp, o->kernel ? o->kernel : "auto");
    return quantize_sha256_hex(buf, (size_t)n, key);
}

static void
ckpt_path(char *p, size_t n, const char *dir, int64_t layer)
{
    snprintf(p, n, "%s/blk.%lld.grid", dir, (long long)layer);
}

/* ckpt_write() : block layer's grids to <dir>/blk.<layer>.grid, atomically,
 * sealed with the SHA-256 of its bytes.  Errors name the file. */
static int
ckpt_write(const char *dir, const char *key, int64_t layer, struct qmodel_tensor *t,
           const struct qmethod_linear *lin, int64_t n, struct diag *d)
{
    enum { N_PIECE = 4 + 14 * N_LIN_MAX };   /* the header, 14 pieces a linear */
    char path[4096], seal[65];
    char name[N_LIN_MAX][64];
    int32_t bits[N_LIN_MAX], sym[N_LIN_MAX];
    const void *p[N_PIECE];
    size_t len[N_PIECE];
    struct xout xo = { 0 };
    int k = 0, rc;

    if (n > N_LIN_MAX)
        return diag_set(d, ST_RANGE, "checkpoint: %lld linears a block, at most %d",
                        (long long)n, (int)N_LIN_MAX);
#define PIECE(ptr, n_) (p[k] = (ptr), len[k] = (size_t)(n_), k++)
    PIECE(CKPT_MAGIC, 8);
    PIECE(key, 64);
    PIECE(&layer, sizeof layer);
    PIECE(&n, sizeof n);
    for (int64_t i = 0; i < n; i++) {
        const struct qgrid *g = t[i].g;
        memset(name[i], 0, 64);
        snprintf(name[i], 64, "%s", t[i].name);
        bits[i] = g->bits;
        sym[i] = g->sym;
        PIECE(name[i], 64);
        PIECE(&bits[i], 4);
        PIECE(&sym[i], 4);
        PIECE(&g->group_size, 8);
        PIECE(&g->rows, 8);
        PIECE(&g->cols, 8);
        PIECE(&g->n_groups, 8);
        PIECE(&lin[i].st.damp, 8);
        PIECE(&lin[i].st.dead, 8);
        PIECE(&lin[i].st.loss, 8);
        PIECE(g->q, g->rows * g->cols);
        PIECE(g->scale, 4 * g->n_groups * g->rows);
        PIECE(g->zero, 4 * g->n_groups * g->rows);
        PIECE(g->g_idx, 4 * g->cols);
    }
#undef PIECE
    if (quantize_sha256_hexv(p, len, k, seal) < 0)
        return diag_set(d, ST_NOMEM, "out of memory");
    ckpt_path(path, sizeof path, dir, layer);
    if ((rc = xout_open(&xo, path, true, d)) == 0) {
        for (int i = 0; i < k; i++)
            fwrite(p[i], 1, len[i], xo.fp);
        fwrite(seal, 1, CKPT_SEAL, xo.fp);
        rc = xout_commit(&xo, d);   /* a failed fwrite shows here (ferror) */
    }
    if (rc < 0)
        diag_prefix(d, "'%s'", path);
    return rc;
}

/* reads take n bytes from *p (left *left); false when short */
static bool
take(const uint8_t **p, size_t *left, void *dst, size_t n)
{
    if (*left < n)
        return false;
    memcpy(dst, *p, n);
    *p += n;
    *left -= n;
    return true;
}

/* Block layer's grids from its checkpoint into t[0..n) (names and shapes
 * as the model's); 1 when there is no checkpoint for it, 0 when read. */
static int
ckpt_read(const char *dir, const char *key, int64_t layer, const struct model *m,
          const char *const *names, int n, const struct gptq_opts *go, struct qmodel_tensor *t,
          struct qmethod_linear *lin, struct diag *d)
{
    char path[4096], magic[8], fkey[64], seal[65];
    char *buf = NULL;
    const uint8_t *p;
    size_t len, left;
    int64_t fl, fn;
    int rc = 0;

    ckpt_path(path, sizeof path, dir, layer);
    if (access(path, F_OK) != 0)
        return 1;
    if ((rc = read_file_all(path, (size_t)1 << 34, &buf, &len, d)) < 0) {
        diag_prefix(d, "'%s'", path);
        return rc;
    }
    p = (const uint8_t *)buf;
    left = len;
#define BAD(...) do { rc = diag_set(d, ST_FORMAT, __VA_ARGS__); goto out; } while (0)
    if (!take(&p, &left, magic, 8) || (memcmp(magic, CKPT_MAGIC, 8) &&
                                       memcmp(magic, CKPT_MAGIC_V1, 8)))
        BAD("'%s': not a grid checkpoint", path);
    if (!memcmp(magic, CKPT_MAGIC_V1, 8))
        BAD("'%s': a checkpoint of an earlier llmkit, without a checksum (remove the "
            "directory to start afresh)", path);
    if (left < CKPT_SEAL)
        BAD("'%s': truncated", path);
    left -= CKPT_SEAL;
    if ((rc = quantize_sha256_hex(buf, len - CKPT_SEAL, seal)) < 0) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    if (memcmp(seal, buf + len - CKPT_SEAL, CKPT_SEAL))
        BAD("'%s': checksum mismatch: the checkpoint is corrupt or truncated (remove it "
            "to recompute its block)", path);
    if (!take(&p, &left, fkey, 64) || !take(&p, &left, &fl, 8) || !take(&p, &left, &fn, 8))
        BAD("'%s': truncated", path);
    if (memcmp(fkey, key, 64)) {
        rc = diag_set(d, ST_RANGE, "'%s': checkpoint of another model, text or options "
                      "(remove the directory to start afresh)", path);
        goto out;
    }
    if (fl != layer || fn != n)
        BAD("'%s': block %lld with %lld linears, expected block %lld with %d", path,
            (long long)fl, (long long)fn, (long long)layer, n);
    for (int i = 0; i < n; i++) {
        const struct model_weight *w = calib_model_weight(m, layer, names[i]);
        char name[64];
        int32_t bits, sym;
        int64_t gsz, rows, cols, ng;
        struct qgrid *g = calloc(1, sizeof *g);
        if (!g) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        t[i].g = g;
        if (!take(&p, &left, name, 64) || !take(&p, &left, &bits, 4) || !take(&p, &left, &sym, 4) ||
            !take(&p, &left, &gsz, 8) || !take(&p, &left, &rows, 8) || !take(&p, &left, &cols, 8) ||
            !take(&p, &left, &ng, 8) || !take(&p, &left, &lin[i].st.damp, 8) ||
            !take(&p, &left, &lin[i].st.dead, 8) || !take(&p, &left, &lin[i].st.loss, 8))
            BAD("'%s': truncated", path);
        if (memchr(name, 0, 64) == NULL || strcmp(name, names[i]) || !w || rows != w->rows ||
            cols != w->cols || bits != go->bits || gsz != go->group_size || sym != go->sym)
            BAD("'%s': linear %d does not match the model and options", path, i);
        if ((rc = qgrid_alloc(g, bits, gsz, sym, rows, cols, d)) < 0)
            goto out;
        if (g->n_groups != ng)
            BAD("'%s': '%s' has %lld groups, expected %lld", path, name, (long long)ng,
                (long long)g->n_groups);
        if (!take(&p, &left, g->q, (size_t)(rows * cols)) ||
            !take(&p, &left, g->scale, (size_t)(ng * rows) * 4) ||
            !take(&p, &left, g->zero, (size_t)(ng * rows) * 4) ||
            !take(&p, &left, g->g_idx, (size_t)cols * 4))
            BAD("'%s': truncated", path);
        for (int64_t k = 0; k < rows * cols; k++)
            if (g->q[k] > (1 << bits) - 1)
                BAD("'%s': '%s': value out of the grid", path, name);
        for (int64_t k = 0; k < ng * rows; k++)
            if (!(g->scale[k] > 0) || !isfinite(g->scale[k]) || g->zero[k] < 0 ||
                g->zero[k] > (1 << bits) - 1)
                BAD("'%s': '%s': bad scale or zero", path, name);
        for (int64_t k = 0; k < cols; k++)
            if (g->g_idx[k] < 0 || g->g_idx[k] >= ng)
                BAD("'%s': '%s': bad group index", path, name);
        snprintf(lin[i].name, sizeof lin[i].name, "%s", name);
        lin[i].rows = rows;
        lin[i].cols = cols;
    }
    if (left)
        BAD("'%s': %zu bytes after the last linear", path, left);
#undef BAD
out:
    free(buf);
    return rc;
}

/* ---- the runs ---- */

struct hcap {
    const char *name;           /* the linear whose input is wanted */
    struct gptq_hessian *h;
    struct diag *d;
};

static int
hcap_hook(void *ctx, const struct model_hook_event *ev)
{
    struct hcap *c = ctx;
    if (ev->site != MODEL_HOOK_LINEAR_IN || strcmp(ev->name, c->name))
        return 0;
    return gptq_hessian_add(c->h, ev->x, ev->n_tok, ev->ld, c->d);
}

static int
add_grid(struct qmodel *qm, const char *name, struct qgrid *g, struct diag *d)
{
    struct qmodel_tensor *t = &qm->t[qm->n];
    if (!(t->name = strdup(name))) {
        qgrid_free(g);
        free(g);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    t->g = g;
    t->f32 = NULL;
    qm->n++;
    return 0;
}

/* one block of GPTQ, true-sequential; grids appended to qm, stats to lin */
static int
gptq_block(struct calib *c, const struct qmethod_opts *o, struct threadpool *tp,
           const char *const *names, const int *grp, int n, struct qmodel *qm,
           struct qmethod_linear *lin, struct diag *d)
{
    float *W = NULL, *dq = NULL;
    int rc = 0;

    for (int sg = 0; sg < 4; sg++) {
        int first = -1;
        for (int i = 0; i < n && first < 0; i++)
            if (grp[i] == sg)
                first = i;
        if (first < 0)
            continue;
        const struct model_weight *w0 = calib_weight(c, names[first]);
        struct gptq_hessian h;
        struct hcap hc = { names[first], &h, d };
        struct model_hooks hooks = { hcap_hook, &hc, MODEL_HOOK_LINEAR_IN };

        if ((rc = gptq_hessian_init(&h, w0->cols, d)) < 0)
            goto out;
        struct gptq_factor f;
        if ((rc = calib_run_layer(c, &hooks, names[first], NULL, d)) < 0 ||
            (rc = gptq_factor_init(&f, h.h, w0->cols, &o->g, d)) < 0) {
            gptq_hessian_release(&h);
            diag_prefix(d, "'%s'", names[first]);
            goto out;
        }
        /* the sub-group's linears share the Hessian, so the factor */
        for (int i = first; i < n; i++) {
            if (grp[i] != sg)
                continue;
            const struct model_weight *w = calib_weight(c, names[i]);
            size_t sz = (size_t)(w->rows * w->cols);
            struct qgrid *g = calloc(1, sizeof *g);
            struct qmethod_linear *l = &lin[qm->n];
            double t0 = now_s();
            free(W);
            free(dq);
            W = malloc(sz * sizeof *W);
            dq = malloc(sz * sizeof *dq);
            if (!g || !W || !dq) {
                free(g);
                rc = diag_set(d, ST_NOMEM, "out of memory");
                break;
            }
            if ((rc = calib_weight_f32(c, names[i], W, d)) < 0 ||
                (rc = gptq_solve(W, w->rows, &f, &o->g, tp, g, &l->st, d)) < 0) {
                free(g);
                diag_prefix(d, "'%s'", names[i]);
                break;
            }
            if (l->st.damp > o->g.damp + 1e-12)
                runcb_warn(&o->cb, "'%s': the Hessian was not positive definite with damping "
                           "%g; raised to %.2f", names[i], o->g.damp, l->st.damp);
            gptq_dequant(g, dq);
            l->seconds = now_s() - t0;
            snprintf(l->name, sizeof l->name, "%s", names[i]);
            l->rows = w->rows;
            l->cols = w->cols;
            if ((rc = add_grid(qm, names[i], g, d)) < 0 ||
                (rc = calib_set_weight(c, names[i], dq, d)) < 0)
                break;
        }
        gptq_factor_release(&f);
        gptq_hessian_release(&h);
        if (rc < 0)
            goto out;
    }
out:
    free(W);
    free(dq);
    return rc;
}

/* the dequantized grids of block layer put into the model (resume) */
static int
replay_block(struct calib *c, struct qmodel_tensor *t, int n, struct diag *d)
{
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const struct qgrid *g = t[i].g;
        float *dq = malloc((size_t)(g->rows * g->cols) * sizeof *dq);
        if (!dq)
            return diag_set(d, ST_NOMEM, "out of memory");
        gptq_dequant(g, dq);
        rc = calib_set_weight(c, t[i].name, dq, d);
        free(dq);
    }
    return rc;
}

/* calib_start() : the calibration states of o->calib (calib_open, which
 * checks the text's length before it allocates anything for the chunks),
 * then OpenBLAS's buffer: GPTQ and AWQ call BLAS, so it is mapped now, or
 * an out-of-memory error comes now, rather than a BLAS call spinning on it
 * later (blas.h); both after the cheap checks, so that a text too short is
 * exit 2 whatever memory the run would take. */
static int
calib_start(const struct qmethod_opts *o, struct calib **c, struct qmethod_report *rep,
            struct diag *d)
{
    struct calib_opts co = { o->calib_ctx, o->calib_chunks, o->n_threads, o->kernel };
    int rc;

    if ((rc = calib_open(c, o->input, o->calib, &co, d)) < 0)
        return rc;
    if (blas_prime(o->n_threads) < 0) {
        calib_free(*c);
        *c = NULL;
        return diag_set(d, ST_NOMEM, "out of memory for OpenBLAS's work buffer");
    }
    rep->calib_text_tokens = (*c)->n_text_tokens;
    runcb_info(&o->cb, "'%s': %lld tokens, %lld chunks of %lld", o->calib,
               (long long)(*c)->n_text_tokens, (long long)(*c)->n_chunks, (long long)(*c)->ctx);
    return 0;
}

static int
run_gptq(const struct qmethod_opts *o, struct qmodel *qm, struct qmethod_report *rep, struct diag *d)
{
    struct calib *c = NULL;
    struct threadpool *tp = NULL;
    char key[65];
    bool made_dir = false;
    int rc;

    if (!o->calib)
        return diag_set(d, ST_RANGE, "GPTQ needs calibration text (--calib)");
    if ((rc = calib_start(o, &c, rep, d)) < 0)
        return rc;
    /* the solve's rows over a pool of our own and its BLAS calls on one
     * thread each: OpenBLAS's idle workers would spin (sched_yield) on
     * the cores the forward pass runs on */
    if ((rc = quantize_threadpool(&tp, o->n_threads, d)) < 0)
        goto out;
#ifdef LLMKIT_HAVE_OPENBLAS
    openblas_set_num_threads(1);
#endif
    const struct model *m = c->m;
    const int64_t L = m->hp.n_layer;
    snprintf(qm->prov.calib_sha256, sizeof qm->prov.calib_sha256, "%s", c->sha256);
    rep->calib_tokens = qm->prov.calib_tokens = calib_tokens(c);
    if (o->checkpoint_dir) {
        if ((rc = qmethod_key(o, c->sha256, key, d)) < 0)
            goto out;
        if (mkdir(o->checkpoint_dir, 0777) == 0) {
            made_dir = true;
        } else if (errno != EEXIST) {
            rc = diag_set(d, ST_IO, "'%s': %s", o->checkpoint_dir, strerror(errno));
            goto out;
        }
    }
    runcb_progress(&o->cb, "quantizing", 0, L);
    for (int64_t l = 0; l < L; l++) {
        const char *names[N_LIN_MAX];
        int grp[N_LIN_MAX], n;
        int64_t base = qm->n;

        calib_linears(c, l, names, grp, &n);
        rc = 1;
        if (o->checkpoint_dir && rep->resumed_blocks == l) {
            rc = ckpt_read(o->checkpoint_dir, key, l, m, names, n, &o->g, qm->t + base,
                           rep->lin + base, d);
            if (rc < 0) {
                for (int i = 0; i < n; i++) {
                    if (qm->t[base + i].g)
                        qgrid_free(qm->t[base + i].g);
                    free(qm->t[base + i].g);
                    qm->t[base + i].g = NULL;
                }
                goto out;
            }
            if (rc == 0) {
                for (int i = 0; i < n; i++)
                    if (!(qm->t[base + i].name = strdup(names[i]))) {
                        rc = diag_set(d, ST_NOMEM, "out of memory");
                        qm->n = base + i;
                        goto out;
                    }
                qm->n += n;
                rep->resumed_blocks++;
                if ((rc = replay_block(c, qm->t + base, n, d)) < 0)
                    goto out;
            }
        }
        if (rc == 1) {
            if ((rc = gptq_block(c, o, tp, names, grp, n, qm, rep->lin, d)) < 0)
                goto out;
            if (o->checkpoint_dir &&
                (rc = ckpt_write(o->checkpoint_dir, key, l, qm->t + base, rep->lin + base, n, d)) < 0)
                goto out;
        }
        for (int i = 0; i < n; i++)
            rep->n_damp_raised += rep->lin[base + i].st.damp > o->g.damp + 1e-12;
        if (l + 1 < L && (rc = calib_advance(c, d)) < 0)
            goto out;
        runcb_progress(&o->cb, "quantizing", l + 1, L);
    }
    if (rep->resumed_blocks)
        runcb_info(&o->cb, "resumed %lld of %lld blocks from '%s'", (long long)rep->resumed_blocks,
                   (long long)L, o->checkpoint_dir);
out:
    /* a directory this run made and filled with nothing (a failure in the
     * first block, a full disk) is no checkpoint: rmdir takes only an empty one */
    if (rc < 0 && made_dir)
        rmdir(o->checkpoint_dir);
    threadpool_free(tp);
    calib_free(c);
    return rc;
}

static int
run_awq(const struct qmethod_opts *o, struct qmodel *qm, struct qmethod_report *rep, struct diag *d)
{
    struct awq_opts ao = AWQ_OPTS_INIT;
    struct calib *c = NULL;
    int rc;

    if (!o->calib)
        return diag_set(d, ST_RANGE, "AWQ needs calibration text (--calib)");
    if (o->g.sym)
        return diag_set(d, ST_RANGE, "AWQ quantizes with a zero point per group (--asym)");
    if ((rc = calib_start(o, &c, rep, d)) < 0)
        return rc;
    ao.bits = o->g.bits;
    ao.group_size = o->g.group_size;
    ao.n_threads = o->n_threads;
    if ((rc = awq_quantize(c, &ao, qm, &o->cb, NULL, d)) == 0) {
        rep->calib_tokens = qm->prov.calib_tokens;
        /* the report lists the grids (the rescaled norms are f32) */
        for (int64_t i = 0; i < qm->n; i++) {
            const struct qgrid *g = qm->t[i].g;
            if (!g)
                continue;
            struct qmethod_linear *li = &rep->lin[rep->n++];
            snprintf(li->name, sizeof li->name, "%s", qm->t[i].name);
            li->rows = g->rows;
            li->cols = g->cols;
        }
    }
    calib_free(c);
    return rc;
}

static int
run_rtn(const struct qmethod_opts *o, struct model *m, struct qmodel *qm, struct qmethod_report *rep,
        struct diag *d)
{
    float *W = NULL;
    int rc = 0;

    runcb_progress(&o->cb, "quantizing", 0, m->hp.n_layer);
    for (int64_t l = 0; l < m->hp.n_layer && rc == 0; l++) {
        const char *names[N_LIN_MAX];
        int grp[N_LIN_MAX], n;
        calib_model_linears(m, l, names, grp, &n);
        for (int i = 0; i < n; i++) {
            const struct model_weight *w = calib_model_weight(m, l, names[i]);
            struct qmethod_linear *li = &rep->lin[qm->n];
            struct qgrid *g = calloc(1, sizeof *g);
            double t0 = now_s();
            free(W);
            if (!g || !(W = malloc((size_t)(w->rows * w->cols) * sizeof *W))) {
                free(g);
                W = NULL;
                rc = diag_set(d, ST_NOMEM, "out of memory");
                break;
            }
            if ((rc = calib_dequant_weight(w, W, d)) < 0 ||
                (rc = rtn_quantize(W, w->rows, w->cols, &o->g, g, d)) < 0) {
                free(g);
                break;
            }
            li->seconds = now_s() - t0;
            snprintf(li->name, sizeof li->name, "%s", names[i]);
            li->rows = w->rows;
            li->cols = w->cols;
            if ((rc = add_grid(qm, names[i], g, d)) < 0)
                break;
        }
        if (rc == 0)
            runcb_progress(&o->cb, "quantizing", l + 1, m->hp.n_layer);
    }
    free(W);
    return rc;
}

int
qmethod_run(const struct qmethod_opts *o, struct qmodel *qm, struct qmethod_report *rep,
            struct diag *d)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct model *m = NULL;
    double t0 = now_s(), c0 = cpu_s();
    int64_t n_lin = 0;
    int rc;

    memset(qm, 0, sizeof *qm);
    memset(rep, 0, sizeof *rep);
    if ((rc = gptq_check_opts(&o->g, d)) < 0)
        return rc;
    /* the linears to quantize, counted on the model (no forward pass) */
    mo.n_threads = 1;
    mo.kernel = o->kernel;
    if ((rc = model_load(&m, o->input, &mo, d)) < 0) {
        diag_prefix(d, "'%s'", o->input);
        return rc;
    }
    for (int64_t l = 0; l < m->hp.n_layer; l++) {
        const char *names[N_LIN_MAX];
        int grp[N_LIN_MAX], n;
        calib_model_linears(m, l, names, grp, &n);
        n_lin += n;
        for (int i = 0; i < n; i++) {
            const struct model_weight *w = calib_model_weight(m, l, names[i]);
            rep->n_params += w->rows * w->cols;
            if ((rc = qmodel_hf_fits(o->format, o->g.bits, o->g.group_size, names[i], w->rows,
                                     w->cols, d)) < 0) {
                diag_prefix(d, "'%s'", o->input);
                goto out;
            }
        }
    }
    if (n_lin == 0) {
        rc = diag_set(d, ST_FORMAT, "'%s': no quantizable linears (the model has no blocks)",
                      o->input);
        goto out;
    }
    qm->t = calloc((size_t)n_lin, sizeof *qm->t);
    rep->lin = calloc((size_t)n_lin, sizeof *rep->lin);
    if (!qm->t || !rep->lin) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    qm->src_path = o->input;
    qm->prov.method = qmethod_name(o->method);
    qm->prov.bits = o->g.bits;
    qm->prov.group_size = o->g.group_size;
    qm->prov.sym = o->g.sym;
    qm->prov.mse = o->g.mse;
    if (o->method == QM_GPTQ) {
        qm->prov.act_order = o->g.act_order;
        qm->prov.static_groups = o->g.static_groups;
        qm->prov.true_sequential = true;
        qm->prov.damp = o->g.damp;
    }
    if (o->method == QM_RTN) {
        rc = run_rtn(o, m, qm, rep, d);
        rep->n = qm->n;
    } else {
        model_unload(m);
        m = NULL;
        if (o->method == QM_AWQ) {
            rc = run_awq(o, qm, rep, d);
        } else {
            rc = run_gptq(o, qm, rep, d);
            rep->n = qm->n;
        }
    }
    rep->seconds = now_s() - t0;
    rep->cpu_seconds = cpu_s() - c0;
out:
    if (m)
        model_unload(m);
    if (rc < 0) {
        qmodel_release(qm);
        qmethod_report_release(rep);
    }
    return rc;
}

void
qmethod_checkpoint_remove(const char *dir)
{
    DIR *dp = opendir(dir);
    struct dirent *e;
    char path[4096];

    if (!dp)
        return;
    while ((e = readdir(dp)))
        if (!strncmp(e->d_name, "blk.", 4) && strstr(e->d_name, ".grid")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(dp);
    rmdir(dir);
}
