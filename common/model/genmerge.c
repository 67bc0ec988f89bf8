/*
 * genmerge.c - run_generate_merge() (genmerge.h).
 *
 * The request file is read once, line by line, keeping each request's id
 * (a few dozen bytes a line); the results files are mapped, and each
 * request keeps where its result is (file, offset, length), so memory does
 * not grow with the text of the results and the output is copied from the
 * mappings in request order.
 */
#include "genmerge.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "genbatch.h"
#include "resume.h"
#include "xio.h"

struct slot {
    int file;                   /* index into the results; -1 = none yet */
    bool cancelled;             /* a cancelled result was seen for it */
    size_t off, len;            /* the result line with its "\n" */
};

struct results_map {
    const char *map;
    size_t size;
};

struct merge {
    const struct merge_opts *o;
    struct merge_report *r;
    json_t **ids;               /* [n_lines] the request on each line; NULL = blank */
    struct slot *slots;         /* [n_lines] */
    int64_t n_lines, cap_lines;
    struct results_map *maps;   /* [o->n_results] */
    int64_t notes;              /* problems noted (or not, past MERGE_NOTES_MAX) */
};

/* note() : one problem, through o->cb.warn while fewer than MERGE_NOTES_MAX. */
static void
note(struct merge *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
note(struct merge *m, const char *fmt, ...)
{
    char msg[DIAG_MSG_MAX];
    va_list ap;

    if (m->notes++ >= MERGE_NOTES_MAX || !m->o->cb.warn)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    m->o->cb.warn(m->o->cb.ctx, msg);
}

/* An id as JSON text, ASCII only (safe on a terminal), cut at 80 bytes. */
static const char *
id_text(const json_t *id, char *buf, size_t cap)
{
    char *s = json_dumps(id, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);

    snprintf(buf, cap, "%.80s%s", s ? s : "?", s && strlen(s) > 80 ? "..." : "");
    free(s);
    return buf;
}

static int
add_request(struct merge *m, json_t *id)
{
    if (m->n_lines == m->cap_lines) {
        int64_t c = m->cap_lines ? m->cap_lines * 2 : 1024;
        json_t **v = realloc(m->ids, (size_t)c * sizeof(*v));
        if (!v)
            return -ST_NOMEM;
        m->ids = v;
        m->cap_lines = c;
    }
    m->ids[m->n_lines++] = id;
    return 0;
}

/* a request line's id (NULL: blank) kept in m->ids */
static int
keep_id(void *ctx, json_t *id, int64_t line)
{
    struct merge *m = ctx;

    (void)line;
    if (add_request(m, json_incref(id)) < 0) {
        json_decref(id);
        return -ST_NOMEM;
    }
    m->r->requests += id != NULL;
    return 0;
}

/* read_requests() : the id of every line of the request file (NULL for a
 * blank one), as `generate --batch` gives them, through its reader
 * (batch_read_ids): a line over BATCH_LINE_MAX ends the merge as it ends
 * the batch (nothing past it can have a result), and a failed allocation
 * or read ends it too, never taken for the end of the file. */
static int
read_requests(struct merge *m, struct diag *d)
{
    return batch_read_ids(m->o->requests, keep_id, m, d);
}

/* take_results() : places the result lines of results file i. */
static int
take_results(struct merge *m, int i, struct diag *d)
{
    const char *path = m->o->results[i];
    const char *map = m->maps[i].map, *req = m->o->requests;
    size_t size = m->maps[i].size, pos = 0;
    int64_t lineno = 0;
    char a[128], b[128];

    if (!strcmp(req, "-"))
        req = "<stdin>";
    while (pos < size) {
        const char *nl = memchr(map + pos, '\n', size - pos);
        struct result_info ri;
        struct diag e = {{0}};
        size_t len;
        int rc;

        lineno++;
        if (!nl) {
            m->r->torn++;
            note(m, "'%s' line %lld: torn (no newline at the end of the file: a task died "
                 "while writing it): left out", path, (long long)lineno);
            break;
        }
        len = (size_t)(nl - (map + pos));
        rc = resume_line_parse(map + pos, len, &ri, &e);
        if (rc == -ST_NOMEM)
            return diag_set(d, ST_NOMEM, "out of memory");
        if (rc < 0)
            return diag_set(d, ST_FORMAT, "'%s' line %lld: %s", path, (long long)lineno, e.msg);
        if (rc == 0) {
            int64_t k = ri.line - 1;
            struct slot *s = k < m->n_lines ? &m->slots[k] : NULL;

            if (!s || !m->ids[k] || !json_equal(m->ids[k], ri.id)) {
                m->r->stray++;
                if (!s || !m->ids[k])
                    note(m, "'%s' line %lld: a result for id %s on line %lld, which is not a "
                         "request of '%s'", path, (long long)lineno,
                         id_text(ri.id, a, sizeof(a)), (long long)ri.line, req);
                else
                    note(m, "'%s' line %lld: a result for id %s on line %lld, but line %lld "
                         "of '%s' is id %s", path, (long long)lineno,
                         id_text(ri.id, a, sizeof(a)), (long long)ri.line, (long long)ri.line,
                         req, id_text(m->ids[k], b, sizeof(b)));
            } else if (ri.cancelled) {
                m->r->cancelled++;
                s->cancelled = true;
            } else if (s->file >= 0) {
                m->r->repeated++;
                note(m, "id %s (line %lld): a second result in '%s' line %lld",
                     id_text(ri.id, a, sizeof(a)), (long long)ri.line, path, (long long)lineno);
            } else {
                *s = (struct slot){ i, false, pos, len + 1 };
                m->r->results++;
                m->r->errors += !ri.completion;
            }
            result_info_release(&ri);
        }
        pos += len + 1;
    }
    return 0;
}

static int
map_results(struct merge *m, int i, struct diag *d)
{
    const char *path = m->o->results[i];
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    int rc = 0;

    if (fd < 0)
        return diag_set(d, ST_IO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = diag_set(d, ST_IO, "cannot stat '%s': %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = diag_set(d, ST_IO, "'%s': is not a regular file: --merge reads files of "
                      "results", path);
    } else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
            rc = diag_set(d, ST_IO, "cannot read '%s': %s", path, strerror(errno));
        else
            m->maps[i] = (struct results_map){ p, (size_t)st.st_size };
    }
    close(fd);
    return rc;
}

static int
write_merged(struct merge *m, struct diag *d)
{
    const struct merge_opts *o = m->o;
    struct xout xo;
    int rc;

    if ((rc = xout_open(&xo, o->output ? o->output : "-", o->force, d)) < 0) {
        diag_prefix(d, "'%s'", o->output ? o->output : "-");
        return rc;
    }
    for (int64_t k = 0; k < m->n_lines; k++) {
        const struct slot *s = &m->slots[k];
        if (s->file >= 0 &&
            (rc = write_all(xo.fp, m->maps[s->file].map + s->off, s->len, d)) < 0) {
            if (xo.is_stdout)
                diag_prefix(d, "stdout");
            else
                diag_prefix(d, "'%s'", o->output);
            xout_abort(&xo);
            return rc;
        }
    }
    if (xo.is_stdout) {
        if (fflush(stdout) != 0)
            return diag_set(d, ST_IO, "stdout: write failed: %s", strerror(errno));
        return 0;
    }
    /* the flush at the commit is where a full disk shows */
    if ((rc = xout_commit(&xo, d)) < 0)
        diag_prefix(d, "'%s'", o->output);
    return rc;
}

int
run_generate_merge(const struct merge_opts *o, struct merge_report *r, struct diag *d)
{
    struct merge m;
    bool to_stdout = !o->output || !strcmp(o->output, "-");
    char a[128];
    int rc;

    memset(r, 0, sizeof(*r));
    memset(&m, 0, sizeof(m));
    m.o = o;
    m.r = r;
    /* no output may replace an input; fail before reading anything */
    xio_note_input(o->requests);
    for (int i = 0; i < o->n_results; i++)
        xio_note_input(o->results[i]);
    if (!to_stdout && (rc = xout_check(o->output, o->force, d)) < 0) {
        diag_prefix(d, "'%s'", o->output);
        return rc;
    }
    if (!(m.maps = calloc((size_t)o->n_results + 1, sizeof(*m.maps)))) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < o->n_results; i++)
        if ((rc = map_results(&m, i, d)) < 0)
            goto out;
    if ((rc = read_requests(&m, d)) < 0)
        goto out;
    if (!(m.slots = malloc(((size_t)m.n_lines + 1) * sizeof(*m.slots)))) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int64_t k = 0; k < m.n_lines; k++)
        m.slots[k] = (struct slot){ -1, false, 0, 0 };
    for (int i = 0; i < o->n_results; i++)
        if ((rc = take_results(&m, i, d)) < 0)
            goto out;
    for (int64_t k = 0; k < m.n_lines; k++) {
        if (!m.ids[k] || m.slots[k].file >= 0)
            continue;
        r->missing++;
        note(&m, "missing: id %s (line %lld)%s", id_text(m.ids[k], a, sizeof(a)),
             (long long)k + 1, m.slots[k].cancelled ? ": cancelled" : "");
    }
    if (m.notes > MERGE_NOTES_MAX)
        runcb_warn(&o->cb, "... %lld more not listed", (long long)(m.notes - MERGE_NOTES_MAX));
    if (r->missing || r->repeated || r->stray) {
        rc = diag_set(d, ST_CHECK, "%lld of %lld requests have no result, %lld have more than "
                      "one, %lld results match no request: nothing written",
                      (long long)r->missing, (long long)r->requests, (long long)r->repeated,
                      (long long)r->stray);
        goto out;
    }
    rc = write_merged(&m, d);
out:
    for (int64_t k = 0; k < m.n_lines; k++)
        json_decref(m.ids[k]);
    free(m.ids);
    free(m.slots);
    for (int i = 0; m.maps && i < o->n_results; i++)
        if (m.maps[i].map)
            munmap((void *)m.maps[i].map, m.maps[i].size);
    free(m.maps);
    return rc;
}

void
merge_report_print(const struct merge_report *r, int n_results, const char *prefix, FILE *fp)
{
    fprintf(fp, "%s: %lld requests, %lld results (%lld errors) from %d files\n", prefix,
            (long long)r->requests, (long long)r->results, (long long)r->errors, n_results);
}
