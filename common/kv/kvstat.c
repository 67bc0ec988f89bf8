/*
 * kvstat.c - inputs, reports and plots for kvstat (see kvstat.h).
 *
 * The run reads and checks everything first (models, workload, trace), then
 * opens the outputs and writes them, so that bad input never leaves a file
 * behind.  Records are built as lists of typed fields and rendered three
 * ways: an aligned table (sizes in KiB/MiB/GiB, fractions in percent), CSV
 * and JSON Lines (raw numbers: bytes, fractions, ratios).  Strings from the
 * inputs (a model's general.name, file names) are escaped in the table and
 * in CSV (escape.h); JSON carries them as they are.
 */
#include "kvstat.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "json.h"
#include "svg.h"
#include "xio.h"

#define MAX_CONFIG_BYTES ((size_t)64 << 20)
#define MAX_LENGTHS_BYTES ((size_t)1 << 30)
#define MAX_TRACE_LINE 65536
#define JSON_INT_MAX ((int64_t)1 << 53)

void
kvstat_opts_init(struct kvstat_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->kv_type = KV_DTYPE_F16;
    o->batch = 1;
    o->block_size = 16;
    o->weights = -1;
    o->dist = -1;
    o->n = 1000;
    o->seed = 1;
    o->output = "-";
    o->format = KVSTAT_TABLE;
}

static const char *
base_name(const char *path)
{
    const char *b = strrchr(path, '/');

    return b && b[1] ? b + 1 : path;
}

/* ---- JSON members (config.json names, traces) ---- */

/* An integer member: 1 when absent or null, 0 found, -ST_FORMAT when not an
 * integer in [0, 2^53] (integral reals such as 4096.0 accepted). */
static int
cfg_int(const json_t *o, const char *key, int64_t *out, struct diag *d)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    double x;

    if (!v || json_is_null(v))
        return 1;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || i > JSON_INT_MAX)
            return diag_set(d, ST_FORMAT, "'%s' = %lld out of range", key, (long long)i);
        *out = (int64_t)i;
        return 0;
    }
    if (json_is_real(v)) {
        x = json_real_value(v);
        if (x >= 0 && x <= (double)JSON_INT_MAX && x == floor(x)) {
            *out = (int64_t)x;
            return 0;
        }
    }
    return diag_set(d, ST_FORMAT, "'%s' is not a non-negative integer", key);
}

static const char *
cfg_str(const json_t *o, const char *key)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;

    return v && json_is_string(v) ? json_string_value(v) : NULL;
}

/* ---- model descriptions: the architecture table's readers (arch.h) ---- */

int
kv_model_from_config(const json_t *root, struct kv_model *m, struct diag *d)
{
    struct arch_hparams hp;
    const char *s;
    int rc;

    if (!json_is_object(root))
        return diag_set(d, ST_FORMAT, "config is not a JSON object");
    if ((rc = arch_read_config(root, ARCH_READ_KV, &hp, d)) < 0)
        return rc;
    if ((s = cfg_str(root, "_name_or_path")) && *s)
        snprintf(m->name, sizeof(m->name), "%s", s);
    if ((s = hp.model_type ? hp.model_type : hp.hf_class))
        snprintf(m->arch, sizeof(m->arch), "%s", s);
    return kv_model_from_hparams(&hp, m, d);
}

int
kv_model_from_gguf(const struct gguf *g, struct kv_model *m, struct diag *d)
{
    struct arch_hparams hp;
    const char *name = NULL;
    int rc;

    if (!gguf_get(g, "general.architecture"))
        return diag_set(d, ST_FORMAT, "no general.architecture");
    if ((rc = arch_read_hparams(g, ARCH_READ_KV, &hp, d)) < 0)
        return rc;
    snprintf(m->arch, sizeof(m->arch), "%s", hp.name);
    if (gguf_get_str(g, "general.name", &name, NULL) == 0 && *name)
        snprintf(m->name, sizeof(m->name), "%s", name);
    return kv_model_from_hparams(&hp, m, d);
}

/* ---- opening a model input ---- */

int
kvstat_load_model(const char *path, struct kv_model *m, int64_t *weights, struct diag *d)
{
    struct src s;
    struct gguf g;
    char *cfgpath = NULL, *buf = NULL;
    const char *p = path;
    json_t *cfg = NULL;
    size_t n = 0, cap = 0;
    int rc, c = EOF;
    bool is_gguf;

    if (weights)
        *weights = -1;
    if (strcmp(path, "-") && path_is_dir(path)) {
        cfgpath = path_join(path, "config.json");
        if (!cfgpath)
            return diag_set(d, ST_NOMEM, "out of memory");
        p = cfgpath;
    }
    rc = src_open(&s, p, d);
    if (rc) {
        if (cfgpath)
            diag_prefix(d, "config.json");
        free(cfgpath);
        src_close(&s);
        return rc;
    }
    /* Peek at the first significant byte: 'G' (GGUF magic) or JSON. */
    if (s.map) {
        size_t i = 0;
        while (i < s.map_len && isspace(s.map[i]))
            i++;
        c = i < s.map_len ? s.map[i] : EOF;
    } else {
        while ((c = getc(s.fp)) != EOF && isspace(c))
            ;
        if (c != EOF)
            ungetc(c, s.fp);
    }
    is_gguf = c == 'G' || (c != '{' && strlen(p) > 5 && !strcmp(p + strlen(p) - 5, ".gguf"));
    if (is_gguf) {
        rc = gguf_read(&g, &s, d);
        if (rc == 0) {
            rc = kv_model_from_gguf(&g, m, d);
            if (rc == 0 && weights)
                *weights = g.data_size <= (uint64_t)INT64_MAX ? (int64_t)g.data_size : -1;
            if (!s.map && s.fp) {
                /* Drain a pipe so the writer does not die of SIGPIPE. */
                char sink[65536];
                while (fread(sink, 1, sizeof(sink), s.fp) > 0)
                    ;
            }
        }
        gguf_release(&g);
        goto out;
    }
    if (c != '{') {
        rc = diag_set(d, ST_FORMAT, "not a GGUF file or a JSON config");
        goto out;
    }
    if (s.map) {
        rc = json_load_mem((const char *)s.map, s.map_len, &cfg, d);
    } else {
        for (;;) {
            size_t k;
            if (cap - n < 4096) {
                char *nb;
                if (cap >= MAX_CONFIG_BYTES) {
                    rc = diag_set(d, ST_FORMAT, "config larger than %zu bytes", MAX_CONFIG_BYTES);
                    goto out;
                }
                cap = cap ? cap * 2 : 65536;
                nb = realloc(buf, cap);
                if (!nb) {
                    rc = diag_set(d, ST_NOMEM, "out of memory");
                    goto out;
                }
                buf = nb;
            }
            k = fread(buf + n, 1, cap - n, s.fp);
            n += k;
            if (k == 0)
                break;
        }
        if (ferror(s.fp)) {
            rc = diag_set(d, ST_IO, "read error: %s", strerror(errno));
            goto out;
        }
        rc = json_load_mem(buf, n, &cfg, d);
    }
    if (rc == 0)
        rc = kv_model_from_config(cfg, m, d);
out:
    if (rc == 0 && !m->name[0]) {
        const char *b = base_name(cfgpath ? path : p);
        snprintf(m->name, sizeof(m->name), "%s", strcmp(b, "-") ? b : "<stdin>");
    }
    json_decref(cfg);
    free(buf);
    free(cfgpath);
    src_close(&s);
    return rc;
}

/* ---- lengths files ---- */

static bool
parse_len(const char **p, const char *end, int64_t *out)
{
    const char *q = *p;
    int64_t v = 0;

    if (q >= end || !isdigit((unsigned char)*q))
        return false;
    for (; q < end && isdigit((unsigned char)*q); q++) {
        v = v * 10 + (*q - '0');
        if (v > KV_MAX_LEN)
            return false;
    }
    *p = q;
    *out = v;
    return true;
}

int
kvstat_parse_lengths(const char *buf, size_t len, struct kv_req **out, size_t *n, struct diag *d)
{
    const char *p = buf, *end = buf + len;
    struct kv_req *v = NULL;
    size_t cnt = 0, cap = 0;
    int64_t line = 0;

    *out = NULL;
    *n = 0;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end, *q = p;
        int64_t a, b;

        line++;
        while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < le && *q != '#') {
            if (!parse_len(&q, le, &a))
                goto bad;
            while (q < le && (*q == ' ' || *q == '\t'))
                q++;
            if (q < le && *q == ',')
                q++;
            while (q < le && (*q == ' ' || *q == '\t'))
                q++;
            if (!parse_len(&q, le, &b))
                goto bad;
            while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
                q++;
            if (q < le && *q != '#')
                goto bad;
            if (a + b < 1 || a + b > KV_MAX_LEN) {
                free(v);
                return diag_set(d, ST_FORMAT, "line %lld: request of %lld tokens not in [1, %lld]",
                                (long long)line, (long long)(a + b), (long long)KV_MAX_LEN);
            }
            if (cnt == cap) {
                size_t nc = cap ? cap * 2 : 1024;
                struct kv_req *nv = realloc(v, nc * sizeof(*nv));
                if (!nv) {
                    free(v);
                    return diag_set(d, ST_NOMEM, "out of memory");
                }
                v = nv;
                cap = nc;
            }
            v[cnt].prompt = a;
            v[cnt].output = b;
            cnt++;
        }
        p = eol ? eol + 1 : end;
    }
    if (cnt == 0) {
        free(v);
        return diag_set(d, ST_FORMAT, "no requests");
    }
    *out = v;
    *n = cnt;
    return 0;
bad:
    free(v);
    return diag_set(d, ST_FORMAT, "line %lld: expected 'PROMPT OUTPUT' (two token counts up to %lld)",
                    (long long)line, (long long)KV_MAX_LEN);
}

/* ---- KV traces ---- */

static const char *const phase_names[KVTRACE_NPHASE] = { "prefill", "decode", "mixed" };

const char *
kvtrace_phase_name(enum kvtrace_phase p)
{
    return ((int)p >= 0 && p < KVTRACE_NPHASE) ? phase_names[p] : "?";
}

void
kvtrace_init(struct kvtrace *t)
{
    memset(t, 0, sizeof(*t));
    t->bucket = 1;
    t->first_step = -1;
    t->last_step = -1;
}

static int
tr_count(const json_t *o, const char *key, int64_t *out, int64_t line, struct diag *d)
{
    int rc = cfg_int(o, key, out, d);

    if (rc == 1)
        return diag_set(d, ST_FORMAT, "line %lld: missing '%s'", (long long)line, key);
    if (rc < 0)
        diag_prefix(d, "line %lld", (long long)line);
    return rc;
}

static int
tr_num(const json_t *o, const char *key, double lo, double hi, double *out, int64_t line,
       struct diag *d)
{
    const json_t *v = json_object_get(o, key);

    if (!v || json_is_null(v))
        return diag_set(d, ST_FORMAT, "line %lld: missing '%s'", (long long)line, key);
    if (!json_is_number(v))
        return diag_set(d, ST_FORMAT, "line %lld: '%s' is not a number", (long long)line, key);
    *out = json_number_value(v);
    if (!(*out >= lo && *out <= hi))
        return diag_set(d, ST_FORMAT, "line %lld: '%s' = %g out of range [%g, %g]", (long long)line,
                        key, *out, lo, hi);
    return 0;
}

static void
pt_merge(struct kvtrace_point *a, const struct kvtrace_point *b)
{
    a->t = b->t;
    a->step = b->step;
    if (b->used > a->used)
        a->used = b->used;
    if (b->total > a->total)
        a->total = b->total;
    if (b->running > a->running)
        a->running = b->running;
    if (b->waiting > a->waiting)
        a->waiting = b->waiting;
    a->preemptions += b->preemptions;
    a->n += b->n;
}

static void
tr_point(struct kvtrace *t, const struct kvtrace_point *p)
{
    size_t i;

    if (t->n_pts && t->pts[t->n_pts - 1].n < t->bucket) {
        pt_merge(&t->pts[t->n_pts - 1], p);
        return;
    }
    if (t->n_pts == KVTRACE_POINTS) {
        /* full: halve the resolution, pairs of points become one */
        for (i = 0; i < KVTRACE_POINTS / 2; i++) {
            t->pts[i] = t->pts[2 * i];
            pt_merge(&t->pts[i], &t->pts[2 * i + 1]);
        }
        t->n_pts = KVTRACE_POINTS / 2;
        t->bucket *= 2;
        if (t->pts[t->n_pts - 1].n < t->bucket) {
            pt_merge(&t->pts[t->n_pts - 1], p);
            return;
        }
    }
    t->pts[t->n_pts++] = *p;
}

int
kvtrace_add_line(struct kvtrace *t, const char *line, size_t len, struct diag *d)
{
    int64_t ln = ++t->lineno;
    int64_t step, running, waiting, used, nfree, total, bs, stored, pre, hits;
    double time_ms, waste;
    const char *s;
    json_t *o;
    struct kvtrace_phase_stats *ph;
    struct kvtrace_point pt;
    enum kvtrace_phase phase;
    size_t i;
    int rc = -ST_FORMAT, k;

    for (i = 0; i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n'); i++)
        ;
    if (i == len)
        return 0;
    /* (json_load_mem: jansson's parse guarded against a failed allocation) */
    if ((rc = json_load_mem(line, len, &o, d)) < 0) {
        diag_prefix(d, "line %lld", (long long)ln);
        return rc;
    }
    rc = -ST_FORMAT;
    if (!json_is_object(o)) {
        diag_set(d, ST_FORMAT, "line %lld: not a JSON object", (long long)ln);
        goto out;
    }
    s = cfg_str(o, "schema");
    if (!s) {
        diag_set(d, ST_FORMAT, "line %lld: missing 'schema' (want \"%s\")", (long long)ln, KVTRACE_SCHEMA);
        goto out;
    }
    if (strcmp(s, KVTRACE_SCHEMA)) {
        diag_set(d, ST_FORMAT, "line %lld: unsupported schema '%.64s' (want \"%s\")", (long long)ln, s,
                 KVTRACE_SCHEMA);
        goto out;
    }
    if (json_object_get(o, "type")) {
        s = cfg_str(o, "type");
        if (!s) {
            diag_set(d, ST_FORMAT, "line %lld: 'type' is not a string", (long long)ln);
            goto out;
        }
        if (strcmp(s, "step")) {
            rc = 0;            /* header, summary, ...: not ours to read */
            goto out;
        }
    }
    if (tr_count(o, "step", &step, ln, d) || tr_num(o, "time_ms", 0, 1e15, &time_ms, ln, d) ||
        tr_count(o, "running", &running, ln, d) || tr_count(o, "waiting", &waiting, ln, d) ||
        tr_count(o, "blocks_used", &used, ln, d) || tr_count(o, "blocks_free", &nfree, ln, d) ||
        tr_count(o, "blocks_total", &total, ln, d) || tr_count(o, "block_size", &bs, ln, d) ||
        tr_count(o, "tokens_stored", &stored, ln, d) || tr_num(o, "waste", 0, 1, &waste, ln, d) ||
        tr_count(o, "preemptions", &pre, ln, d) || tr_count(o, "prefix_hits", &hits, ln, d))
        goto out;
    s = cfg_str(o, "phase");
    if (!s) {
        diag_set(d, ST_FORMAT, "line %lld: missing 'phase' (prefill, decode or mixed)", (long long)ln);
        goto out;
    }
    for (k = 0; k < KVTRACE_NPHASE && strcmp(s, phase_names[k]); k++)
        ;
    if (k == KVTRACE_NPHASE) {
        diag_set(d, ST_FORMAT, "line %lld: unknown phase '%.32s'", (long long)ln, s);
        goto out;
    }
    phase = (enum kvtrace_phase)k;

    /* Counts are below 2^53, so these sums and products cannot overflow. */
    if (total < 1 || bs < 1 || bs > 65536 || total > ((int64_t)1 << 40)) {
        diag_set(d, ST_FORMAT, "line %lld: %lld blocks of %lld tokens", (long long)ln,
                 (long long)total, (long long)bs);
        goto out;
    }
    if (used + nfree != total) {
        diag_set(d, ST_FORMAT, "line %lld: blocks_used %lld + blocks_free %lld != blocks_total %lld",
                 (long long)ln, (long long)used, (long long)nfree, (long long)total);
        goto out;
    }
    if (stored > used * bs) {
        diag_set(d, ST_FORMAT, "line %lld: %lld tokens do not fit in %lld blocks of %lld",
                 (long long)ln, (long long)stored, (long long)used, (long long)bs);
        goto out;
    }
    if (t->n_steps && bs != t->block_size) {
        diag_set(d, ST_FORMAT, "line %lld: block_size changed from %lld to %lld", (long long)ln,
                 (long long)t->block_size, (long long)bs);
        goto out;
    }
    if (t->n_steps && step <= t->last_step) {
        diag_set(d, ST_FORMAT, "line %lld: step %lld does not follow step %lld", (long long)ln,
                 (long long)step, (long long)t->last_step);
        goto out;
    }
    if (t->n_steps && time_ms < t->t_last) {
        diag_set(d, ST_FORMAT, "line %lld: time_ms goes back from %g to %g", (long long)ln,
                 t->t_last, time_ms);
        goto out;
    }

    ph = &t->phase[phase];
    ph->steps++;
    ph->time_ms += t->n_steps ? time_ms - t->t_last : 0.0;
    ph->sum_used += (double)used;
    ph->sum_util += (double)used / (double)total;
    ph->sum_running += (double)running;
    ph->slots += (double)(used * bs);
    ph->stored += (double)stored;
    ph->preemptions += pre;
    ph->prefix_hits += hits;

    if (!t->n_steps) {
        t->first_step = step;
        t->t_first = time_ms;
        t->block_size = bs;
    }
    t->n_steps++;
    t->last_step = step;
    t->t_last = time_ms;
    if (total > t->max_total)
        t->max_total = total;
    if (used > t->peak_used || t->n_steps == 1) {
        t->peak_used = used;
        t->peak_used_step = step;
    }
    if ((double)used / (double)total > t->peak_util)
        t->peak_util = (double)used / (double)total;
    t->sum_used += (double)used;
    t->sum_util += (double)used / (double)total;
    t->sum_waste += waste;
    t->slots += (double)(used * bs);
    t->stored += (double)stored;
    if (running > t->peak_running)
        t->peak_running = running;
    if (waiting > t->peak_waiting)
        t->peak_waiting = waiting;
    t->sum_running += (double)running;
    t->sum_waiting += (double)waiting;
    t->preemptions += pre;
    t->prefix_hits += hits;
    if (t->preemptions > JSON_INT_MAX || t->prefix_hits > JSON_INT_MAX) {
        diag_set(d, ST_FORMAT, "line %lld: event counts overflow", (long long)ln);
        goto out;
    }

    pt.t = time_ms;
    pt.step = step;
    pt.used = used;
    pt.total = total;
    pt.running = running;
    pt.waiting = waiting;
    pt.preemptions = pre;
    pt.n = 1;
    tr_point(t, &pt);
    rc = 0;
out:
    json_decref(o);
    return rc;
}

int
kvtrace_read(struct kvtrace *t, const char *path, struct diag *d)
{
    bool is_stdin = !strcmp(path, "-");
    FILE *fp;
    char *buf;
    size_t n;
    int rc = 0, c = 0;

    if (!is_stdin && path_is_dir(path))
        return diag_set(d, ST_IO, "is a directory");
    fp = is_stdin ? stdin : fopen(path, "rb");
    if (!fp)
        return diag_set(d, ST_IO, "cannot open: %s", strerror(errno));
    buf = malloc(MAX_TRACE_LINE + 1);
    if (!buf) {
        if (!is_stdin)
            fclose(fp);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    while (rc == 0 && c != EOF) {
        n = 0;
        while ((c = getc(fp)) != EOF && c != '\n') {
            if (n == MAX_TRACE_LINE) {
                rc = diag_set(d, ST_FORMAT, "line %lld: longer than %d bytes",
                              (long long)t->lineno + 1, MAX_TRACE_LINE);
                break;
            }
            buf[n++] = (char)c;
        }
        if (rc == 0 && (c != EOF || n > 0))
            rc = kvtrace_add_line(t, buf, n, d);
    }
    if (rc == 0 && ferror(fp))
        rc = diag_set(d, ST_IO, "read error: %s", strerror(errno));
    if (rc == 0 && t->n_steps == 0)
        rc = diag_set(d, ST_FORMAT, "no step records in trace");
    free(buf);
    if (!is_stdin)
        fclose(fp);
    return rc;
}

/* ---- SVG plot of a trace ---- */

struct axis {
    double lo, hi, step;
};

static struct axis
axis_for(double lo, double hi, int ticks)
{
    struct axis a;

    if (!(hi > lo))
        hi = lo + 1;
    a.step = svg_nice_step(hi - lo, ticks);
    a.lo = floor(lo / a.step) * a.step;
    a.hi = ceil(hi / a.step) * a.step;
    if (a.hi <= a.lo)
        a.hi = a.lo + a.step;
    return a;
}

static void
tick_label(char *b, size_t n, double v, double step)
{
    if (step >= 1 || v == 0)
        snprintf(b, n, "%.0f", v);
    else
        snprintf(b, n, "%.*f", (int)ceil(-log10(step)), v);
}

int
kvtrace_svg(const struct kvtrace *t, FILE *fp, const char *title, struct diag *d)
{
    const double W = 900, H = 520, L = 80, R = 80, T = 95, B = 70;
    const double pw = W - L - R, ph = H - T - B;
    double *xy = NULL, xs = 1.0, v, x0, x1, base = T + ph;
    const char *xlabel;
    struct axis ax, ayl, ayr;
    char lab[64];
    size_t n = t->n_pts, m, i;
    bool by_time = t->t_last > t->t_first;
    int s;

    if (n == 0)
        return diag_set(d, ST_FORMAT, "empty trace");
    xy = malloc(2 * (n + 1) * sizeof(*xy));
    if (!xy)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (by_time && t->t_last - t->t_first > 10000) {
        xs = 1e-3;
        xlabel = "time (s)";
    } else {
        xlabel = by_time ? "time (ms)" : "step";
    }
    x0 = by_time ? t->t_first * xs : (double)t->first_step;
    x1 = by_time ? t->t_last * xs : (double)t->last_step;
    ax = axis_for(x0, x1, 8);
    if (x1 > x0) {
        ax.lo = x0;
        ax.hi = x1;
    }
    ayl = axis_for(0, (double)(t->max_total > 0 ? t->max_total : 1), 5);
    ayr = axis_for(0, (double)(t->peak_running > t->peak_waiting ? t->peak_running : t->peak_waiting), 5);
    if (ayr.hi < 1)
        ayr = axis_for(0, 1, 1);
#define PX(x) (L + ((x) - ax.lo) / (ax.hi - ax.lo) * pw)
#define PYL(y) (T + ph - ((y) - ayl.lo) / (ayl.hi - ayl.lo) * ph)
#define PYR(y) (T + ph - ((y) - ayr.lo) / (ayr.hi - ayr.lo) * ph)

    svg_begin(fp, W, H, title);
    svg_text(fp, W / 2, 28, "middle", 16, "#222222", 0, "%s", title);
    svg_text(fp, W / 2, 48, "middle", 12, "#555555", 0,
             "%lld steps, peak %lld of %lld blocks (%.1f%%), mean utilisation %.1f%%, "
             "waste %.1f%%, %lld preemptions, %lld prefix-cache hits",
             (long long)t->n_steps, (long long)t->peak_used, (long long)t->max_total,
             100.0 * t->peak_util, 100.0 * t->sum_util / (double)t->n_steps,
             t->slots > 0 ? 100.0 * (1.0 - t->stored / t->slots) : 0.0,
             (long long)t->preemptions, (long long)t->prefix_hits);
    svg_rect(fp, L, T, pw, ph, "#fbfbfb", "none", 0);

    /* grid and left ticks */
    for (s = 0, v = ayl.lo; v <= ayl.hi + ayl.step * 1e-9 && s < 64; v += ayl.step, s++) {
        svg_line(fp, L, PYL(v), L + pw, PYL(v), "#dddddd", 1, NULL);
        tick_label(lab, sizeof(lab), v, ayl.step);
        svg_text(fp, L - 8, PYL(v) + 4, "end", 11, "#333333", 0, "%s", lab);
    }
    for (s = 0, v = ayr.lo; v <= ayr.hi + ayr.step * 1e-9 && s < 64; v += ayr.step, s++) {
        svg_line(fp, L + pw, PYR(v), L + pw + 5, PYR(v), "#333333", 1, NULL);
        tick_label(lab, sizeof(lab), v, ayr.step);
        svg_text(fp, L + pw + 8, PYR(v) + 4, "start", 11, "#333333", 0, "%s", lab);
    }
    for (s = 0, v = ceil(ax.lo / ax.step - 1e-9) * ax.step; v <= ax.hi + ax.step * 1e-9 && s < 64;
         v += ax.step, s++) {
        svg_line(fp, PX(v), base, PX(v), base + 5, "#333333", 1, NULL);
        tick_label(lab, sizeof(lab), v, ax.step);
        svg_text(fp, PX(v), base + 18, "middle", 11, "#333333", 0, "%s", lab);
    }
    svg_line(fp, L, T, L, base, "#333333", 1, NULL);
    svg_line(fp, L + pw, T, L + pw, base, "#333333", 1, NULL);
    svg_line(fp, L, base, L + pw, base, "#333333", 1, NULL);
    svg_text(fp, L + pw / 2, H - 22, "middle", 13, "#222222", 0, "%s", xlabel);
    svg_text(fp, 24, T + ph / 2, "middle", 13, "#222222", -90, "KV blocks");
    svg_text(fp, W - 20, T + ph / 2, "middle", 13, "#222222", 90, "sequences");

    /* series; a single point is drawn across the whole plot */
#define SERIES(field, PY) do { \
        for (i = 0; i < n; i++) { \
            double xv = by_time ? t->pts[i].t * xs : (double)t->pts[i].step; \
            xy[2 * i] = PX(xv); \
            xy[2 * i + 1] = PY((double)t->pts[i].field); \
        } \
        m = n; \
        if (n == 1) { \
            xy[0] = L; xy[2] = L + pw; xy[3] = xy[1]; m = 2; \
        } \
    } while (0)
    SERIES(used, PYL);
    svg_path(fp, xy, m, "#4c78a8", 1.5, NULL, "#4c78a8", 0.30, base);
    SERIES(total, PYL);
    svg_path(fp, xy, m, "#555555", 1.5, "6 4", "none", 0, base);
    SERIES(running, PYR);
    svg_path(fp, xy, m, "#54a24b", 1.8, NULL, "none", 0, base);
    SERIES(waiting, PYR);
    svg_path(fp, xy, m, "#f58518", 1.8, NULL, "none", 0, base);
#undef SERIES
    for (i = 0; i < n; i++) {
        if (t->pts[i].preemptions > 0) {
            double xv = PX(by_time ? t->pts[i].t * xs : (double)t->pts[i].step);
            svg_line(fp, xv, base, xv, base - 10, "#e45756", 2, NULL);
        }
    }

    /* legend: one row between the subtitle and the plot */
    {
        static const struct { const char *label, *color, *dash; double w, width; } lg[] = {
            { "blocks used", "#4c78a8", NULL, 8, 120 },
            { "blocks total", "#555555", "6 4", 1.5, 125 },
            { "running (right axis)", "#54a24b", NULL, 1.8, 170 },
            { "waiting (right axis)", "#f58518", NULL, 1.8, 165 },
            { "preemption", "#e45756", NULL, 2, 100 },
        };
        double lx = 0, ly = 72;
        for (i = 0; i < sizeof(lg) / sizeof(lg[0]); i++)
            lx += lg[i].width;
        lx = (W - lx) / 2;
        for (i = 0; i < sizeof(lg) / sizeof(lg[0]); i++) {
            if (i == 4)
                svg_line(fp, lx + 14, ly + 6, lx + 14, ly - 6, lg[i].color, lg[i].w, NULL);
            else
                svg_line(fp, lx + 2, ly, lx + 26, ly, lg[i].color, lg[i].w, lg[i].dash);
            svg_text(fp, lx + 32, ly + 4, "start", 11, "#222222", 0, "%s", lg[i].label);
            lx += lg[i].width;
        }
    }
#undef PX
#undef PYL
#undef PYR
    svg_end(fp);
    free(xy);
    if (ferror(fp))
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno));
    return 0;
}

/* ---- records: one list of typed fields, three renderings ---- */

enum fk { FK_NULL, FK_INT, FK_NUM, FK_STR, FK_BYTES, FK_PCT, FK_RATIO, FK_BOOL };

struct fld {
    const char *key;
    enum fk k;
    int64_t i;
    double x;
    char s[160];
};

#define REC_MAXF 36

struct rec {
    const char *type;
    bool vertical;             /* table: one row per field, one column per record */
    int n;
    struct fld f[REC_MAXF];
};

struct emit {
    FILE *fp;
    enum kvstat_format fmt;
    struct rec *rows;
    size_t n, cap;
    int sections;
    struct diag *d;
    int rc;
};

static struct fld *
rec_add(struct rec *r, const char *key, enum fk k)
{
    struct fld *f = &r->f[r->n < REC_MAXF ? r->n++ : REC_MAXF - 1];

    memset(f, 0, sizeof(*f));
    f->key = key;
    f->k = k;
    return f;
}

static void
rec_int(struct rec *r, const char *key, int64_t v)
{
    rec_add(r, key, FK_INT)->i = v;
}

static void
rec_bytes(struct rec *r, const char *key, int64_t v)
{
    rec_add(r, key, v < 0 ? FK_NULL : FK_BYTES)->i = v;
}

static void
rec_num(struct rec *r, const char *key, double v, enum fk k)
{
    rec_add(r, key, isfinite(v) ? k : FK_NULL)->x = v;
}

static void
rec_str(struct rec *r, const char *key, const char *v)
{
    struct fld *f = rec_add(r, key, v ? FK_STR : FK_NULL);
    size_t n;

    if (!v)
        return;
    n = strlen(v);
    if (n >= sizeof(f->s)) {
        /* cut before a UTF-8 character that would not fit whole */
        n = sizeof(f->s) - 1;
        while (n > 0 && ((unsigned char)v[n] & 0xc0) == 0x80)
            n--;
    }
    memcpy(f->s, v, n);
    f->s[n] = '\0';
}

static void
rec_bool(struct rec *r, const char *key, bool v)
{
    rec_add(r, key, FK_BOOL)->i = v;
}

static void
rec_null(struct rec *r, const char *key)
{
    rec_add(r, key, FK_NULL);
}

static void
rec_opt_int(struct rec *r, const char *key, int64_t v, bool present)
{
    if (present)
        rec_int(r, key, v);
    else
        rec_null(r, key);
}

static void
human_bytes(char *b, size_t n, int64_t v)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    double x = (double)v;
    int u = 0;

    while (x >= 1024 && u < 6) {
        x /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(b, n, "%lld B", (long long)v);
    else
        snprintf(b, n, "%.4g %s", x, unit[u]);
}

/* The text of a field: human-readable for the table (strings escaped), exact
 * for CSV (strings as they are: csv_cell escapes them). */
static void
cell(const struct fld *f, char *b, size_t n, bool table)
{
    switch (f->k) {
    case FK_NULL: snprintf(b, n, "%s", table ? "-" : ""); break;
    case FK_INT: snprintf(b, n, "%lld", (long long)f->i); break;
    case FK_BOOL: snprintf(b, n, "%s", f->i ? (table ? "yes" : "true") : (table ? "no" : "false")); break;
    case FK_STR:
        if (table)
            esc_str(b, n, f->s, 0);
        else
            snprintf(b, n, "%s", f->s);
        break;
    case FK_BYTES:
        if (table)
            human_bytes(b, n, f->i);
        else
            snprintf(b, n, "%lld", (long long)f->i);
        break;
    case FK_NUM: snprintf(b, n, table ? "%.4g" : "%.9g", f->x); break;
    case FK_PCT:
        if (table)
            snprintf(b, n, "%.2f%%", 100.0 * f->x);
        else
            snprintf(b, n, "%.9g", f->x);
        break;
    case FK_RATIO: snprintf(b, n, table ? "%.2fx" : "%.9g", f->x); break;
    }
}

static bool
fk_numeric(enum fk k)
{
    return k != FK_STR && k != FK_BOOL;
}

/* A CSV field: quoted per RFC 4180, control characters escaped. */
static void
csv_cell(FILE *fp, const char *s)
{
    esc_csv_field(fp, s);
}

static void
emit_flush(struct emit *e)
{
    char b[4 * sizeof(((struct fld *)0)->s) + 8];   /* a string field, every byte escaped */
    size_t r, w, *width = NULL;
    int j;

    if (e->n == 0)
        return;
    if (e->sections++)
        fputc('\n', e->fp);
    if (e->fmt == KVSTAT_CSV) {
        fputs("type", e->fp);
        for (j = 0; j < e->rows[0].n; j++)
            fprintf(e->fp, ",%s", e->rows[0].f[j].key);
        fputc('\n', e->fp);
        for (r = 0; r < e->n; r++) {
            csv_cell(e->fp, e->rows[r].type);
            for (j = 0; j < e->rows[r].n; j++) {
                cell(&e->rows[r].f[j], b, sizeof(b), false);
                fputc(',', e->fp);
                csv_cell(e->fp, b);
            }
            fputc('\n', e->fp);
        }
    } else if (e->rows[0].vertical) {
        /* key column, then one column per record; rows null everywhere dropped */
        size_t kw = 0;
        width = calloc(e->n, sizeof(*width));
        if (!width)
            goto nomem;
        for (j = 0; j < e->rows[0].n; j++) {
            size_t l = strlen(e->rows[0].f[j].key);
            kw = l > kw ? l : kw;
            for (r = 0; r < e->n; r++) {
                cell(&e->rows[r].f[j], b, sizeof(b), true);
                w = strlen(b);
                width[r] = w > width[r] ? w : width[r];
            }
        }
        for (j = 0; j < e->rows[0].n; j++) {
            bool any = false;
            for (r = 0; r < e->n; r++)
                any |= e->rows[r].f[j].k != FK_NULL;
            if (!any)
                continue;
            fprintf(e->fp, "%-*s", (int)kw, e->rows[0].f[j].key);
            for (r = 0; r < e->n; r++) {
                cell(&e->rows[r].f[j], b, sizeof(b), true);
                if (r + 1 < e->n)
                    fprintf(e->fp, "  %-*s", (int)width[r], b);
                else
                    fprintf(e->fp, "  %s", b);
            }
            fputc('\n', e->fp);
        }
    } else {
        /* columns null in every row are left out; alignment follows the data */
        int nf = e->rows[0].n, last = -1;
        bool *right, *skip;
        width = calloc((size_t)nf, sizeof(*width) + 2 * sizeof(bool));
        if (!width)
            goto nomem;
        right = (bool *)(width + nf);
        skip = right + nf;
        for (j = 0; j < nf; j++) {
            width[j] = strlen(e->rows[0].f[j].key);
            skip[j] = true;
            for (r = 0; r < e->n; r++) {
                enum fk k = e->rows[r].f[j].k;
                cell(&e->rows[r].f[j], b, sizeof(b), true);
                w = strlen(b);
                width[j] = w > width[j] ? w : width[j];
                if (k != FK_NULL) {
                    skip[j] = false;
                    right[j] = fk_numeric(k);
                }
            }
            if (!skip[j])
                last = j;
        }
        for (r = 0; r <= e->n; r++) {
            bool first = true;
            for (j = 0; j < nf; j++) {
                const char *txt = b;
                if (skip[j])
                    continue;
                if (r == 0)
                    txt = e->rows[0].f[j].key;
                else
                    cell(&e->rows[r - 1].f[j], b, sizeof(b), true);
                fputs(first ? "" : "  ", e->fp);
                first = false;
                if (j == last && !right[j])
                    fputs(txt, e->fp);
                else
                    fprintf(e->fp, right[j] ? "%*s" : "%-*s", (int)width[j], txt);
            }
            fputc('\n', e->fp);
        }
    }
    free(width);
    e->n = 0;
    return;
nomem:
    e->rc = diag_set(e->d, ST_NOMEM, "out of memory");
    e->n = 0;
}

static void
emit_json(struct emit *e, const struct rec *r)
{
    json_t *o = json_object();
    int j;

    if (!o) {
        e->rc = diag_set(e->d, ST_NOMEM, "out of memory");
        return;
    }
    json_object_set_new(o, "schema", json_string(KVSTAT_SCHEMA));
    json_object_set_new(o, "type", json_string(r->type));
    for (j = 0; j < r->n; j++) {
        const struct fld *f = &r->f[j];
        json_t *v;
        switch (f->k) {
        case FK_INT: case FK_BYTES: v = json_integer(f->i); break;
        case FK_NUM: case FK_PCT: case FK_RATIO: v = json_real(f->x); break;
        case FK_STR: v = json_string(f->s); break;
        case FK_BOOL: v = json_boolean(f->i); break;
        default: v = json_null(); break;
        }
        /* a string that is not UTF-8 (a file name) cannot go into JSON as is */
        if (!v && f->k == FK_STR)
            v = json_string("?");
        json_object_set_new(o, f->key, v ? v : json_null());
    }
    if (json_print_line(o, e->fp, e->d))
        e->rc = -ST_IO;
    json_decref(o);
}

static void
emit_rec(struct emit *e, const struct rec *r)
{
    if (e->rc)
        return;
    if (e->fmt == KVSTAT_JSON) {
        emit_json(e, r);
        return;
    }
    if (e->n && strcmp(e->rows[0].type, r->type))
        emit_flush(e);
    if (e->n == e->cap) {
        size_t nc = e->cap ? 2 * e->cap : 8;
        struct rec *nr = realloc(e->rows, nc * sizeof(*nr));
        if (!nr) {
            e->rc = diag_set(e->d, ST_NOMEM, "out of memory");
            return;
        }
        e->rows = nr;
        e->cap = nc;
    }
    e->rows[e->n++] = *r;
}

/* ---- the run ---- */

struct model_in {
    const char *input;
    struct kv_model m;
    int64_t weights;           /* -1 unknown */
    int64_t ctx;
    int64_t bpt;               /* bytes per token */
};

static const char *
disp(const char *path)
{
    return strcmp(path, "-") ? path : "<stdin>";
}

/* An output error's subject: "stdout", or the quoted path. */
static void
prefix_output(struct diag *d, const char *path)
{
    if (!strcmp(path, "-"))
        diag_prefix(d, "stdout");
    else
        diag_prefix(d, "'%s'", path);
}

/* A model from --layers, --heads, --kv-heads, --head-dim, or for MLA from
 * --layers, --kv-lora-rank and --rope-dim: its cache holds the latent and the
 * RoPE key, so heads and head size are needed only for --compare's rows. */
static int
model_from_flags(const struct kvstat_opts *o, struct kv_model *m, struct diag *d)
{
    if (o->rope_dim > 0 && o->kv_lora_rank <= 0)
        return diag_set(d, ST_RANGE, "--rope-dim needs --kv-lora-rank");
    if (o->kv_lora_rank > 0) {
        if (o->layers <= 0)
            return diag_set(d, ST_RANGE, "an MLA model from flags needs --layers and --kv-lora-rank");
        if (o->compare && (o->heads <= 0 || o->head_dim <= 0))
            return diag_set(d, ST_RANGE, "--compare needs --heads and --head-dim for the MHA, GQA "
                            "and MQA rows");
    } else if (o->layers <= 0 || o->heads <= 0 || o->head_dim <= 0) {
        return diag_set(d, ST_RANGE, "a model from flags needs --layers, --heads and --head-dim "
                        "(or --layers and --kv-lora-rank for MLA)");
    }
    snprintf(m->name, sizeof(m->name), "flags");
    m->n_layers = o->layers;
    m->n_heads = o->heads;
    m->n_kv_heads = o->kv_heads > 0 ? o->kv_heads : o->heads;
    m->head_dim_k = m->head_dim_v = o->head_dim;
    if (o->kv_lora_rank > 0) {
        m->kv_lora_rank = o->kv_lora_rank;
        m->rope_dim = o->rope_dim;
        m->n_kv_heads = m->n_heads;
    }
    if (kv_model_check(m, d)) {
        /* the flags were the input: a usage problem, not bad data */
        return -ST_RANGE;
    }
    return 0;
}

/* budget left for KV: --mem less the weights; -1 without --mem */
static int64_t
kv_budget(const struct kvstat_opts *o, const struct model_in *mi)
{
    int64_t w = o->weights >= 0 ? o->weights : (mi && mi->weights > 0 ? mi->weights : 0);

    if (o->mem <= 0)
        return -1;
    return o->mem > w ? o->mem - w : 0;
}

static int64_t
weights_of(const struct kvstat_opts *o, const struct model_in *mi)
{
    return o->weights >= 0 ? o->weights : (mi && mi->weights > 0 ? mi->weights : 0);
}

static void
model_record(const struct kvstat_opts *o, const struct model_in *mi, struct rec *r)
{
    const struct kv_model *m = &mi->m;
    enum kv_attn a = kv_model_attn(m);
    /* a sliding-window layer keeps its window only (kvmodel.h kv_seq_bytes) */
    int64_t seq = kv_seq_bytes(m, o->kv_type, mi->ctx, 0), batch = kv_mul(seq, o->batch);
    int64_t budget = kv_budget(o, mi);

    memset(r, 0, sizeof(*r));
    r->type = "model";
    r->vertical = true;
    rec_str(r, "input", disp(mi->input));
    rec_str(r, "name", m->name);
    rec_str(r, "arch", m->arch[0] ? m->arch : NULL);
    rec_str(r, "attention", kv_attn_name(a));
    rec_int(r, "n_layers", m->n_layers);
    /* null for an MLA model from flags given without them */
    rec_opt_int(r, "n_heads", m->n_heads, m->n_heads > 0);
    rec_opt_int(r, "n_kv_heads", m->n_kv_heads, a != KV_ATTN_MLA);
    rec_opt_int(r, "head_dim_k", m->head_dim_k, m->head_dim_k > 0);
    rec_opt_int(r, "head_dim_v", m->head_dim_v, m->head_dim_v > 0);
    rec_opt_int(r, "kv_lora_rank", m->kv_lora_rank, a == KV_ATTN_MLA);
    rec_opt_int(r, "rope_dim", m->rope_dim, a == KV_ATTN_MLA);
    rec_opt_int(r, "n_ctx_train", m->n_ctx_train, m->n_ctx_train > 0);
    rec_opt_int(r, "sliding_window", m->sliding_window, m->sliding_window > 0);
    rec_opt_int(r, "swa_layers", m->n_swa_layers, m->sliding_window > 0);
    rec_str(r, "kv_type", kv_dtype_get(o->kv_type)->name);
    rec_num(r, "bits_per_value", kv_dtype_bits(o->kv_type), FK_NUM);
    rec_int(r, "elems_per_token", kv_elems_per_token(m));
    rec_bytes(r, "bytes_per_token", mi->bpt);
    rec_int(r, "ctx", mi->ctx);
    rec_bytes(r, "bytes_per_seq", seq);
    if (m->layer_window)
        rec_bytes(r, "bytes_per_seq_no_window", kv_mul(mi->bpt, mi->ctx));
    /* with sliding windows, what generate budgets for one sequence of ctx
     * tokens in its paged pool (whole blocks; a window layer's window with
     * its slack and a chunk) */
    if (m->layer_window)
        rec_bytes(r, "bytes_per_seq_paged", kv_seq_bytes(m, o->kv_type, mi->ctx, o->block_size));
    rec_int(r, "batch", o->batch);
    rec_bytes(r, "bytes_per_batch", batch);
    rec_int(r, "block_size", o->block_size);
    if (budget >= 0) {
        int64_t ms = kv_fit_seqs_model(m, o->kv_type, budget, mi->ctx, o->block_size);
        rec_bytes(r, "mem", o->mem);
        rec_bytes(r, "weights", weights_of(o, mi));
        rec_bytes(r, "kv_budget", budget);
        rec_int(r, "max_seqs", ms);
        rec_int(r, "max_ctx", kv_fit_ctx_model(m, o->kv_type, budget, o->batch, o->block_size));
        rec_bool(r, "fits", ms >= o->batch);
    } else {
        rec_null(r, "mem");
        rec_null(r, "weights");
        rec_null(r, "kv_budget");
        rec_null(r, "max_seqs");
        rec_null(r, "max_ctx");
        rec_null(r, "fits");
    }
}

static void
variant_record(const struct kvstat_opts *o, const struct model_in *mi, const struct kv_variant *v,
               struct rec *r)
{
    int64_t seq = kv_mul(v->bytes_per_token, mi->ctx);
    int64_t budget = kv_budget(o, mi);

    memset(r, 0, sizeof(*r));
    r->type = "variant";
    rec_str(r, "model", mi->m.name);
    rec_str(r, "variant", v->label);
    rec_str(r, "attention", kv_attn_name(v->attn));
    rec_bool(r, "own", v->is_own);
    rec_opt_int(r, "n_kv_heads", v->n_kv_heads, v->attn != KV_ATTN_MLA);
    rec_opt_int(r, "kv_lora_rank", v->kv_lora_rank, v->attn == KV_ATTN_MLA);
    rec_opt_int(r, "rope_dim", v->rope_dim, v->attn == KV_ATTN_MLA);
    rec_int(r, "elems_per_token", v->elems_per_token);
    rec_bytes(r, "bytes_per_token", v->bytes_per_token);
    rec_int(r, "ctx", mi->ctx);
    rec_bytes(r, "bytes_per_seq", seq);
    rec_bytes(r, "bytes_per_batch", kv_mul(seq, o->batch));
    rec_num(r, "reduction", v->reduction, FK_RATIO);
    rec_num(r, "saving", v->reduction > 0 ? 1.0 - 1.0 / v->reduction : NAN, FK_PCT);
    if (budget >= 0) {
        rec_int(r, "max_seqs", kv_fit_seqs(budget, v->bytes_per_token, mi->ctx, o->block_size));
        rec_int(r, "max_ctx", kv_fit_ctx(budget, v->bytes_per_token, o->batch, o->block_size));
    } else {
        rec_null(r, "max_seqs");
        rec_null(r, "max_ctx");
    }
}

static void
workload_record(const struct kvstat_opts *o, const struct kv_workload *w, const char *source,
                size_t clipped, struct rec *r)
{
    memset(r, 0, sizeof(*r));
    r->type = "workload";
    r->vertical = true;
    rec_str(r, "source", source);
    rec_str(r, "dist", o->lengths ? NULL : kv_dist_name((enum kv_dist)o->dist));
    rec_opt_int(r, "seed", (int64_t)o->seed, !o->lengths);
    rec_int(r, "requests", w->n);
    rec_int(r, "clipped", (int64_t)clipped);
    rec_num(r, "mean_prompt", w->mean_prompt, FK_NUM);
    rec_num(r, "mean_output", w->mean_output, FK_NUM);
    rec_num(r, "mean_len", w->mean_len, FK_NUM);
    rec_int(r, "p50_len", w->p50);
    rec_int(r, "p90_len", w->p90);
    rec_int(r, "p99_len", w->p99);
    rec_int(r, "longest", w->longest);
    rec_int(r, "max_len", w->max_len);
    rec_int(r, "block_size", w->block_size);
}

static void
policy_record(const struct kvstat_opts *o, const struct kv_workload *w, enum kv_policy p,
              const struct model_in *mi, struct rec *r)
{
    const struct kv_waste *k = &w->pol[p];
    int64_t budget = mi ? kv_budget(o, mi) : -1;

    memset(r, 0, sizeof(*r));
    r->type = "policy";
    rec_str(r, "model", mi ? mi->m.name : NULL);
    rec_str(r, "policy", kv_policy_name(p));
    rec_num(r, "mean_slots", k->mean_slots, FK_NUM);
    rec_num(r, "waste", k->waste, FK_PCT);
    rec_num(r, "reservation", k->reservation, FK_PCT);
    rec_num(r, "fragmentation", k->fragmentation, FK_PCT);
    rec_num(r, "final_waste", k->final_waste, FK_PCT);
    if (mi)
        rec_bytes(r, "bytes_per_request", (int64_t)llround(k->mean_slots * (double)mi->bpt));
    else
        rec_null(r, "bytes_per_request");
    if (budget >= 0) {
        int64_t c = kv_concurrency(w, p, budget, mi->bpt);
        int64_t cm = kv_concurrency(w, KV_POLICY_MAX, budget, mi->bpt);
        rec_int(r, "concurrency", c);
        rec_num(r, "vs_max", cm > 0 ? (double)c / (double)cm : NAN, FK_RATIO);
    } else {
        rec_null(r, "concurrency");
        rec_null(r, "vs_max");
    }
}

static void
trace_record(const struct kvtrace *t, const char *input, const struct model_in *mi, struct rec *r)
{
    double ns = (double)t->n_steps;
    int64_t bb = mi ? kv_mul(mi->bpt, t->block_size) : -1;

    memset(r, 0, sizeof(*r));
    r->type = "trace";
    r->vertical = true;
    rec_str(r, "input", disp(input));
    rec_int(r, "steps", t->n_steps);
    rec_int(r, "first_step", t->first_step);
    rec_int(r, "last_step", t->last_step);
    rec_num(r, "duration_ms", t->t_last - t->t_first, FK_NUM);
    rec_int(r, "block_size", t->block_size);
    rec_int(r, "blocks_total", t->max_total);
    rec_int(r, "peak_blocks_used", t->peak_used);
    rec_int(r, "peak_step", t->peak_used_step);
    rec_num(r, "mean_blocks_used", t->sum_used / ns, FK_NUM);
    rec_num(r, "peak_utilisation", t->peak_util, FK_PCT);
    rec_num(r, "mean_utilisation", t->sum_util / ns, FK_PCT);
    rec_num(r, "waste", t->slots > 0 ? 1.0 - t->stored / t->slots : 0.0, FK_PCT);
    rec_num(r, "mean_step_waste", t->sum_waste / ns, FK_PCT);
    rec_int(r, "peak_running", t->peak_running);
    rec_num(r, "mean_running", t->sum_running / ns, FK_NUM);
    rec_int(r, "peak_waiting", t->peak_waiting);
    rec_num(r, "mean_waiting", t->sum_waiting / ns, FK_NUM);
    rec_int(r, "preemptions", t->preemptions);
    rec_int(r, "prefix_hits", t->prefix_hits);
    if (bb > 0) {
        rec_str(r, "model", mi->m.name);
        rec_bytes(r, "peak_bytes", kv_mul(bb, t->peak_used));
        rec_bytes(r, "mean_bytes", (int64_t)llround((double)bb * t->sum_used / ns));
    } else {
        rec_null(r, "model");
        rec_null(r, "peak_bytes");
        rec_null(r, "mean_bytes");
    }
}

static void
phase_record(const struct kvtrace *t, enum kvtrace_phase p, struct rec *r)
{
    const struct kvtrace_phase_stats *s = &t->phase[p];
    double ns = (double)s->steps;

    memset(r, 0, sizeof(*r));
    r->type = "phase";
    rec_str(r, "phase", kvtrace_phase_name(p));
    rec_int(r, "steps", s->steps);
    rec_num(r, "time_ms", s->time_ms, FK_NUM);
    rec_num(r, "mean_blocks_used", s->steps ? s->sum_used / ns : NAN, FK_NUM);
    rec_num(r, "mean_utilisation", s->steps ? s->sum_util / ns : NAN, FK_PCT);
    rec_num(r, "waste", s->slots > 0 ? 1.0 - s->stored / s->slots : (s->steps ? 0.0 : NAN), FK_PCT);
    rec_num(r, "mean_running", s->steps ? s->sum_running / ns : NAN, FK_NUM);
    rec_int(r, "preemptions", s->preemptions);
    rec_int(r, "prefix_hits", s->prefix_hits);
}

static int
load_workload(const struct kvstat_opts *o, const struct model_in *models, size_t nm,
              struct kv_workload *w, char *source, size_t ns, size_t *clipped, struct diag *d)
{
    struct kv_req *req = NULL;
    size_t n = 0, i;
    int64_t max_len = o->max_len, longest = 0;
    char *buf = NULL;
    size_t len;
    int rc;

    *clipped = 0;
    if (o->lengths) {
        rc = read_file_all(o->lengths, MAX_LENGTHS_BYTES, &buf, &len, d);
        if (rc == 0)
            rc = kvstat_parse_lengths(buf, len, &req, &n, d);
        free(buf);
        if (rc) {
            diag_prefix(d, "'%s'", disp(o->lengths));
            return rc;
        }
        for (i = 0; i < n; i++)
            if (req[i].prompt + req[i].output > longest)
                longest = req[i].prompt + req[i].output;
        if (max_len <= 0)
            max_len = longest > o->ctx ? longest : (o->ctx > 0 ? o->ctx : longest);
        for (i = 0; i < n; i++) {
            /* a server stops generating at the context limit */
            int c = 0;
            if (req[i].prompt > max_len) {
                req[i].prompt = max_len;
                c = 1;
            }
            if (req[i].prompt + req[i].output > max_len) {
                req[i].output = max_len - req[i].prompt;
                c = 1;
            }
            *clipped += (size_t)c;
        }
        snprintf(source, ns, "%s", disp(o->lengths));
    } else {
        if (max_len <= 0)
            max_len = o->ctx > 0 ? o->ctx : (nm && models[0].m.n_ctx_train > 0 ? models[0].m.n_ctx_train : 4096);
        if (max_len < 2)
            return diag_set(d, ST_RANGE, "--max must be at least 2");
        if (o->n < 1 || (uint64_t)o->n > SIZE_MAX / sizeof(*req))
            return diag_set(d, ST_RANGE, "--n out of range");
        req = malloc((size_t)o->n * sizeof(*req));
        if (!req)
            return diag_set(d, ST_NOMEM, "out of memory (--n %lld)", (long long)o->n);
        n = (size_t)o->n;
        kv_workload_generate((enum kv_dist)o->dist, o->mean_prompt, o->mean_output, o->shape,
                             max_len, o->seed, req, n, clipped);
        if (o->dist == KV_DIST_LOGNORMAL || o->dist == KV_DIST_ZIPF)
            snprintf(source, ns, "%s(prompt %g, output %g, shape %g)", kv_dist_name((enum kv_dist)o->dist),
                     o->mean_prompt, o->mean_output,
                     o->shape > 0 ? o->shape : (o->dist == KV_DIST_ZIPF ? 2.0 : 1.0));
        else
            snprintf(source, ns, "%s(prompt %g, output %g)", kv_dist_name((enum kv_dist)o->dist),
                     o->mean_prompt, o->mean_output);
    }
    if (*clipped)
        runcb_warn(&o->cb, "%zu of %zu requests clipped to --max %lld tokens", *clipped, n,
                   (long long)max_len);
    rc = kv_simulate(req, n, max_len, o->block_size, w, d);
    free(req);
    return rc;
}

int
run_kvstat(const struct kvstat_opts *o, struct diag *d)
{
    struct model_in *models = NULL;
    struct kv_workload *wl = NULL;
    struct kvtrace *tr = NULL;
    /* the report and the plot, committed together (xout_commit_all) */
    struct xout xo[2] = {{0}, {0}}, *out = &xo[0], *svg = &xo[1];
    bool out_open = false, svg_open = false;
    struct emit e = {0};
    struct rec *r = NULL;
    char source[256] = "";
    size_t nm = 0, i, clipped = 0, n_variants = 0, n_policies = 0;
    bool has_workload = o->lengths || o->dist >= 0;
    int rc = 0, j;

    /* no output of this run may replace one of its inputs */
    for (i = 0; i < o->n_inputs; i++)
        xio_note_input(o->inputs[i]);
    xio_note_input(o->lengths);
    xio_note_input(o->trace);
    if (!kv_dtype_get(o->kv_type))
        return diag_set(d, ST_RANGE, "unknown KV type");
    if (o->batch < 1 || o->block_size < 1 || o->block_size > 65536 || o->ctx < 0 || o->ctx > KV_MAX_LEN)
        return diag_set(d, ST_RANGE, "--batch, --block-size or --ctx out of range");
    r = malloc(sizeof(*r));
    models = calloc(o->n_inputs ? o->n_inputs : 1, sizeof(*models));
    if (!r || !models) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }

    /* 1. read and check every input */
    for (i = 0; i < o->n_inputs; i++) {
        struct model_in *mi = &models[nm];
        kv_model_init(&mi->m);
        mi->input = o->inputs[i];
        nm++;
        rc = kvstat_load_model(o->inputs[i], &mi->m, &mi->weights, d);
        if (rc) {
            diag_prefix(d, "'%s'", disp(o->inputs[i]));
            goto out;
        }
    }
    if (o->n_inputs == 0 && (o->layers || o->heads || o->head_dim || o->kv_heads || o->kv_lora_rank)) {
        kv_model_init(&models[0].m);
        models[0].input = "flags";
        models[0].weights = -1;
        nm = 1;
        if ((rc = model_from_flags(o, &models[0].m, d)))
            goto out;
    }
    for (i = 0; i < nm; i++) {
        struct model_in *mi = &models[i];
        mi->ctx = o->ctx > 0 ? o->ctx : (mi->m.n_ctx_train > 0 ? mi->m.n_ctx_train : 4096);
        mi->bpt = kv_bytes_per_token(&mi->m, o->kv_type);
        if (kv_mul(kv_mul(mi->bpt, mi->ctx), o->batch) < 0) {
            rc = diag_set(d, ST_RANGE, "'%s': context x batch too large to count in bytes",
                          disp(mi->input));
            goto out;
        }
        if (o->mem > 0 && o->weights < 0 && mi->weights < 0)
            runcb_warn(&o->cb, "'%s': weights unknown (no --weights); all of --mem counted as KV cache",
                       disp(mi->input));
        if (o->mem > 0 && kv_budget(o, mi) == 0)
            runcb_warn(&o->cb, "'%s': the weights take all of --mem", disp(mi->input));
        if (o->ctx <= 0 && mi->m.n_ctx_stated > 0)
            runcb_warn(&o->cb, "'%s': its context of %lld tokens counted as %lld, the most kvstat "
                       "counts (--ctx sets another)", disp(mi->input),
                       (long long)mi->m.n_ctx_stated, (long long)mi->m.n_ctx_train);
        if (mi->m.sliding_window > 0 && (o->compare || o->lengths || o->dist >= 0))
            runcb_warn(&o->cb, "'%s': %lld of %lld layers use a %lld-token sliding window; the "
                       "attention comparison and workload figures count every layer in full",
                       disp(mi->input), (long long)mi->m.n_swa_layers,
                       (long long)mi->m.n_layers, (long long)mi->m.sliding_window);
    }
    if (o->compare) {
        struct kv_variant v[KV_ATTN_COUNT];
        for (i = 0; i < nm; i++) {
            int nv = kv_compare(&models[i].m, o->kv_type, o->groups, o->kv_lora_rank, o->rope_dim, v, d);
            if (nv < 0) {
                rc = nv;
                diag_prefix(d, "'%s'", disp(models[i].input));
                goto out;
            }
        }
    }
    if (has_workload) {
        wl = malloc(sizeof(*wl));
        if (!wl) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        if ((rc = load_workload(o, models, nm, wl, source, sizeof(source), &clipped, d)))
            goto out;
    }
    if (o->trace) {
        tr = malloc(sizeof(*tr));
        if (!tr) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        kvtrace_init(tr);
        if ((rc = kvtrace_read(tr, o->trace, d))) {
            diag_prefix(d, "'%s'", disp(o->trace));
            goto out;
        }
    }
    if (o->svg && !tr) {
        rc = diag_set(d, ST_RANGE, "--svg needs --trace");
        goto out;
    }
    if (nm == 0 && !has_workload && !tr) {
        rc = diag_set(d, ST_RANGE, "no model, workload or trace given");
        goto out;
    }

    /* 2. outputs: the report goes to stdout unless the plot does */
    if (o->svg) {
        if ((rc = xout_open(svg, o->svg, o->force, d))) {
            prefix_output(d, o->svg);
            goto out;
        }
        svg_open = true;
    }
    if (!(o->svg && !strcmp(o->svg, "-") && !strcmp(o->output, "-"))) {
        if ((rc = xout_open(out, o->output, o->force, d))) {
            prefix_output(d, o->output);
            goto out;
        }
        out_open = true;
    }

    if (out_open) {
        e.fp = out->fp;
        e.fmt = o->format;
        e.d = d;
        for (i = 0; i < nm; i++) {
            model_record(o, &models[i], r);
            emit_rec(&e, r);
        }
        if (o->compare) {
            struct kv_variant v[KV_ATTN_COUNT];
            for (i = 0; i < nm; i++) {
                int nv = kv_compare(&models[i].m, o->kv_type, o->groups, o->kv_lora_rank,
                                    o->rope_dim, v, d);
                for (j = 0; j < nv; j++) {
                    variant_record(o, &models[i], &v[j], r);
                    emit_rec(&e, r);
                    n_variants++;
                }
            }
        }
        if (wl) {
            workload_record(o, wl, source, clipped, r);
            emit_rec(&e, r);
            for (i = 0; i < (nm ? nm : 1); i++) {
                for (j = 0; j < KV_POLICY_COUNT; j++) {
                    policy_record(o, wl, (enum kv_policy)j, nm ? &models[i] : NULL, r);
                    emit_rec(&e, r);
                    n_policies++;
                }
            }
        }
        if (tr) {
            trace_record(tr, o->trace, nm == 1 ? &models[0] : NULL, r);
            emit_rec(&e, r);
            for (j = 0; j < KVTRACE_NPHASE; j++) {
                phase_record(tr, (enum kvtrace_phase)j, r);
                emit_rec(&e, r);
            }
        }
        if (o->format == KVSTAT_JSON) {
            memset(r, 0, sizeof(*r));
            r->type = "summary";
            rec_int(r, "models", (int64_t)nm);
            rec_int(r, "variants", (int64_t)n_variants);
            rec_int(r, "policies", (int64_t)n_policies);
            rec_opt_int(r, "trace_steps", tr ? tr->n_steps : 0, tr != NULL);
            rec_str(r, "svg", o->svg ? o->svg : NULL);
            emit_rec(&e, r);
        } else {
            emit_flush(&e);
        }
        if ((rc = e.rc)) {
            if (rc == -ST_IO)
                prefix_output(d, o->output);
            goto out;
        }
    }
    if (svg_open) {
        char title[256];
        snprintf(title, sizeof(title), "KV cache use: %s", disp(o->trace));
        if ((rc = kvtrace_svg(tr, svg->fp, title, d))) {
            prefix_output(d, o->svg);
            goto out;
        }
    }
    /* both or neither: a plot that cannot be written takes the report with
     * it, whichever is named first */
    out_open = svg_open = false;
    rc = xout_commit_all(xo, 2, d);
out:
    if (svg_open)
        xout_abort(svg);
    if (out_open)
        xout_abort(out);
    for (i = 0; i < nm; i++)
        kv_model_release(&models[i].m);
    free(models);
    free(e.rows);
    free(wl);
    free(tr);
    free(r);
    return rc;
}
