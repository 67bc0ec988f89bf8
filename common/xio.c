#include "xio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- cleanup registry ---- */

#define XIO_SLOTS 64

static struct {
    char path[4096];
    bool used;
    bool dir;
} tmp_slots[XIO_SLOTS];

static int
slot_add(const char *path, bool dir)
{
    for (int i = 0; i < XIO_SLOTS; i++) {
        if (!tmp_slots[i].used) {
            snprintf(tmp_slots[i].path, sizeof(tmp_slots[i].path), "%s", path);
            tmp_slots[i].dir = dir;
            tmp_slots[i].used = true;
            return i;
        }
    }
    return -1;
}

static void
slot_del(int i)
{
    if (i >= 0 && i < XIO_SLOTS)
        tmp_slots[i].used = false;
}

static void
remove_tree(const char *path)
{
    DIR *dp = opendir(path);
    struct dirent *de;
    char buf[4096];

    if (dp) {
        while ((de = readdir(dp))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            snprintf(buf, sizeof(buf), "%s/%s", path, de->d_name);
            unlink(buf);
        }
        closedir(dp);
    }
    rmdir(path);
}

void
xio_cleanup_all(void)
{
    for (int i = 0; i < XIO_SLOTS; i++) {
        if (!tmp_slots[i].used)
            continue;
        if (tmp_slots[i].dir)
            remove_tree(tmp_slots[i].path);
        else
            unlink(tmp_slots[i].path);
        tmp_slots[i].used = false;
    }
}

/* ---- sources ---- */

int
src_open(struct src *s, const char *path, struct diag *d)
{
    struct stat st;
    int fd;

    memset(s, 0, sizeof(*s));
    s->size = UINT64_MAX;
    if (!strcmp(path, "-")) {
        s->name = strdup("<stdin>");
        s->is_stdin = true;
        fd = STDIN_FILENO;
    } else {
        s->name = strdup(path);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return diag_set(d, ST_IO, "cannot open: %s", strerror(errno));
    }
    if (!s->name) {
        if (!s->is_stdin)
            close(fd);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (!s->is_stdin)
            close(fd);
        return diag_set(d, ST_IO, "is a directory");
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        s->size = (uint64_t)st.st_size;
        if (st.st_size > 0) {
            void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m != MAP_FAILED) {
                s->map = m;
                s->map_len = (size_t)st.st_size;
                if (!s->is_stdin)
                    close(fd);
                else
                    lseek(fd, 0, SEEK_END);
                return 0;
            }
        }
    }
    s->fp = s->is_stdin ? stdin : fdopen(fd, "rb");
    if (!s->fp) {
        close(fd);
        return diag_set(d, ST_IO, "cannot open: %s", strerror(errno));
    }
    return 0;
}

void
src_open_mem(struct src *s, const void *data, size_t len, const char *name)
{
    memset(s, 0, sizeof(*s));
    s->name = strdup(name ? name : "<memory>");
    s->map = data;
    s->size = len;
    s->map_len = 0; /* not ours to unmap */
}

void
src_close(struct src *s)
{
    if (s->map && s->map_len)
        munmap((void *)s->map, s->map_len);
    if (s->fp && !s->is_stdin)
        fclose(s->fp);
    free(s->name);
    memset(s, 0, sizeof(*s));
}

uint64_t
src_remaining(const struct src *s)
{
    if (s->size == UINT64_MAX)
        return UINT64_MAX;
    return s->size > s->pos ? s->size - s->pos : 0;
}

int
src_read(struct src *s, void *buf, size_t n, struct diag *d)
{
    if (s->map) {
        if (n > src_remaining(s))
            return diag_set(d, ST_FORMAT, "unexpected end of file at offset %llu",
                            (unsigned long long)s->size);
        memcpy(buf, s->map + s->pos, n);
        s->pos += n;
        return 0;
    }
    if (n && fread(buf, 1, n, s->fp) != n) {
        if (ferror(s->fp))
            return diag_set(d, ST_IO, "read error: %s", strerror(errno));
        return diag_set(d, ST_FORMAT, "unexpected end of file after %llu bytes",
                        (unsigned long long)(s->pos + 0));
    }
    s->pos += n;
    return 0;
}

int
src_skip(struct src *s, uint64_t n, struct diag *d)
{
    char buf[65536];

    if (s->map) {
        if (n > src_remaining(s))
            return diag_set(d, ST_FORMAT, "unexpected end of file at offset %llu",
                            (unsigned long long)s->size);
        s->pos += n;
        return 0;
    }
    while (n) {
        size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
        int rc = src_read(s, buf, k, d);
        if (rc)
            return rc;
        n -= k;
    }
    return 0;
}

const void *
src_map_at(const struct src *s, uint64_t off, uint64_t n)
{
    if (!s->map || off > s->size || n > s->size - off)
        return NULL;
    return s->map + off;
}

/* ---- outputs ---- */

static int
fsync_parent(const char *path)
{
    char *cp = strdup(path);
    int fd, rc = 0;

    if (!cp)
        return -1;
    fd = open(dirname(cp), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        rc = fsync(fd);
        close(fd);
    }
    free(cp);
    return rc;
}

int
xout_open(struct xout *o, const char *path, bool force, struct diag *d)
{
    size_t n;
    int fd;

    memset(o, 0, sizeof(*o));
    o->slot = -1;
    if (!strcmp(path, "-")) {
        o->is_stdout = true;
        o->fp = stdout;
        return 0;
    }
    if (!force && path_exists(path))
        return diag_set(d, ST_RANGE, "already exists (use -f to overwrite)");
    if (path_is_dir(path))
        return diag_set(d, ST_IO, "is a directory");
    n = strlen(path) + 16;
    o->dst = strdup(path);
    o->tmp = malloc(n);
    if (!o->dst || !o->tmp) {
        free(o->dst);
        free(o->tmp);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    snprintf(o->tmp, n, "%s.tmp.XXXXXX", path);
    fd = mkstemp(o->tmp);
    if (fd < 0) {
        int e = errno;
        free(o->dst);
        free(o->tmp);
        memset(o, 0, sizeof(*o));
        return diag_set(d, ST_IO, "cannot create: %s", strerror(e));
    }
    { /* mkstemp gives 0600; outputs are ordinary files */
        mode_t um = umask(0);
        umask(um);
        fchmod(fd, 0666 & ~um);
    }
    o->slot = slot_add(o->tmp, false);
    o->fp = fdopen(fd, "wb");
    if (!o->fp) {
        int e = errno;
        close(fd);
        xout_abort(o);
        return diag_set(d, ST_IO, "cannot open: %s", strerror(e));
    }
    return 0;
}

int
xout_open_dir(struct xout *o, const char *path, bool force, struct diag *d)
{
    size_t n;

    memset(o, 0, sizeof(*o));
    o->slot = -1;
    o->is_dir = true;
    if (!force && path_exists(path))
        return diag_set(d, ST_RANGE, "already exists (use -f to overwrite)");
    n = strlen(path) + 16;
    o->dst = strdup(path);
    o->tmp = malloc(n);
    if (!o->dst || !o->tmp) {
        free(o->dst);
        free(o->tmp);
        memset(o, 0, sizeof(*o));
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    snprintf(o->tmp, n, "%s.tmp.XXXXXX", path);
    if (!mkdtemp(o->tmp)) {
        int e = errno;
        free(o->dst);
        free(o->tmp);
        memset(o, 0, sizeof(*o));
        return diag_set(d, ST_IO, "cannot create directory: %s", strerror(e));
    }
    chmod(o->tmp, 0755);
    o->slot = slot_add(o->tmp, true);
    return 0;
}

void
xout_abort(struct xout *o)
{
    if (o->is_stdout) {
        memset(o, 0, sizeof(*o));
        return;
    }
    if (o->fp)
        fclose(o->fp);
    if (o->tmp) {
        if (o->is_dir)
            remove_tree(o->tmp);
        else
            unlink(o->tmp);
    }
    slot_del(o->slot);
    free(o->tmp);
    free(o->dst);
    memset(o, 0, sizeof(*o));
    o->slot = -1;
}

int
xout_commit(struct xout *o, struct diag *d)
{
    int e;

    if (o->is_stdout) {
        if (fflush(stdout) != 0 || ferror(stdout)) {
            e = errno;
            memset(o, 0, sizeof(*o));
            return diag_set(d, ST_IO, "write failed: %s", strerror(e));
        }
        memset(o, 0, sizeof(*o));
        return 0;
    }
    if (o->is_dir) {
        if (path_is_dir(o->dst)) {
            /* Replace an existing output directory (force was checked at open). */
            char *old = malloc(strlen(o->dst) + 16);
            if (!old) {
                xout_abort(o);
                return diag_set(d, ST_NOMEM, "out of memory");
            }
            sprintf(old, "%s.old.XXXXXX", o->dst);
            if (!mkdtemp(old) || rename(o->dst, old) != 0) {
                e = errno;
                free(old);
                xout_abort(o);
                return diag_set(d, ST_IO, "cannot replace directory: %s", strerror(e));
            }
            if (rename(o->tmp, o->dst) != 0) {
                e = errno;
                rename(old, o->dst);
                free(old);
                xout_abort(o);
                return diag_set(d, ST_IO, "rename failed: %s", strerror(e));
            }
            remove_tree(old);
            free(old);
        } else if (rename(o->tmp, o->dst) != 0) {
            e = errno;
            xout_abort(o);
            return diag_set(d, ST_IO, "rename failed: %s", strerror(e));
        }
        fsync_parent(o->dst);
        slot_del(o->slot);
        free(o->tmp);
        free(o->dst);
        memset(o, 0, sizeof(*o));
        return 0;
    }
    if (fflush(o->fp) != 0 || ferror(o->fp) || fsync(fileno(o->fp)) != 0) {
        e = errno;
        xout_abort(o);
        return diag_set(d, ST_IO, "write failed: %s", strerror(e ? e : EIO));
    }
    if (fclose(o->fp) != 0) {
        e = errno;
        o->fp = NULL;
        xout_abort(o);
        return diag_set(d, ST_IO, "write failed: %s", strerror(e));
    }
    o->fp = NULL;
    if (rename(o->tmp, o->dst) != 0) {
        e = errno;
        xout_abort(o);
        return diag_set(d, ST_IO, "rename failed: %s", strerror(e));
    }
    fsync_parent(o->dst);
    slot_del(o->slot);
    free(o->tmp);
    free(o->dst);
    memset(o, 0, sizeof(*o));
    o->slot = -1;
    return 0;
}

int
write_all(FILE *fp, const void *buf, size_t n, struct diag *d)
{
    if (n && fwrite(buf, 1, n, fp) != n)
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
    return 0;
}

int
write_file_atomic(const char *path, const void *buf, size_t len, bool force, struct diag *d)
{
    struct xout o;
    int rc = xout_open(&o, path, force, d);

    if (rc)
        return rc;
    rc = write_all(o.fp, buf, len, d);
    if (rc) {
        xout_abort(&o);
        return rc;
    }
    return xout_commit(&o, d);
}

int
read_file_all(const char *path, size_t max, char **out, size_t *len, struct diag *d)
{
    FILE *fp;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    bool is_stdin = !strcmp(path, "-");

    *out = NULL;
    if (len)
        *len = 0;
    fp = is_stdin ? stdin : fopen(path, "rb");
    if (!fp)
        return diag_set(d, ST_IO, "cannot open: %s", strerror(errno));
    if (!is_stdin && path_is_dir(path)) {
        fclose(fp);
        return diag_set(d, ST_IO, "is a directory");
    }
    for (;;) {
        size_t k;
        if (cap - n < 65537) {
            size_t nc = cap ? cap * 2 : 65536 * 2;
            char *nb;
            if (nc > max + 65537)
                nc = max + 65537;
            if (nc <= cap) {
                free(buf);
                if (!is_stdin)
                    fclose(fp);
                return diag_set(d, ST_FORMAT, "file larger than %zu bytes", max);
            }
            nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                if (!is_stdin)
                    fclose(fp);
                return diag_set(d, ST_NOMEM, "out of memory");
            }
            buf = nb;
            cap = nc;
        }
        k = fread(buf + n, 1, cap - n - 1, fp);
        n += k;
        if (n > max) {
            free(buf);
            if (!is_stdin)
                fclose(fp);
            return diag_set(d, ST_FORMAT, "file larger than %zu bytes", max);
        }
        if (k == 0)
            break;
    }
    if (ferror(fp)) {
        int e = errno;
        free(buf);
        if (!is_stdin)
            fclose(fp);
        return diag_set(d, ST_IO, "read error: %s", strerror(e));
    }
    if (!is_stdin)
        fclose(fp);
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return 0;
}

bool
path_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool
path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

char *
path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);

    if (p)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}
