/*
 * resume.c - the --resume results file (resume.h): read back, compacted
 * when needed, then appended to line by line under an exclusive lock.
 *
 * The lock travels with the file: when the file is created or rewritten,
 * the new contents are written to xio's temporary, which xio locks when it
 * makes it; we keep a descriptor of that temporary past xout_commit, so the
 * file that takes the name is already ours.  A second run that opened the
 * old file before the rename finds, once it has the old file's lock, that
 * the name now leads elsewhere, and starts over (open_locked).
 */
#include "resume.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "xio.h"

/* ---- result lines ---- */

void
result_info_release(struct result_info *ri)
{
    json_decref(ri->id);
    memset(ri, 0, sizeof(*ri));
}

int
resume_line_parse(const char *s, size_t n, struct result_info *ri, struct diag *d)
{
    json_t *o = NULL, *id;
    const char *schema = NULL, *type = NULL, *fr = NULL;
    int64_t line = 0;
    size_t i = 0;
    int rc;

    memset(ri, 0, sizeof(*ri));
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
        i++;
    if (i == n)
        return 1;
    if ((rc = json_load_mem(s, n, &o, d)) < 0)
        return rc;
    rc = -ST_FORMAT;
    if (!json_is_object(o)) {
        diag_set(d, ST_FORMAT, "not a JSON object");
        goto out;
    }
    if (json_obj_str(o, "schema", &schema, NULL) != 0 || strcmp(schema, "generate/1")) {
        diag_set(d, ST_FORMAT, "no \"schema\":\"generate/1\": not a result of generate --batch");
        goto out;
    }
    if (json_obj_str(o, "type", &type, NULL) != 0 ||
        (strcmp(type, "completion") && strcmp(type, "error"))) {
        diag_set(d, ST_FORMAT, "\"type\" is not \"completion\" or \"error\"");
        goto out;
    }
    id = json_object_get(o, "id");
    if (!json_is_string(id) && !json_is_integer(id)) {
        diag_set(d, ST_FORMAT, "\"id\" is not a string or an integer");
        goto out;
    }
    if (json_obj_int(o, "line", &line, NULL) != 0 || line < 1) {
        diag_set(d, ST_FORMAT, "no \"line\" (a line number): not a result of this version "
                 "of generate --batch");
        goto out;
    }
    if (json_obj_str(o, "finish_reason", &fr, NULL) != 0) {
        diag_set(d, ST_FORMAT, "no \"finish_reason\"");
        goto out;
    }
    ri->id = json_incref(id);
    ri->line = line;
    ri->completion = !strcmp(type, "completion");
    ri->cancelled = !strcmp(fr, "cancelled");
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* ---- opening ---- */

struct span {
    size_t off, len;
};

/* publish() : writes the spans of map into a new file that takes rf->path
 * (xio: temporary, fsync, rename, fsync of the folder) and makes it rf->fd,
 * locked.  force: the path may exist (a rewrite); without it, a file that
 * appeared meanwhile makes it fail. */
static int
publish(struct resume_file *rf, const char *map, const struct span *sp, size_t n, bool force,
        struct diag *d)
{
    struct xout xo;
    int fd, rc;

    if ((rc = xout_open(&xo, rf->path, force, d)) < 0) {
        diag_prefix(d, "'%s'", rf->path);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if ((rc = write_all(xo.fp, map + sp[i].off, sp[i].len, d)) < 0) {
            xout_abort(&xo);
            diag_prefix(d, "'%s'", rf->path);
            return rc;
        }
    }
    /* the temporary's lock is on its open file: a duplicate keeps it */
    if (fflush(xo.fp) != 0 || (fd = fcntl(fileno(xo.fp), F_DUPFD_CLOEXEC, 3)) < 0) {
        rc = diag_set(d, ST_IO, "'%s': write failed: %s", rf->path, strerror(errno));
        xout_abort(&xo);
        return rc;
    }
    if ((rc = xout_commit(&xo, d)) < 0) {
        close(fd);
        return rc;
    }
    if (rf->fd >= 0)
        close(rf->fd);
    rf->fd = fd;
    return 0;
}

/* open_locked() : rf->fd = rf->path opened and locked, created (empty) when
 * absent.  0; 1 when the name changed hands while we locked (try again);
 * -ST_*. */
static int
open_locked(struct resume_file *rf, struct diag *d)
{
    struct stat st, now;
    int fd, rc;

    if (stat(rf->path, &st) != 0) {
        if (errno != ENOENT)
            return diag_set(d, ST_IO, "cannot stat '%s': %s", rf->path, strerror(errno));
        if ((rc = xout_check(rf->path, false, d)) < 0) {
            diag_prefix(d, "'%s'", rf->path);
            return rc;
        }
        if ((rc = publish(rf, NULL, NULL, 0, false, d)) == 0) {
            rf->created = true;
            return 0;
        }
        /* another run made it first: take that one */
        return path_exists(rf->path) ? 1 : rc;
    }
    if (!S_ISREG(st.st_mode))
        return diag_set(d, ST_IO, "'%s': is %s: --resume needs a regular file", rf->path,
                        file_kind_name(st.st_mode));
    if ((rc = xout_check(rf->path, true, d)) < 0) {
        diag_prefix(d, "'%s'", rf->path);
        return rc;
    }
    /* O_NONBLOCK: should a FIFO take the name meanwhile, opening it must
     * not wait for a writer */
    fd = open(rf->path, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return diag_set(d, ST_IO, "cannot open '%s': %s", rf->path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = diag_set(d, ST_IO, "'%s': cannot stat: %s", rf->path, strerror(errno));
        close(fd);
        return rc;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = diag_set(d, ST_IO, "'%s': is %s: --resume needs a regular file", rf->path,
                      file_kind_name(st.st_mode));
        close(fd);
        return rc;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return diag_set(d, ST_IO, "'%s': another run is writing it (it is locked)", rf->path);
        return diag_set(d, ST_IO, "cannot lock '%s': %s", rf->path, strerror(e));
    }
    if (stat(rf->path, &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
        close(fd);
        return 1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    rf->fd = fd;
    return 0;
}

static int
add_span(struct span **sp, size_t *n, size_t *cap, size_t off, size_t len)
{
    if (*n > 0 && (*sp)[*n - 1].off + (*sp)[*n - 1].len == off) {
        (*sp)[*n - 1].len += len;
        return 0;
    }
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct span *v = realloc(*sp, c * sizeof(*v));
        if (!v)
            return -ST_NOMEM;
        *sp = v;
        *cap = c;
    }
    (*sp)[(*n)++] = (struct span){ off, len };
    return 0;
}

/* add_result() : ri (a success on line at of the file) into rf->res */
static int
add_result(struct resume_file *rf, const struct result_info *ri, int64_t at)
{
    if (rf->kept == rf->cap_res) {
        int64_t c = rf->cap_res ? rf->cap_res * 2 : 16;
        struct resume_result *v = realloc(rf->res, (size_t)c * sizeof(*v));
        if (!v)
            return -ST_NOMEM;
        rf->res = v;
        rf->cap_res = c;
    }
    rf->res[rf->kept++] = (struct resume_result){ json_incref(ri->id), ri->line, at };
    return 0;
}

/* scan() : reads the locked file (see resume.h): fills rf->done, checks
 * the successes against reqs (when given), then cuts off a torn last line
 * and rewrites the file without the lines it drops. */
static int
scan(struct resume_file *rf, const struct id_set *reqs, const char *req_name, struct diag *d)
{
    struct stat st;
    struct span *sp = NULL;
    size_t n_sp = 0, cap_sp = 0, pos = 0, size;
    const char *map = NULL;
    int64_t lineno = 0;
    bool rewrite = false;
    int rc = 0;

    if (fstat(rf->fd, &st) != 0)
        return diag_set(d, ST_IO, "cannot stat '%s': %s", rf->path, strerror(errno));
    size = (size_t)st.st_size;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, rf->fd, 0);
        if (map == MAP_FAILED)
            return diag_set(d, ST_IO, "cannot read '%s': %s", rf->path, strerror(errno));
    }
    while (pos < size) {
        const char *nl = memchr(map + pos, '\n', size - pos);
        struct result_info ri;
        struct diag e = {{0}};
        bool keep = true;
        size_t len;

        lineno++;
        if (!nl) {
            rf->torn = size - pos;
            break;
        }
        len = (size_t)(nl - (map + pos));
        rc = resume_line_parse(map + pos, len, &ri, &e);
        if (rc == -ST_NOMEM) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        if (rc < 0) {
            rc = diag_set(d, ST_FORMAT, "'%s' line %lld: %s", rf->path, (long long)lineno, e.msg);
            goto out;
        }
        if (rc == 0) {
            int64_t first = 0;

            keep = ri.completion && !ri.cancelled;
            if (keep && (first = id_set_add(&rf->done, ri.id, ri.line)) < 0) {
                result_info_release(&ri);
                rc = diag_set(d, ST_NOMEM, "out of memory");
                goto out;
            }
            keep = keep && first == 0;
            if (keep && add_result(rf, &ri, lineno) < 0) {
                result_info_release(&ri);
                rc = diag_set(d, ST_NOMEM, "out of memory");
                goto out;
            }
            rf->dropped += !keep;
            result_info_release(&ri);
        }
        if (keep && add_span(&sp, &n_sp, &cap_sp, pos, len + 1) < 0) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        rewrite |= !keep;
        pos += len + 1;
    }
    /* a file refused is left as it is: nothing cut off or rewritten */
    if (reqs && (rc = resume_check_requests(rf, reqs, req_name, d)) < 0)
        goto out;
    rc = 0;
    if (rewrite) {
        rc = publish(rf, map, sp, n_sp, true, d);
    } else if (rf->torn) {
        if (ftruncate(rf->fd, (off_t)pos) != 0 || fsync(rf->fd) != 0)
            rc = diag_set(d, ST_IO, "'%s': cannot cut off the torn last line: %s", rf->path,
                          strerror(errno));
    }
out:
    if (map)
        munmap((void *)map, size);
    free(sp);
    return rc;
}

int
resume_open(struct resume_file *rf, const char *path, int64_t sync_lines, double sync_seconds,
            const struct id_set *reqs, const char *req_name, struct diag *d)
{
    int rc = 0, flags;

    memset(rf, 0, sizeof(*rf));
    rf->fd = -1;
    rf->sync_lines = sync_lines >= 1 ? sync_lines : RESUME_SYNC_LINES;
    rf->sync_seconds = sync_seconds >= 0 ? sync_seconds : RESUME_SYNC_SECONDS;
    if (!(rf->path = strdup(path)))
        return diag_set(d, ST_NOMEM, "out of memory");
    for (int tries = 0; (rc = open_locked(rf, d)) == 1; tries++) {
        if (tries == 8) {
            rc = diag_set(d, ST_IO, "'%s': replaced by another program while being opened",
                          path);
            break;
        }
    }
    if (rc < 0 || (rc = scan(rf, reqs, req_name, d)) < 0)
        goto fail;
    flags = fcntl(rf->fd, F_GETFL);
    if (flags < 0 || fcntl(rf->fd, F_SETFL, flags | O_APPEND) != 0 ||
        (rf->end = lseek(rf->fd, 0, SEEK_END)) < 0) {
        rc = diag_set(d, ST_IO, "'%s': %s", path, strerror(errno));
        goto fail;
    }
    /* no output of this run (--kv-trace) may replace it */
    xio_note_input(path);
    rf->t_sync = now_seconds();
    return 0;
fail:
    resume_close(rf, false, NULL);
    return rc;
}

int
resume_check_requests(const struct resume_file *rf, const struct id_set *reqs,
                      const char *req_name, struct diag *d)
{
    for (int64_t i = 0; i < rf->kept; i++) {
        const struct resume_result *x = &rf->res[i];
        int64_t first = id_set_find(reqs, x->id);
        char *js;

        if (first == x->line)
            continue;
        js = json_dumps(x->id, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
        if (first == 0)
            diag_set(d, ST_FORMAT, "'%s' line %lld: a result for id %.80s, which no request of "
                     "'%s' has (results of another request file?)", rf->path, (long long)x->at,
                     js ? js : "?", req_name);
        else
            diag_set(d, ST_FORMAT, "'%s' line %lld: the result for id %.80s is for line %lld, but "
                     "line %lld of '%s' has that id (results of another request file?)",
                     rf->path, (long long)x->at, js ? js : "?", (long long)x->line,
                     (long long)first, req_name);
        free(js);
        return -ST_FORMAT;
    }
    return 0;
}

/* ---- appending ---- */

int
resume_sync(struct resume_file *rf, struct diag *d)
{
    if (rf->unsynced == 0)
        return 0;
    if (fdatasync(rf->fd) != 0)
        return diag_set(d, ST_IO, "'%s': fsync failed: %s", rf->path, strerror(errno));
    rf->unsynced = 0;
    rf->t_sync = now_seconds();
    return 0;
}

int
resume_tick(struct resume_file *rf, struct diag *d)
{
    if (rf->unsynced > 0 && now_seconds() - rf->t_sync >= rf->sync_seconds)
        return resume_sync(rf, d);
    return 0;
}

int
resume_append(struct resume_file *rf, const char *line, size_t n, struct diag *d)
{
    size_t done = 0;
    int e;

    while (done < n) {
        ssize_t w = write(rf->fd, line + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            /* no half line stays behind (we are the only writer: the lock) */
            if (done > 0 && ftruncate(rf->fd, rf->end) != 0)
                return diag_set(d, ST_IO, "'%s': write failed: %s; its last line is torn "
                                "(the next --resume cuts it off)", rf->path, strerror(e));
            return diag_set(d, ST_IO, "'%s': write failed: %s", rf->path, strerror(e));
        }
        done += (size_t)w;
    }
    rf->end += (off_t)n;
    rf->appended++;
    rf->unsynced++;
    if (rf->unsynced >= rf->sync_lines)
        return resume_sync(rf, d);
    return resume_tick(rf, d);
}

int
resume_close(struct resume_file *rf, bool ok, struct diag *d)
{
    int rc = 0;

    if (!rf->path)
        return 0;
    if (rf->fd >= 0) {
        rc = resume_sync(rf, d);
        if (rf->created && !ok && rf->appended == 0)
            unlink(rf->path);       /* still locked: nobody else is using it */
        close(rf->fd);
    }
    id_set_release(&rf->done);
    for (int64_t i = 0; i < rf->kept; i++)
        json_decref(rf->res[i].id);
    free(rf->res);
    free(rf->path);
    memset(rf, 0, sizeof(*rf));
    rf->fd = -1;
    return rc;
}
