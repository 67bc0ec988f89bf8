/*
 * genbatch.c - run_generate_batch(): requests in, results out, through the
 * continuous-batching engine; the request parser; the KV trace writer.
 * See genbatch.h.
 *
 * The input is read with read(2) into a buffer of our own so that the loop
 * can look for more requests without blocking while sequences run (poll
 * with no timeout), and wait only when the engine is idle (poll for at most
 * STOP_POLL_MS at a time, so that a stop signal that lands just before the
 * wait is seen: a blocked read(2) would wait for the next byte): a slow
 * producer on a pipe gets its requests admitted as they come.  At most
 * `lookahead` requests wait in the engine; the rest of the input stays
 * unread, so memory does not grow with the input - except for the set of
 * request ids seen so far (a duplicate id is refused), which holds a copy
 * of every id.
 */
#include "genbatch.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat.h"
#include "cli.h"
#include "eagle_draft.h"
#include "idset.h"
#include "json.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "resume.h"
#include "scheduler.h"
#include "spec.h"
#include "tokenizer.h"
#include "xio.h"

#define DEFAULT_CTX 4096
#define DEFAULT_KV_MEM ((size_t)1 << 30)
#define MAX_STOPS 16
#define MAX_STOP_LEN 1024

void
batch_opts_init(struct batch_opts *o, const struct generate_opts *g)
{
    memset(o, 0, sizeof(*o));
    o->g = g;
    o->max_seqs = 16;
    o->max_batch_tokens = 512;
    o->kv_type = GGML_TYPE_F16;
    o->policy = SCHED_CONTINUOUS;
    o->preempt = SCHED_PREEMPT_RECOMPUTE;
    o->prefix_cache = true;
    o->drain_timeout = 30;
    o->sync_seconds = -1;
}

int
batch_shard_parse(const char *s, struct batch_shard *sh, struct diag *d)
{
    int64_t v[2] = { 0, 0 };
    const char *p = s;

    for (int i = 0; i < 2; i++) {
        if (*p < '0' || *p > '9')
            goto bad;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (v[i] > BATCH_SHARDS_MAX)
                break;          /* too large; the digits need not be read */
            v[i] = v[i] * 10 + (*p - '0');
        }
        if (*p >= '0' && *p <= '9')
            return diag_set(d, ST_RANGE, "'%s': at most %lld shards", s,
                            (long long)BATCH_SHARDS_MAX);
        if (i == 0 && *p++ != '/')
            goto bad;
    }
    if (*p)
        goto bad;
    if (v[1] < 1 || v[1] > BATCH_SHARDS_MAX)
        return diag_set(d, ST_RANGE, "'%s': the count must be 1..%lld", s,
                        (long long)BATCH_SHARDS_MAX);
    if (v[0] >= v[1])
        return diag_set(d, ST_RANGE, "'%s': the index must be below the count: 0..%lld", s,
                        (long long)(v[1] - 1));
    sh->index = v[0];
    sh->count = v[1];
    return 0;
bad:
    return diag_set(d, ST_RANGE, "'%s' is not I/N (shard I of N, counted from 0)", s);
}

/* ---- request parsing ---- */

void
batch_req_release(struct batch_req *r)
{
    json_decref(r->id);
    free(r->prompt);
    free(r->tokens);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    memset(r, 0, sizeof(*r));
}

static int
get_num(const json_t *o, const char *key, double lo, double hi, float *out, struct diag *d)
{
    json_t *v = json_object_get(o, key);
    double x;

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return diag_set(d, ST_FORMAT, "'%s' is not a number", key);
    x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return diag_set(d, ST_FORMAT, "'%s' %g out of range %g..%g", key, x, lo, hi);
    *out = (float)x;
    return 0;
}

static int
get_int(const json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, struct diag *d)
{
    json_t *v = json_object_get(o, key);
    double x;

    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < lo || i > hi)
            return diag_set(d, ST_FORMAT, "'%s' %lld out of range %lld..%lld", key,
                            (long long)i, (long long)lo, (long long)hi);
        *out = (int64_t)i;
        return 0;
    }
    /* an integral real such as 4.0 is accepted */
    if (!json_is_real(v))
        return diag_set(d, ST_FORMAT, "'%s' is not an integer", key);
    x = json_real_value(v);
    if (x != floor(x))
        return diag_set(d, ST_FORMAT, "'%s' is not an integer", key);
    if (!(x >= (double)lo && x <= (double)hi))
        return diag_set(d, ST_FORMAT, "'%s' %g out of range %lld..%lld", key, x, (long long)lo,
                        (long long)hi);
    *out = (int64_t)x;
    return 0;
}

static int
add_stop(struct batch_req *r, const json_t *v, struct diag *d)
{
    size_t n;

    if (!json_is_string(v))
        return diag_set(d, ST_FORMAT, "'stop' holds a value that is not a string");
    n = json_string_length(v);
    if (n == 0 || n > MAX_STOP_LEN || memchr(json_string_value(v), 0, n))
        return diag_set(d, ST_FORMAT, "a stop string must have 1..%d bytes and no NUL",
                        MAX_STOP_LEN);
    if (r->n_stop == MAX_STOPS)
        return diag_set(d, ST_FORMAT, "more than %d stop strings", MAX_STOPS);
    if (!(r->stop[r->n_stop] = strdup(json_string_value(v))))
        return diag_set(d, ST_NOMEM, "out of memory");
    r->n_stop++;
    return 0;
}

static int
parse_object(const json_t *o, struct batch_req *r, struct diag *d)
{
    json_t *id = json_object_get(o, "id");
    json_t *prompt = json_object_get(o, "prompt");
    json_t *toks = json_object_get(o, "tokens");
    json_t *stop = json_object_get(o, "stop");
    int64_t v;
    int rc;

    /* null is no id (generate.1): refused as 1.5 is, not taken for none */
    if (id) {
        if (json_is_null(id))
            return diag_set(d, ST_FORMAT, "'id' must be a string or an integer, not null "
                            "(without 'id' a request's id is its line number)");
        if (!json_is_string(id) && !json_is_integer(id))
            return diag_set(d, ST_FORMAT, "'id' must be a string or an integer");
        json_decref(r->id);
        r->id = json_incref(id);
    }
    if (json_is_null(prompt))
        prompt = NULL;
    if (json_is_null(toks))
        toks = NULL;
    if (!prompt == !toks)
        return diag_set(d, ST_FORMAT, "a request needs exactly one of 'prompt' and 'tokens'");
    if (prompt) {
        size_t n;
        if (!json_is_string(prompt))
            return diag_set(d, ST_FORMAT, "'prompt' is not a string");
        n = json_string_length(prompt);
        if (!(r->prompt = malloc(n + 1)))
            return diag_set(d, ST_NOMEM, "out of memory");
        memcpy(r->prompt, json_string_value(prompt), n + 1);
        r->prompt_len = n;
    } else {
        size_t n, i;
        json_t *t;
        if (!json_is_array(toks) || (n = json_array_size(toks)) == 0)
            return diag_set(d, ST_FORMAT, "'tokens' is not a non-empty array");
        if (!(r->tokens = malloc(n * sizeof(int32_t))))
            return diag_set(d, ST_NOMEM, "out of memory");
        json_array_foreach(toks, i, t) {
            if (!json_is_integer(t) || json_integer_value(t) < 0 ||
                json_integer_value(t) > INT32_MAX)
                return diag_set(d, ST_FORMAT, "'tokens'[%zu] is not a token id", i);
            r->tokens[i] = (int32_t)json_integer_value(t);
        }
        r->n_tokens = (int64_t)n;
    }
    if ((rc = get_int(o, "max_tokens", -1, (int64_t)1 << 30, &r->max_tokens, d)) < 0)
        return rc;
    if ((rc = get_num(o, "temperature", 0, 1e6, &r->sp.temp, d)) < 0 ||
        (rc = get_num(o, "top_p", 0, 1, &r->sp.top_p, d)) < 0 ||
        (rc = get_num(o, "min_p", 0, 1, &r->sp.min_p, d)) < 0 ||
        (rc = get_num(o, "repeat_penalty", 1e-3, 1e3, &r->sp.repeat_penalty, d)) < 0)
        return rc;
    v = r->sp.top_k;
    if ((rc = get_int(o, "top_k", 0, INT32_MAX, &v, d)) < 0)
        return rc;
    r->sp.top_k = (int32_t)v;
    v = (int64_t)(r->sp.seed & INT64_MAX);
    if (json_object_get(o, "seed")) {
        if ((rc = get_int(o, "seed", 0, INT64_MAX, &v, d)) < 0)
            return rc;
        r->sp.seed = (uint64_t)v;
    }
    if (stop && !json_is_null(stop)) {
        size_t i;
        json_t *s;
        if (!(r->stop = calloc(MAX_STOPS, sizeof(char *))))
            return diag_set(d, ST_NOMEM, "out of memory");
        if (json_is_array(stop)) {
            json_array_foreach(stop, i, s) {
                if ((rc = add_stop(r, s, d)) < 0)
                    return rc;
            }
        } else if ((rc = add_stop(r, stop, d)) < 0) {
            return rc;
        }
    }
    return 0;
}

int
batch_req_parse(const char *line, size_t len, int64_t lineno,
                const struct batch_req_defaults *def, struct batch_req *r, struct diag *d)
{
    size_t i = 0;
    json_t *o = NULL;
    int rc;

    memset(r, 0, sizeof(*r));
    if (len > 0 && line[len - 1] == '\r')
        len--;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len)
        return 1;
    r->max_tokens = def->max_tokens;
    r->sp = def->sp;
    if (!(r->id = json_integer(lineno)))
        return diag_set(d, ST_NOMEM, "out of memory");
    if (line[i] != '{') {
        if (!(r->prompt = malloc(len + 1)))
            return diag_set(d, ST_NOMEM, "out of memory");
        memcpy(r->prompt, line, len);
        r->prompt[len] = '\0';
        r->prompt_len = len;
        return 0;
    }
    if ((rc = json_load_mem(line + i, len - i, &o, d)) < 0)
        return rc;
    if (!json_is_object(o)) {
        json_decref(o);
        return diag_set(d, ST_FORMAT, "a request line starting with '{' is not a JSON object");
    }
    rc = parse_object(o, r, d);
    json_decref(o);
    return rc;
}

/* ---- input ---- */

#define STOP_POLL_MS 100

int
batch_reader_open(struct batch_reader *rd, const char *path, struct diag *d)
{
    struct stat st;

    memset(rd, 0, sizeof(*rd));
    rd->fd = -1;
    if (!path || !strcmp(path, "-")) {
        rd->fd = STDIN_FILENO;
        rd->name = "<stdin>";
    } else {
        rd->name = path;
        rd->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (rd->fd < 0)
            return diag_set(d, ST_IO, "cannot open '%s': %s", path, strerror(errno));
        rd->own = true;
        if (fstat(rd->fd, &st) == 0 && S_ISDIR(st.st_mode)) {
            batch_reader_release(rd);
            return diag_set(d, ST_IO, "'%s': is a directory", path);
        }
    }
    rd->cap = 1 << 16;
    if (!(rd->buf = malloc(rd->cap))) {
        batch_reader_release(rd);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    return 0;
}

void
batch_reader_release(struct batch_reader *rd)
{
    if (!rd)
        return;
    if (rd->own && rd->fd >= 0)
        close(rd->fd);
    free(rd->buf);
    memset(rd, 0, sizeof(*rd));
    rd->fd = -1;
}

/* a line may end "\r\n": the buffer holds BATCH_LINE_MAX bytes and both */
#define BATCH_BUF_MAX (BATCH_LINE_MAX + 2)

static int
too_long(const struct batch_reader *rd, int64_t lineno, struct diag *d)
{
    return diag_set(d, ST_FORMAT, "'%s' line %lld: longer than %zu bytes (16 MiB), "
                    "the most a request line may have", rd->name, (long long)lineno,
                    BATCH_LINE_MAX);
}

int
batch_reader_fill(struct batch_reader *rd, bool block, struct diag *d)
{
    if (rd->eof)
        return 0;
    struct pollfd p = { rd->fd, POLLIN, 0 };
    int n = poll(&p, 1, block ? STOP_POLL_MS : 0);
    if (n < 0 && errno != EINTR)
        return diag_set(d, ST_IO, "'%s': poll failed: %s", rd->name, strerror(errno));
    if (n <= 0)
        return 0;
    if (rd->start > 0) {
        memmove(rd->buf, rd->buf + rd->start, rd->end - rd->start);
        rd->end -= rd->start;
        rd->start = 0;
    }
    if (rd->end == rd->cap) {
        /* a full buffer with no "\n" holds the start of one line: it grows
         * up to the limit; one that fills the limit is longer than it */
        if (memchr(rd->buf, '\n', rd->end))
            return 0;           /* lines to take first */
        if (rd->cap >= BATCH_BUF_MAX)
            return too_long(rd, rd->lineno + 1, d);
        size_t c = rd->cap * 2 > BATCH_BUF_MAX ? BATCH_BUF_MAX : rd->cap * 2;
        char *b = realloc(rd->buf, c);
        if (!b)
            return diag_set(d, ST_NOMEM, "'%s' line %lld: out of memory", rd->name,
                            (long long)rd->lineno + 1);
        rd->buf = b;
        rd->cap = c;
    }
    ssize_t got = read(rd->fd, rd->buf + rd->end, rd->cap - rd->end);
    if (got < 0) {
        if (errno == EINTR || errno == EAGAIN)
            return 0;
        return diag_set(d, ST_IO, "'%s': read failed: %s", rd->name, strerror(errno));
    }
    if (got == 0)
        rd->eof = true;
    rd->end += (size_t)got;
    return 0;
}

int
batch_reader_line(struct batch_reader *rd, const char **line, size_t *len, struct diag *d)
{
    char *nl = memchr(rd->buf + rd->start, '\n', rd->end - rd->start);

    if (!nl && !(rd->eof && rd->end > rd->start))
        return 0;
    size_t n = nl ? (size_t)(nl - (rd->buf + rd->start)) : rd->end - rd->start;
    /* the buffer's two spare bytes are for "\r\n" only */
    if (n > BATCH_LINE_MAX && !(n == BATCH_LINE_MAX + 1 && rd->buf[rd->start + n - 1] == '\r'))
        return too_long(rd, rd->lineno + 1, d);
    *line = rd->buf + rd->start;
    *len = n;
    rd->start += n + (nl != NULL);
    rd->lineno++;
    return 1;
}

bool
batch_reader_has_line(const struct batch_reader *rd)
{
    return memchr(rd->buf + rd->start, '\n', rd->end - rd->start) != NULL ||
           (rd->eof && rd->end > rd->start);
}

int
batch_reader_next(struct batch_reader *rd, const char **line, size_t *len, struct diag *d)
{
    int rc;

    while (!(rc = batch_reader_line(rd, line, len, d))) {
        if (rd->eof)
            return 0;
        if ((rc = batch_reader_fill(rd, true, d)) < 0)
            return rc;
    }
    return rc;
}

int
batch_read_ids(const char *path, int (*fn)(void *ctx, json_t *id, int64_t line), void *ctx,
               struct diag *d)
{
    struct batch_req_defaults def;
    struct batch_reader rd;
    const char *line;
    size_t len;
    int rc;

    if ((rc = batch_reader_open(&rd, path, d)) < 0)
        return rc;
    memset(&def, 0, sizeof(def));
    while ((rc = batch_reader_next(&rd, &line, &len, d)) > 0) {
        struct batch_req q;
        int prc = batch_req_parse(line, len, rd.lineno, &def, &q, NULL);

        if (prc == -ST_NOMEM || fn(ctx, prc == 1 ? NULL : q.id, rd.lineno) < 0)
            rc = diag_set(d, ST_NOMEM, "'%s' line %lld: out of memory", rd.name,
                          (long long)rd.lineno);
        batch_req_release(&q);
        if (rc < 0)
            break;
    }
    batch_reader_release(&rd);
    return rc;
}

/* ---- output ---- */

/* a copy of s[0..n) with ill-formed UTF-8 replaced by U+FFFD (one per
 * maximal subpart) and NUL kept */
static char *
utf8_fix(const char *s, size_t n, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    char *o = malloc(n * 3 + 1);
    size_t i = 0, k = 0;

    if (!o)
        return NULL;
    while (i < n) {
        unsigned char c = u[i];
        size_t need = 0, j;
        unsigned char lo = 0x80, hi = 0xBF;

        if (c < 0x80) {
            o[k++] = (char)c;
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        }
        for (j = 1; need && j <= need && i + j < n; j++) {
            unsigned char x = u[i + j];
            if (x < (j == 1 ? lo : 0x80) || x > (j == 1 ? hi : 0xBF))
                break;
        }
        if (need && j == need + 1) {
            memcpy(o + k, s + i, need + 1);
            k += need + 1;
            i += need + 1;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i += need ? j : 1;
        }
    }
    o[k] = '\0';
    *out_len = k;
    return o;
}

struct run {
    const struct batch_opts *o;
    struct model *m;
    struct tokenizer tok;
    bool tok_loaded;
    struct chat_template ct;
    bool ct_loaded;
    struct kvcache *kv;
    struct sched *s;
    struct spec_dm *dm;         /* --draft: the draft model, or NULL */
    struct eagle_draft *eh;     /* --draft-head: the EAGLE head, or NULL */
    struct spec_cost cost;      /* --spec-tokens auto: the model's verify cost curve */
    FILE *out, *trace;
    const char *out_name;       /* for messages: -o FILE, NULL for stdout */
    const char *trace_name;     /* --kv-trace FILE, NULL for stdout */
    struct batch_report *r;
    json_t **ids;               /* [cap_ids] request ids by tag; NULL = free slot */
    int64_t *lines;             /* [cap_ids] their line numbers */
    int64_t *free_tags;         /* [cap_ids] stack of free slots (reused: memory is
                                 * bounded by the requests in flight) */
    int64_t cap_ids, n_tags, n_free_tags;
    int64_t pending;            /* accepted, not finished */
    struct id_set seen;         /* every request id so far */
    int64_t n_requests;         /* request lines so far, every shard's */
    struct resume_file rf;      /* --resume */
    bool resuming;
    double t_first_step;
    struct diag werr;           /* first write error */
    int wrc;
};

/* A free slot for a request id (tags index g->ids). */
static int
take_tag(struct run *g, int64_t *tag)
{
    if (g->n_free_tags > 0) {
        *tag = g->free_tags[--g->n_free_tags];
        return 0;
    }
    if (g->n_tags == g->cap_ids) {
        int64_t c = g->cap_ids ? g->cap_ids * 2 : 256;
        json_t **ids = realloc(g->ids, (size_t)c * sizeof(*ids));
        if (!ids)
            return -ST_NOMEM;
        memset(ids + g->cap_ids, 0, (size_t)(c - g->cap_ids) * sizeof(*ids));
        g->ids = ids;
        int64_t *f = realloc(g->free_tags, (size_t)c * sizeof(*f));
        if (!f)
            return -ST_NOMEM;
        g->free_tags = f;
        if (!(f = realloc(g->lines, (size_t)c * sizeof(*f))))
            return -ST_NOMEM;
        g->lines = f;
        g->cap_ids = c;
    }
    *tag = g->n_tags++;
    return 0;
}

static void
release_tag(struct run *g, int64_t tag)
{
    json_decref(g->ids[tag]);
    g->ids[tag] = NULL;
    g->free_tags[g->n_free_tags++] = tag;
}

static int
jset(json_t *o, const char *k, json_t *v)
{
    return v ? json_object_set_new(o, k, v) : -1;
}

/* A result line to the --resume file: the whole line in one write. */
static int
append_line(struct run *g, json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)), *t;
    size_t n;
    int rc;

    if (!s || !(t = realloc(s, (n = strlen(s)) + 2))) {
        free(s);
        rc = diag_set(&g->werr, ST_NOMEM, "out of memory");
    } else {
        t[n] = '\n';
        rc = resume_append(&g->rf, t, n + 1, &g->werr);
        free(t);
    }
    if (rc < 0 && !g->wrc)
        g->wrc = rc;
    return rc;
}

static int
write_line(struct run *g, json_t *o)
{
    if (g->resuming)
        return append_line(g, o);

    int rc = json_print_line(o, g->out, &g->werr);

    if (rc == 0 && fflush(g->out) != 0)
        rc = diag_set(&g->werr, ST_IO, "write failed: %s", strerror(errno));
    if (rc == -ST_IO && g->out_name)
        diag_prefix(&g->werr, "'%s'", g->out_name);
    else if (rc == -ST_IO)
        diag_prefix(&g->werr, "stdout");
    if (rc < 0 && !g->wrc)
        g->wrc = rc;
    return rc;
}

static int
write_error(struct run *g, json_t *id, int64_t lineno, const char *msg)
{
    json_t *o = json_object();
    int bad = !o, rc;

    bad |= jset(o, "schema", json_string("generate/1"));
    bad |= jset(o, "type", json_string("error"));
    bad |= json_object_set(o, "id", id);
    bad |= jset(o, "line", json_integer(lineno));
    bad |= jset(o, "finish_reason", json_string("error"));
    bad |= jset(o, "error", json_string(msg));
    rc = bad ? diag_set(&g->werr, ST_NOMEM, "out of memory") : write_line(g, o);
    json_decref(o);
    g->r->errors++;
    return rc;
}

static int
on_result(void *ctx, const struct sched_result *res)
{
    struct run *g = ctx;
    json_t *o = json_object(), *a = json_array();
    size_t tl;
    char *text = utf8_fix(res->text, res->text_len, &tl);
    int bad = !o || !a || !text, rc;

    for (int64_t i = 0; !bad && i < res->n_tokens; i++)
        bad |= json_array_append_new(a, json_integer(res->tokens[i]));
    if (!bad) {
        bad |= jset(o, "schema", json_string("generate/1"));
        bad |= jset(o, "type", json_string("completion"));
        bad |= json_object_set(o, "id", g->ids[res->tag]);
        bad |= jset(o, "line", json_integer(g->lines[res->tag]));
        bad |= jset(o, "text", json_stringn(text, tl));
        bad |= json_object_set(o, "tokens", a);
        bad |= jset(o, "finish_reason", json_string(res->finish_reason));
        bad |= jset(o, "prompt_tokens", json_integer(res->n_prompt));
        bad |= jset(o, "completion_tokens", json_integer(res->n_tokens));
        bad |= jset(o, "cached_tokens", json_integer(res->cached_tokens));
        bad |= jset(o, "preemptions", json_integer(res->preemptions));
        bad |= jset(o, "queue_ms", json_real(res->queue_ms));
        bad |= jset(o, "ttft_ms", json_real(res->ttft_ms));
        bad |= jset(o, "total_ms", json_real(res->total_ms));
    }
    rc = bad ? diag_set(&g->werr, ST_NOMEM, "out of memory") : write_line(g, o);
    json_decref(o);
    json_decref(a);
    free(text);
    release_tag(g, res->tag);
    g->pending--;
    g->r->completed++;
    if (!strcmp(res->finish_reason, "cancelled"))
        g->r->cancelled++;
    g->r->generated += res->n_tokens;
    return rc;
}

/* A failed write to the trace (errno set), named. */
static int
trace_failed(struct run *g, struct diag *d)
{
    if (g->trace_name)
        return diag_set(d, ST_IO, "'%s': write failed: %s", g->trace_name, strerror(errno));
    return diag_set(d, ST_IO, "stdout: write failed: %s", strerror(errno));
}

static int
on_step(void *ctx, const struct sched_step_info *si)
{
    struct run *g = ctx;

    if (si->step == 0)
        g->t_first_step = now_seconds() - si->time_ms / 1000.0;
    if (g->resuming && resume_tick(&g->rf, &g->werr) < 0 && !g->wrc)
        g->wrc = -ST_IO;
    if (!g->trace)
        return 0;
    if (fprintf(g->trace,
                "{\"schema\":\"kvtrace/1\",\"type\":\"step\",\"step\":%lld,\"time_ms\":%.3f,"
                "\"running\":%lld,\"waiting\":%lld,\"blocks_used\":%lld,\"blocks_free\":%lld,"
                "\"blocks_total\":%lld,\"block_size\":%lld,\"tokens_stored\":%lld,"
                "\"waste\":%.6f,\"preemptions\":%lld,\"prefix_hits\":%lld,\"phase\":\"%s\","
                "\"prompt_tokens\":%lld,\"decode_tokens\":%lld,\"tokens_logical\":%lld,"
                "\"contig_slots\":%lld,\"blocks_cached\":%lld,\"swap_bytes\":%zu}\n",
                (long long)si->step, si->time_ms, (long long)si->running,
                (long long)si->waiting, (long long)si->kv.blocks_used,
                (long long)si->kv.blocks_free, (long long)si->kv.blocks_total,
                (long long)si->kv.block_size, (long long)si->kv.slots_filled, si->kv.waste,
                (long long)si->preemptions, (long long)si->prefix_hits, si->phase,
                (long long)si->prompt_tokens, (long long)si->decode_tokens,
                (long long)si->kv.tokens, (long long)si->contig_slots,
                (long long)si->kv.blocks_cached, si->swap_bytes) < 0)
        return g->wrc = trace_failed(g, &g->werr);
    return 0;
}

/* ---- one request line ---- */

/* Whether this run does the next request line, whose id is id (first: the
 * line that had it first, 0 when this one did): it is in this run's shard
 * and has no result in the --resume file yet.  1 = yes, 0 = skip it, < 0 =
 * the resume file names another line for this id (-ST_FORMAT). */
static int
request_mine(struct run *g, const json_t *id, int64_t first, int64_t lineno, struct diag *d)
{
    const struct batch_shard *sh = &g->o->shard;
    int64_t k = g->n_requests++, done;

    if (sh->count > 1) {
        uint64_t key = sh->by_id ? id_hash(id) : (uint64_t)k;
        if (key % (uint64_t)sh->count != (uint64_t)sh->index) {
            g->r->other_shards++;
            return 0;
        }
    }
    g->r->requests++;
    /* a repeated id gets its error line again: it has no success */
    if (!g->resuming || first > 0 || (done = id_set_find(&g->rf.done, id)) == 0)
        return 1;
    if (done != lineno) {
        char *js = json_dumps(id, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        diag_set(d, ST_FORMAT, "'%s': the result for id %s is for line %lld, but line %lld of "
                 "'%s' has that id (results of another request file?)", g->rf.path,
                 js ? js : "?", (long long)done, (long long)lineno,
                 g->o->input && strcmp(g->o->input, "-") ? g->o->input : "<stdin>");
        free(js);
        return -ST_FORMAT;
    }
    g->r->resumed++;
    return 0;
}

/* batch_read_ids's callback: a request's id into the set (with the line
 * that has it first) */
static int
add_request_id(void *ctx, json_t *id, int64_t line)
{
    return !id || id_set_add(ctx, id, line) >= 0 ? 0 : -ST_NOMEM;
}

/* Parses, tokenizes and queues one line.  Bad requests, and requests whose
 * id an earlier line used, become error lines; returns < 0 only for
 * failures that end the run. */
static int
take_line(struct run *g, const char *line, size_t len, int64_t lineno, struct diag *d)
{
    const struct generate_opts *go = g->o->g;
    struct batch_req_defaults def;
    struct batch_req q;
    struct tok_ids ids = { NULL, 0, 0 };
    struct diag e = {{0}};
    int64_t first;
    int rc;

    def.max_tokens = go->n_predict;
    def.sp = go->sp;
    rc = batch_req_parse(line, len, lineno, &def, &q, &e);
    if (rc == 1) {
        batch_req_release(&q);
        return 0;
    }
    if (rc == -ST_NOMEM)
        goto nomem;
    /* the id names this line's result: a later line cannot take it, even
     * when this one is bad; every shard sees every id */
    if ((first = id_set_add(&g->seen, q.id, lineno)) < 0)
        goto nomem;
    int mine = request_mine(g, q.id, first, lineno, d);
    if (mine <= 0) {
        rc = mine;
        goto out;
    }
    if (rc < 0)
        goto bad;
    if (first > 0) {
        diag_set(&e, ST_RANGE, "duplicate id: line %lld has the same id", (long long)first);
        goto bad;
    }
    q.sp.repeat_last_n = go->repeat_last_n < 0 ? (int32_t)sched_ctx(g->s) : go->repeat_last_n;
    if (q.prompt) {
        if (go->chat) {
            struct chat_msg msgs[2];
            size_t n = 0;
            if (go->system)
                msgs[n++] = (struct chat_msg){ "system", go->system };
            msgs[n++] = (struct chat_msg){ "user", q.prompt };
            rc = chat_encode(&g->ct, &g->tok, msgs, n, go->parse_special, &ids, &e);
        } else {
            rc = tok_encode(&g->tok, q.prompt, q.prompt_len, true, true, &ids, &e);
        }
        if (rc == -ST_NOMEM)
            goto nomem;         /* the run's failure, not the request's */
        if (rc < 0)
            goto bad;
    }
    int64_t tag;
    if ((rc = take_tag(g, &tag)) < 0)
        goto nomem;
    struct sched_req sr = { tag, q.prompt ? ids.v : q.tokens,
                            q.prompt ? (int64_t)ids.n : q.n_tokens, q.max_tokens, q.sp,
                            (const char *const *)q.stop, q.n_stop };
    g->ids[tag] = json_incref(q.id);
    g->lines[tag] = lineno;
    g->pending++;
    if ((rc = sched_add(g->s, &sr, &e)) < 0) {
        g->pending--;
        release_tag(g, tag);
        if (rc == -ST_NOMEM)
            goto nomem;
        if (rc != -ST_RANGE) {     /* a write error from the callback */
            *d = g->werr;
            goto out;
        }
        goto bad;
    }
    rc = 0;
    goto out;
bad:
    rc = write_error(g, q.id, lineno, e.msg);
    if (rc < 0)
        *d = g->werr;
    goto out;
nomem:
    rc = diag_set(d, ST_NOMEM, "'%s' line %lld: out of memory",
                  g->o->input && strcmp(g->o->input, "-") ? g->o->input : "<stdin>",
                  (long long)lineno);
out:
    tok_ids_release(&ids);
    batch_req_release(&q);
    return rc;
}

/* ---- the run ---- */

static const char *
kv_type_name(uint32_t t)
{
    return t == GGML_TYPE_F32 ? "f32" : t == GGML_TYPE_Q8_0 ? "q8_0" : "f16";
}

int
batch_kv_type_parse(const char *s)
{
    return !strcmp(s, "f16") ? GGML_TYPE_F16 : !strcmp(s, "f32") ? GGML_TYPE_F32
           : !strcmp(s, "q8_0") ? GGML_TYPE_Q8_0 : -1;
}

static int
open_pool(struct run *g, int64_t ctx, struct diag *d)
{
    const struct batch_opts *o = g->o;
    struct kv_config c;
    size_t bb, mem;

    model_kv_config(g->m, 0, o->kv_type, &c);
    c.block_size = o->block_size ? o->block_size : KV_BLOCK_SIZE_DEFAULT;
    if (!(bb = kv_block_bytes(&c)))
        return kv_new(&g->kv, &c, d);   /* for its message */
    if (o->g->kv_mem > 0) {
        mem = (size_t)o->g->kv_mem;
    } else {
        /* enough for max_seqs full contexts (with sliding-window layers,
         * their windows), at most DEFAULT_KV_MEM */
        double want = (double)o->max_seqs *
                      (double)kv_mem_for(&c, ctx + c.block_size, o->max_batch_tokens);
        mem = want < (double)DEFAULT_KV_MEM ? (size_t)want : DEFAULT_KV_MEM;
        if (mem < bb)
            mem = bb;
    }
    c.mem = mem;
    return kv_new(&g->kv, &c, d);
}

static int
write_trace_header(struct run *g, const struct kv_stats *ks)
{
    const struct batch_opts *o = g->o;

    if (fprintf(g->trace,
                "{\"schema\":\"kvtrace/1\",\"type\":\"header\",\"model\":\"%s\","
                "\"block_size\":%lld,\"blocks_total\":%lld,\"block_bytes\":%zu,"
                "\"kv_type\":\"%s\",\"max_seqs\":%lld,\"max_batch_tokens\":%lld,"
                "\"schedule\":\"%s\",\"preempt\":\"%s\",\"prefix_cache\":%s}\n",
                g->m->hp.arch_name, (long long)ks->block_size, (long long)ks->blocks_total,
                ks->block_bytes, kv_type_name(o->kv_type), (long long)o->max_seqs,
                (long long)o->max_batch_tokens,
                o->policy == SCHED_STATIC ? "static" : "continuous",
                o->preempt == SCHED_PREEMPT_SWAP ? "swap" : "recompute",
                o->prefix_cache ? "true" : "false") < 0)
        return -ST_IO;
    return 0;
}

static int
write_trace_summary(struct run *g)
{
    struct batch_report *r = g->r;

    if (fprintf(g->trace,
                "{\"schema\":\"kvtrace/1\",\"type\":\"summary\",\"steps\":%lld,"
                "\"requests\":%lld,\"completed\":%lld,\"errors\":%lld,\"generated\":%lld,"
                "\"wall_ms\":%.3f,\"gen_tok_s\":%.3f,\"preemptions\":%lld,\"prefix_hits\":%lld,"
                "\"waste_paged\":%.6f,\"waste_contig\":%.6f,\"swap_peak_bytes\":%zu}\n",
                (long long)r->steps, (long long)r->requests, (long long)r->completed,
                (long long)r->errors, (long long)r->generated, r->wall_ms, r->gen_tok_s,
                (long long)r->preemptions, (long long)r->prefix_hits, r->waste_paged,
                r->waste_contig, r->swap_peak) < 0)
        return -ST_IO;
    return 0;
}

static int
stop_level(const struct batch_opts *o)
{
    return o->stop ? (int)*o->stop : 0;
}

/* Ends the started requests with "cancelled" results: the drain after a
 * stop request ran out of time, or a second stop request came. */
static int
cancel_started(struct run *g, struct diag *d)
{
    int rc = sched_cancel(g->s);

    if (g->wrc) {
        *d = g->werr;
        return g->wrc;
    }
    return rc;
}

static int
main_loop(struct run *g, struct batch_reader *rd, struct diag *d)
{
    const struct batch_opts *o = g->o;
    int64_t lookahead = o->max_seqs * 2 > 64 ? o->max_seqs * 2 : 64;
    double t_stop = 0;
    int rc;

    for (;;) {
        if (stop_level(o) >= 1 && t_stop == 0) {
            /* the drain begins: nothing new is admitted */
            t_stop = now_seconds();
            sched_hold(g->s, true);
        }
        if (stop_level(o) >= 2 ||
            (t_stop > 0 && o->drain_timeout >= 0 && now_seconds() - t_stop >= o->drain_timeout))
            return cancel_started(g, d);
        /* take in requests while there is room in the queue */
        while (!stop_level(o) && sched_waiting(g->s) < lookahead) {
            const char *line;
            size_t len;
            if ((rc = batch_reader_line(rd, &line, &len, d)) < 0)
                return rc;
            if (rc) {
                if ((rc = take_line(g, line, len, rd->lineno, d)) < 0)
                    return rc;
                continue;
            }
            if (rd->eof)
                break;
            bool idle = sched_running(g->s) == 0 && sched_waiting(g->s) == 0;
            size_t before = rd->end;
            /* about to wait for input: what is written is made durable first */
            if (idle && g->resuming && (rc = resume_sync(&g->rf, d)) < 0)
                return rc;
            if ((rc = batch_reader_fill(rd, idle, d)) < 0)
                return rc;
            if (stop_level(o))
                break;
            if (!idle && rd->end == before && !rd->eof)
                break;          /* nothing more available right now */
        }
        rc = sched_step(g->s, d);
        if (g->wrc) {
            *d = g->werr;
            return g->wrc;
        }
        if (rc < 0)
            return rc;
        if (rc == 0 && (rd->eof || stop_level(o)) && !batch_reader_has_line(rd))
            return 0;
    }
}

int
run_generate_batch(const struct batch_opts *o, struct batch_report *r, struct diag *d)
{
    const struct generate_opts *go = o->g;
    struct model_opts mopt = MODEL_OPTS_INIT;
    struct sched_opts so = SCHED_OPTS_INIT;
    struct sched_callbacks cb;
    struct batch_reader rd;
    struct run g;
    struct xout xo[2];          /* -o and --kv-trace, committed together */
    struct kv_stats ks;
    struct sched_totals t;
    bool out_open = false, tr_open = false, checked = false;
    bool to_stdout = !o->resume && (!go->output || !strcmp(go->output, "-"));
    int64_t ctx;
    int rc;

    memset(r, 0, sizeof(*r));
    memset(&g, 0, sizeof(g));
    memset(&rd, 0, sizeof(rd));
    memset(xo, 0, sizeof(xo));
    g.o = o;
    g.r = r;
    g.out_name = to_stdout ? NULL : go->output;
    g.trace_name = o->trace && strcmp(o->trace, "-") ? o->trace : NULL;
    rd.fd = -1;
    xio_note_input(go->model);  /* no output of this run may replace it */
    g.rf.fd = -1;
    if (o->resume && go->output)
        return diag_set(d, ST_RANGE, "--resume FILE is the output: no -o with it");
    if (o->resume && !strcmp(o->resume, "-"))
        return diag_set(d, ST_RANGE, "--resume needs a file it can read back, not stdout");
    /* fail before the model loads (see xout_check) */
    if (!to_stdout && !o->resume && (rc = xout_check(go->output, go->force, d)) < 0) {
        diag_prefix(d, "'%s'", go->output);
        return rc;
    }
    if (o->trace && strcmp(o->trace, "-") && (rc = xout_check(o->trace, go->force, d)) < 0) {
        diag_prefix(d, "'%s'", o->trace);
        return rc;
    }

    /* input first: a missing request file fails before the model loads */
    if ((rc = batch_reader_open(&rd, o->input, d)) < 0)
        return rc;
    if (rd.own)
        xio_note_input(o->input);   /* no output of this run may replace it */
    if (o->resume) {
        struct id_set reqs = { 0 };
        struct stat st;

        /* a request file that can be read twice: its ids now, so that a
         * results file of other requests is refused at once; from a pipe
         * they are known when it ends (checked then, below) */
        checked = rd.own && fstat(rd.fd, &st) == 0 && S_ISREG(st.st_mode);
        if (checked && (rc = batch_read_ids(o->input, add_request_id, &reqs, d)) < 0 &&
            rc != -ST_FORMAT) {
            id_set_release(&reqs);
            goto out;
        }
        /* (-ST_FORMAT: a line over BATCH_LINE_MAX, where the run will end
         * and say so: the ids before it are the requests) */
        /* after the input is noted: the request file cannot be the results */
        rc = resume_open(&g.rf, o->resume, o->sync_lines, o->sync_seconds,
                         checked ? &reqs : NULL, rd.name, d);
        id_set_release(&reqs);
        if (rc < 0)
            goto out;
        g.resuming = true;
        r->resume_kept = g.rf.kept;
        r->resume_dropped = g.rf.dropped;
        r->resume_torn = g.rf.torn;
        if (g.rf.torn)
            runcb_warn(&go->cb, "'%.300s': cut off its torn last line (%zu bytes, the end of a "
                       "run that died while writing it); that request runs again", o->resume,
                       g.rf.torn);
        runcb_info(&go->cb, "'%.300s': %lld results kept, %lld error, cancelled or repeated "
                   "results dropped (their requests run again)", o->resume,
                   (long long)g.rf.kept, (long long)g.rf.dropped);
    }

    mopt.n_threads = go->threads;
    mopt.kernel = go->kernel;
    mopt.device = go->device;
    if ((rc = model_open(&g.m, go->model, &mopt, d)) < 0) {
        diag_prefix(d, "'%s'", go->model);
        goto out;
    }
    if ((rc = tok_load(&g.tok, &g.m->gguf, d)) < 0) {
        diag_prefix(d, "'%s'", go->model);
        goto out;
    }
    g.tok_loaded = true;
    if (g.tok.warning[0])
        runcb_warn(&go->cb, "%s", g.tok.warning);
    if (go->chat) {
        if ((rc = chat_template_from_gguf(&g.ct, &g.m->gguf, &g.tok, d)) < 0) {
            if (rc == -ST_FORMAT)
                diag_prefix(d, "'%s'", go->model);
            goto out;
        }
        g.ct_loaded = true;
        if (g.ct.guessed)
            runcb_warn(&go->cb, "%s", g.ct.note);
    }
    ctx = go->ctx > 0 ? go->ctx : g.m->hp.n_ctx_train > 0 ? g.m->hp.n_ctx_train : DEFAULT_CTX;
    if ((rc = open_pool(&g, ctx, d)) < 0)
        goto out;
    so.max_seqs = o->max_seqs;
    so.max_batch_tokens = o->max_batch_tokens;
    so.policy = o->policy;
    so.preempt = o->preempt;
    so.prefix_cache = o->prefix_cache && !go->draft_head;  /* a head needs every feature */
    so.ignore_eos = go->ignore_eos;
    so.ctx = ctx;
    if (go->lookup || go->draft || go->draft_head) {
        so.spec_tokens = go->spec_tokens ? go->spec_tokens : BATCH_SPEC_AUTO;
        so.lookup_ngram = go->lookup_ngram;
        /* auto: what a pass of up to every sequence's token and draft costs */
        if (!go->spec_tokens) {
            if ((rc = spec_cost_measure(g.m, g.kv, o->max_seqs * (1 + BATCH_SPEC_AUTO), &g.cost,
                                        d)) < 0)
                goto out;
            so.spec_cost = &g.cost;
        }
    }
    if (go->draft) {
        struct kv_stats ks0;
        kv_stats(g.kv, &ks0);
        /* a stream per running sequence; as many tokens as the target's
         * pool holds (a draft never needs more, its prefixes unshared
         * aside: a stream that does not fit drafts nothing) */
        if ((rc = spec_dm_open(&g.dm, go->draft, &mopt, &g.tok, ctx, o->max_seqs + 1,
                               ks0.blocks_total * ks0.block_size, d)) < 0)
            goto out;
        so.draft = g.dm;
        so.draft_p_min = go->draft_p_min;
    }
    if (go->draft_head) {
        /* greedy chains: one branch per node */
        if ((rc = eagle_draft_open(&g.eh, go->draft_head, g.m, ctx, 1, GGML_TYPE_Q8_0, d)) < 0)
            goto out;
        so.head = g.eh;
        so.draft_p_min = go->draft_p_min;
        if (so.spec_cost)       /* auto: a level's cost for any number of chains */
            eagle_draft_measure(g.eh, o->max_seqs);
    }
    cb.result = on_result;
    cb.step = on_step;
    cb.ctx = &g;
    if ((rc = sched_new(&g.s, g.m, g.kv, &g.tok, &so, &cb, d)) < 0)
        goto out;
    kv_stats(g.kv, &ks);
    r->ctx = sched_ctx(g.s);
    r->blocks_total = ks.blocks_total;
    r->block_size = ks.block_size;
    r->threads = g.m->be->n_threads;
    r->kernel = g.m->be->kernel;
    runcb_info(&go->cb, "'%s': %lld KV blocks of %lld tokens (%s, %.1f MiB), context "
               "%lld per sequence, %lld sequences, %lld tokens per step, %d threads, kernel %s",
               go->model, (long long)ks.blocks_total, (long long)ks.block_size,
               kv_type_name(o->kv_type), (double)kv_config_get(g.kv)->mem /
               1048576.0, (long long)r->ctx, (long long)o->max_seqs,
               (long long)o->max_batch_tokens, r->threads, r->kernel);

    if (g.resuming) {
        g.out = NULL;
    } else if (to_stdout) {
        g.out = stdout;
    } else {
        if ((rc = xout_open(&xo[0], go->output, go->force, d)) < 0) {
            diag_prefix(d, "'%s'", go->output);
            goto out;
        }
        out_open = true;
        g.out = xo[0].fp;
    }
    if (o->trace) {
        if ((rc = xout_open(&xo[1], o->trace, go->force, d)) < 0) {
            diag_prefix(d, "'%s'", o->trace);
            goto out;
        }
        tr_open = true;
        g.trace = xo[1].fp;
        if (write_trace_header(&g, &ks) < 0) {
            rc = trace_failed(&g, d);
            goto out;
        }
    }

    rc = main_loop(&g, &rd, d);
    if (rc < 0)
        goto out;
    /* requests from a pipe: every id is known once it has ended */
    if (g.resuming && !checked && rd.eof && !stop_level(o) &&
        (rc = resume_check_requests(&g.rf, &g.seen, rd.name, d)) < 0)
        goto out;

    sched_get_totals(g.s, &t);
    r->unfinished = g.pending;
    r->steps = t.steps;
    r->spec = so.spec_tokens <= 0 ? NULL : go->draft ? "draft" : go->draft_head ? "eagle"
            : "lookup";
    r->spec_passes = t.spec_passes;
    r->spec_drafted = t.spec_drafted;
    r->spec_accepted = t.spec_accepted;
    r->spec_levels = !so.spec_cost ? -1.0 : t.spec_auto_steps ? (double)t.spec_auto_levels /
                     (double)t.spec_auto_steps : 0.0;
    r->spec_slot_ms = so.spec_cost ? so.spec_cost->slot_ms : 0.0;
    r->prompt_tokens = t.prompt_tokens;
    r->preemptions = t.preemptions;
    r->prefix_hits = t.prefix_hits;
    r->swap_peak = t.swap_bytes_peak;
    r->wall_ms = g.t_first_step > 0 ? (now_seconds() - g.t_first_step) * 1000.0 : 0.0;
    r->gen_tok_s = r->wall_ms > 0 ? (double)r->generated / (r->wall_ms / 1000.0) : 0.0;
    r->waste_paged = t.sum_slots > 0 ? 1.0 - t.sum_stored / t.sum_slots : 0.0;
    r->waste_contig = t.sum_contig > 0 ? 1.0 - t.sum_logical / t.sum_contig : 0.0;
    if (g.trace && write_trace_summary(&g) < 0) {
        rc = trace_failed(&g, d);
        goto out;
    }
    if (out_open || tr_open) {
        /* both files or neither (the message names the one that failed) */
        out_open = tr_open = false;
        if ((rc = xout_commit_all(xo, 2, d)) < 0)
            goto out;
    }
    if (g.resuming) {
        g.resuming = false;
        rc = resume_close(&g.rf, true, d);
    }
out:
    if (g.resuming)
        resume_close(&g.rf, false, NULL);
    if (tr_open)
        xout_abort(&xo[1]);
    if (out_open)
        xout_abort(&xo[0]);
    sched_free(g.s);
    spec_dm_free(g.dm);
    eagle_draft_free(g.eh);
    kv_free(g.kv);
    if (g.ct_loaded)
        chat_template_release(&g.ct);
    if (g.tok_loaded)
        tok_release(&g.tok);
    model_free(g.m);
    for (int64_t i = 0; i < g.cap_ids; i++)
        json_decref(g.ids[i]);
    free(g.ids);
    free(g.lines);
    free(g.free_tags);
    id_set_release(&g.seen);
    batch_reader_release(&rd);
    return rc;
}

void
batch_report_print(const struct batch_report *r, const char *prefix, FILE *fp)
{
    fprintf(fp, "%s: %lld requests", prefix, (long long)r->requests);
    if (r->other_shards)
        fprintf(fp, " (%lld more in other shards)", (long long)r->other_shards);
    fprintf(fp, ": %lld completed, %lld errors", (long long)r->completed, (long long)r->errors);
    if (r->resumed)
        fprintf(fp, ", %lld done before", (long long)r->resumed);
    if (r->cancelled)
        fprintf(fp, ", %lld cancelled", (long long)r->cancelled);
    if (r->unfinished)
        fprintf(fp, ", %lld unfinished", (long long)r->unfinished);
    fprintf(fp, "; %lld tokens generated in %.2f s, %.1f tok/s\n", (long long)r->generated,
            r->wall_ms / 1000.0, r->gen_tok_s);
    fprintf(fp, "%s: %lld steps, %lld preemptions, %lld prefix-cache blocks reused; "
            "KV waste %.1f%% paged vs %.1f%% contiguous\n", prefix, (long long)r->steps,
            (long long)r->preemptions, (long long)r->prefix_hits, 100.0 * r->waste_paged,
            100.0 * r->waste_contig);
    if (r->spec)
        fprintf(fp, "%s: speculative (%s): %lld of %lld drafts kept in %lld verifying decodes",
                prefix, r->spec, (long long)r->spec_accepted, (long long)r->spec_drafted,
                (long long)r->spec_passes);
    if (r->spec && r->spec_levels >= 0)
        fprintf(fp, "; auto draft size %.2f per sequence and step, verify cost %.4f ms per token "
                "and slot of context", r->spec_levels, r->spec_slot_ms);
    if (r->spec)
        fputc('\n', fp);
}
