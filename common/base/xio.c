#include "xio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
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

/* Replacing an output directory takes two renames and the removal of the
 * old one: a signal between them would leave the user's original only at
 * OUT.old.X, or half removed.  The committing thread blocks the signals
 * that end the process (so no handler, and no default action, runs on it)
 * and counts itself in commits_busy; a cleanup on another thread (a
 * handler, or die()) waits in xio_cleanup_all until no commit is in
 * progress, and a commit that would start once a cleanup has begun never
 * starts: the process is ending.  After a signal, then, either the original
 * is at OUT untouched or the new output is, and no OUT.old.* remains. */
static atomic_int commits_busy, cleaning;
static _Thread_local bool in_commit;

static void
critical_enter(sigset_t *old)
{
    sigset_t s;

    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigaddset(&s, SIGHUP);
    sigaddset(&s, SIGPIPE);
    sigaddset(&s, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &s, old);
    in_commit = true;
    atomic_fetch_add(&commits_busy, 1);
    if (atomic_load(&cleaning)) {
        /* another thread removes the temporaries and ends the process:
         * OUT stays as it is */
        atomic_fetch_sub(&commits_busy, 1);
        for (;;)
            pause();
    }
}

static void
critical_leave(const sigset_t *old)
{
    atomic_fetch_sub(&commits_busy, 1);
    in_commit = false;
    pthread_sigmask(SIG_SETMASK, old, NULL);   /* a pending signal lands now */
}

void
xio_cleanup_all(void)
{
    atomic_store(&cleaning, 1);
    while (!in_commit && atomic_load(&commits_busy) > 0) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
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

/* ---- this run's inputs and outputs ---- */

/* What this run reads and writes, so that an output never replaces one of its
 * inputs or another output (each checked by device and inode, or by the
 * canonical path of a file that does not exist yet). */
#define XIO_FILES 256

static bool inputs_lost;   /* an input could not be recorded: the table was full */

static struct {
    dev_t dev;
    ino_t ino;
    int opens;         /* sources open on it now */
    bool permanent;    /* named by xio_note_input: for the whole run */
} in_files[XIO_FILES];

static struct {
    char *canon;       /* canonical path of the final name */
    bool used;
} out_files[XIO_FILES];

/* input_add() : registers a regular file as an input; returns its slot + 1,
 * or 0 when it is not a regular file or the table is full. */
static int
input_add(int fd, const char *path, bool permanent)
{
    struct stat st;
    int i, free_i = -1;

    if ((fd >= 0 ? fstat(fd, &st) : stat(path, &st)) != 0 || !S_ISREG(st.st_mode))
        return 0;
    for (i = 0; i < XIO_FILES; i++) {
        if (in_files[i].opens || in_files[i].permanent) {
            if (in_files[i].dev == st.st_dev && in_files[i].ino == st.st_ino)
                break;
        } else if (free_i < 0) {
            free_i = i;
        }
    }
    if (i == XIO_FILES) {
        if (free_i < 0) {
            inputs_lost = true;
            return 0;
        }
        i = free_i;
        in_files[i].dev = st.st_dev;
        in_files[i].ino = st.st_ino;
    }
    if (permanent)
        in_files[i].permanent = true;
    else
        in_files[i].opens++;
    return i + 1;
}

void
xio_note_input(const char *path)
{
    if (!path)
        return;
    if (!strcmp(path, "-"))
        input_add(STDIN_FILENO, NULL, true);     /* counts when stdin is a file */
    else
        input_add(-1, path, true);
}

/* ---- sources ---- */

const char *
file_kind_name(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" :
           S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" :
           S_ISLNK(m) ? "a symbolic link" : "a special file";
}

/* open_src() : src_open(), and src_open_file() when file_only. */
static int
open_src(struct src *s, const char *path, bool file_only, struct diag *d)
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
        /* what is not a file is named before it is opened (a socket cannot
         * be, a device need not be); O_NONBLOCK for what changes in between:
         * open() of a FIFO would wait for a writer, before fstat() could
         * tell that it is one */
        if (file_only && s->name && stat(path, &st) == 0 && !S_ISREG(st.st_mode) &&
            !S_ISDIR(st.st_mode))
            return diag_set(d, ST_IO, "is %s, not a regular file",
                            file_kind_name(st.st_mode));
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | (file_only ? O_NONBLOCK : 0));
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
    if (file_only) {
        if (fstat(fd, &st) != 0) {
            int e = errno;
            if (!s->is_stdin)
                close(fd);
            return diag_set(d, ST_IO, "cannot stat: %s", strerror(e));
        }
        if (!S_ISREG(st.st_mode)) {
            if (!s->is_stdin)
                close(fd);
            return diag_set(d, ST_IO, "is %s, not a regular file",
                            S_ISFIFO(st.st_mode) && s->is_stdin ? "a pipe" : file_kind_name(st.st_mode));
        }
        int fl = s->is_stdin ? 0 : fcntl(fd, F_GETFL);
        if (fl < 0 || (!s->is_stdin && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) {
            int e = errno;
            close(fd);
            return diag_set(d, ST_IO, "cannot clear O_NONBLOCK: %s", strerror(e));
        }
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        s->in_slot = input_add(fd, NULL, false);
        s->size = (uint64_t)st.st_size;
        if (st.st_size > 0) {
            void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m == MAP_FAILED && errno == ENOMEM) {
                /* Out of address space (ulimit -v) or memory: a resource
                 * problem, not a file that cannot be mapped. */
                if (!s->is_stdin)
                    close(fd);
                return diag_set(d, ST_NOMEM, "out of memory mapping the file (%llu bytes)",
                                (unsigned long long)st.st_size);
            }
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

int
src_open(struct src *s, const char *path, struct diag *d)
{
    return open_src(s, path, false, d);
}

int
src_open_file(struct src *s, const char *path, struct diag *d)
{
    return open_src(s, path, true, d);
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
    if (s->in_slot > 0 && s->in_slot <= XIO_FILES && in_files[s->in_slot - 1].opens > 0)
        in_files[s->in_slot - 1].opens--;
    free(s->heap);
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

/* mem_limit() : the most bytes a stream may be buffered into: the smaller
 * of the address-space limit and the machine's physical memory. */
static uint64_t
mem_limit(void)
{
    struct rlimit rl;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t lim = UINT64_MAX;

    if (pages > 0 && psz > 0)
        lim = (uint64_t)pages * (uint64_t)psz;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (uint64_t)rl.rlim_cur < lim)
        lim = (uint64_t)rl.rlim_cur;
    return lim;
}

int
src_load(struct src *s, uint64_t n, struct diag *d)
{
    uint64_t have = 0, cap, total;
    uint8_t *buf = NULL;

    if (s->map)
        return 0;
    if (n > UINT64_MAX - s->pos || s->pos + n > SIZE_MAX / 2)
        return diag_set(d, ST_FORMAT, "data section of %llu bytes is too large",
                        (unsigned long long)n);
    total = s->pos + n;
    if (n > mem_limit())
        return diag_set(d, ST_NOMEM, "out of memory: the data section of %llu bytes cannot fit in memory",
                        (unsigned long long)n);
    /* the first buffer holds the consumed header and a first 16 MiB */
    cap = n < ((uint64_t)1 << 24) ? total : s->pos + ((uint64_t)1 << 24);
    while (have < n) {
        size_t k;

        if (s->pos + have == cap || !buf) {
            uint64_t nc = buf ? (cap * 2 < total ? cap * 2 : total) : cap;
            uint8_t *nb = realloc(buf, (size_t)(nc ? nc : 1));
            if (!nb) {
                free(buf);
                return diag_set(d, ST_NOMEM, "out of memory reading %llu bytes of tensor data",
                                (unsigned long long)n);
            }
            if (!buf)
                memset(nb, 0, (size_t)s->pos);
            buf = nb;
            cap = nc;
        }
        k = fread(buf + s->pos + have, 1, (size_t)(cap - s->pos - have), s->fp);
        if (k == 0) {
            int e = errno;
            bool err = ferror(s->fp);
            free(buf);
            if (err)
                return diag_set(d, ST_IO, "read error: %s", strerror(e));
            return diag_set(d, ST_FORMAT, "unexpected end of file after %llu bytes (%llu expected)",
                            (unsigned long long)(s->pos + have), (unsigned long long)total);
        }
        have += k;
    }
    s->heap = buf;
    s->map = buf;
    s->map_len = 0;
    s->size = total;
    s->pos = total;
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

static bool
is_input(const struct stat *st)
{
    for (int i = 0; i < XIO_FILES; i++)
        if ((in_files[i].opens || in_files[i].permanent) && in_files[i].dev == st->st_dev &&
            in_files[i].ino == st->st_ino)
            return true;
    return false;
}

/* canonical() : malloc'd realpath of path's directory + "/" + its last
 * component (path itself need not exist), or NULL. */
static char *
canonical(const char *path)
{
    char *cp = strdup(path), *cp2 = strdup(path), *out = NULL;
    char *rd;

    if (!cp || !cp2)
        goto done;
    rd = realpath(dirname(cp), NULL);
    if (rd) {
        out = path_join(rd, basename(cp2));
        free(rd);
    }
done:
    free(cp);
    free(cp2);
    return out;
}

static int
out_add(const char *canon)
{
    for (int i = 0; i < XIO_FILES; i++) {
        if (!out_files[i].used) {
            out_files[i].canon = strdup(canon);
            if (!out_files[i].canon)
                return -1;
            out_files[i].used = true;
            return i;
        }
    }
    return -1;
}

static void
out_del(const char *canon)
{
    if (!canon)
        return;
    for (int i = 0; i < XIO_FILES; i++) {
        if (out_files[i].used && !strcmp(out_files[i].canon, canon)) {
            free(out_files[i].canon);
            out_files[i].canon = NULL;
            out_files[i].used = false;
            return;
        }
    }
}

static bool
is_output(const char *canon)
{
    for (int i = 0; i < XIO_FILES; i++)
        if (out_files[i].used && !strcmp(out_files[i].canon, canon))
            return true;
    return false;
}

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

/* Temporaries are "<dst>.tmp.llmkit-XXXXXX": a name no other program makes,
 * so that only ours are ever taken for stale ones. */
#define TMP_INFIX ".tmp.llmkit-"

/* is_tmp_name() : name is base + TMP_INFIX + mkstemp's six characters. */
static bool
is_tmp_name(const char *name, const char *base)
{
    size_t n = strlen(base), k = strlen(TMP_INFIX);

    if (strncmp(name, base, n) || strncmp(name + n, TMP_INFIX, k) || strlen(name + n + k) != 6)
        return false;
    for (const char *p = name + n + k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            return false;
    return true;
}

/* remove_stale_temps() : removes dst's temporaries that no live run holds
 * (their flock is free: the run that made them died, e.g. by SIGKILL).  The
 * lock is taken before the unlink, and a run that made its temporary checks
 * after locking it that the name is still its own (lock_tmp), so a live
 * run's temporary is never removed. */
static void
remove_stale_temps(const char *dst, bool dirs)
{
    char *cp = strdup(dst), *cp2 = strdup(dst);
    const char *dir, *base;
    DIR *dp = NULL;
    struct dirent *de;

    if (!cp || !cp2)
        goto out;
    dir = dirname(cp);
    base = basename(cp2);
    dp = opendir(dir);
    if (!dp)
        goto out;
    while ((de = readdir(dp))) {
        struct stat st;
        char *p;
        int fd;

        if (!is_tmp_name(de->d_name, base))
            continue;
        p = path_join(dir, de->d_name);
        if (!p)
            break;
        if (lstat(p, &st) == 0 && (dirs ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) &&
            st.st_uid == geteuid()) {
            fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            if (fd >= 0) {
                if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                    if (S_ISDIR(st.st_mode))
                        remove_tree(p);
                    else
                        unlink(p);
                }
                close(fd);
            }
        }
        free(p);
    }
out:
    if (dp)
        closedir(dp);
    free(cp);
    free(cp2);
}

/* lock_tmp() : locks the new temporary fd and checks that path still names it
 * (a concurrent remove_stale_temps may have taken it between mkstemp and the
 * lock).  0 = ours and locked; 1 = lost, make another; -1 = error. */
static int
lock_tmp(int fd, const char *path)
{
    struct stat a, b;

    if (flock(fd, LOCK_EX) != 0)
        return -1;
    if (fstat(fd, &a) != 0)
        return -1;
    if (lstat(path, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return 1;
    return 0;
}

enum dst_kind { DST_NEW, DST_FILE, DST_DIR, DST_DIRECT };

/* checkpoint_name() : whether an entry of that name is one a Hugging Face
 * checkpoint directory holds (what --force may replace with it) */
static bool
checkpoint_name(const char *n)
{
    static const char *const names[] = { "tokenizer.model", "merges.txt", "vocab.txt",
                                         "chat_template.jinja", "README.md", ".gitattributes" };
    size_t k = strlen(n);

    if ((k > 12 && !strcmp(n + k - 12, ".safetensors")) || (k > 5 && !strcmp(n + k - 5, ".json")))
        return true;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(n, names[i]))
            return true;
    return false;
}

/* replaceable_dir() : 0 when --force may replace the directory path with a
 * new checkpoint: it holds only files a checkpoint has (no folder, device,
 * or other file: never anything this run reads); else -ST_RANGE naming the
 * entry */
static int
replaceable_dir(const char *path, struct diag *d)
{
    DIR *dp = opendir(path);
    struct dirent *de;
    int rc = 0;

    if (!dp)
        return diag_set(d, ST_IO, "cannot read the directory: %s", strerror(errno));
    while (rc == 0 && (de = readdir(dp))) {
        struct stat st;
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (fstatat(dirfd(dp), n, &st, AT_SYMLINK_NOFOLLOW) != 0)
            rc = diag_set(d, ST_IO, "cannot stat '%s' in it: %s", n, strerror(errno));
        else if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
            rc = diag_set(d, ST_RANGE, "holds %s '%s', which no checkpoint has: refusing to replace "
                          "the directory", S_ISDIR(st.st_mode) ? "the folder" : "the special file", n);
        else if (S_ISREG(st.st_mode) && is_input(&st))
            rc = diag_set(d, ST_RANGE, "holds '%s', an input of this run: refusing to replace the "
                          "directory", n);
        else if (!checkpoint_name(n))
            rc = diag_set(d, ST_RANGE, "holds '%s', which no checkpoint has: refusing to replace "
                          "the directory (remove it first)", n);
    }
    closedir(dp);
    return rc;
}

/* classify() : where path leads (see xio.h), the final path to write in
 * *final (malloc'd: a symlink is resolved), and its canonical name.  Checks
 * force, inputs and other outputs. */
static int
classify(const char *path, bool force, bool want_dir, enum dst_kind *kind, char **final,
         char **canon, struct diag *d)
{
    struct stat st;
    char *f = NULL, *c = NULL;
    int rc;

    *final = *canon = NULL;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT)
            return diag_set(d, ST_IO, "cannot stat: %s", strerror(errno));
        *kind = DST_NEW;
        f = strdup(path);
    } else if (S_ISLNK(st.st_mode)) {
        f = realpath(path, NULL);
        if (!f && stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
            /* /dev/stdout, /dev/fd/N, >(cmd): a link to "pipe:[N]", which
             * names no path, yet opens */
            f = strdup(path);
        } else if (!f) {
            if (errno == ENOENT)
                return diag_set(d, ST_IO, "is a symbolic link to nothing (dangling): refusing to follow it");
            return diag_set(d, ST_IO, "cannot follow the symbolic link: %s", strerror(errno));
        } else if (stat(f, &st) != 0) {
            rc = diag_set(d, ST_IO, "cannot stat '%s': %s", f, strerror(errno));
            free(f);
            return rc;
        }
        *kind = DST_FILE;
    } else {
        f = strdup(path);
        *kind = DST_FILE;
    }
    if (!f)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (*kind == DST_FILE) {
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
            if (want_dir) {
                rc = diag_set(d, ST_IO, "is not a directory");
                goto fail;
            }
            *kind = DST_DIRECT;
        } else if (S_ISDIR(st.st_mode)) {
            if (!want_dir) {
                rc = diag_set(d, ST_IO, "is a directory");
                goto fail;
            }
            *kind = DST_DIR;
        } else if (S_ISREG(st.st_mode)) {
            if (want_dir) {
                rc = diag_set(d, ST_IO, "is not a directory");
                goto fail;
            }
        } else {
            rc = diag_set(d, ST_IO, "is a %s, not a regular file: refusing to write to it",
                          S_ISBLK(st.st_mode) ? "block device" : S_ISSOCK(st.st_mode) ? "socket" : "special file");
            goto fail;
        }
        if (*kind != DST_DIRECT && (is_input(&st) || inputs_lost)) {
            rc = diag_set(d, ST_RANGE, "is also an input of this run: refusing to overwrite it");
            goto fail;
        }
        if (*kind != DST_DIRECT && !force) {
            rc = diag_set(d, ST_RANGE, "already exists (use --force to overwrite)");
            goto fail;
        }
        if (*kind == DST_DIR && (inputs_lost || (rc = replaceable_dir(f, d)) < 0)) {
            if (inputs_lost)
                rc = diag_set(d, ST_RANGE, "may hold an input of this run: refusing to replace it");
            goto fail;
        }
    }
    if (*kind != DST_DIRECT) {
        /* its temporary's name (NAME.tmp.llmkit-XXXXXX) must fit too, so
         * that a long run does not find out only when it writes */
        const char *base = strrchr(f, '/') ? strrchr(f, '/') + 1 : f;
        if (strlen(base) + strlen(TMP_INFIX) + 6 > NAME_MAX) {
            rc = diag_set(d, ST_IO, "file name too long for its temporary (%zu bytes; at most "
                          "%zu)", strlen(base), (size_t)NAME_MAX - strlen(TMP_INFIX) - 6);
            goto fail;
        }
        c = canonical(f);
        if (!c) {
            rc = diag_set(d, ST_IO, "cannot resolve the folder: %s", strerror(errno));
            goto fail;
        }
        if (is_output(c)) {
            rc = diag_set(d, ST_RANGE, "is named for two outputs of this run");
            goto fail;
        }
    }
    *final = f;
    *canon = c;
    return 0;
fail:
    free(f);
    free(c);
    return rc;
}

/* the checks of xout_check (dir: xout_open_dir's) */
static int
check_out(const char *path, bool force, bool dir, struct diag *d)
{
    enum dst_kind k;
    char *f, *c;
    int rc;

    if (!dir && !strcmp(path, "-"))
        return 0;
    rc = classify(path, force, dir, &k, &f, &c, d);
    free(f);
    free(c);
    return rc;
}

int
xout_check(const char *path, bool force, struct diag *d)
{
    return check_out(path, force, false, d);
}

int
xout_check_dir(const char *path, bool force, struct diag *d)
{
    return check_out(path, force, true, d);
}

static void
xout_release(struct xout *o)
{
    slot_del(o->slot);
    if (o->lock_fd > 0)
        close(o->lock_fd);
    if (o->dst && !o->direct && !o->is_stdout) {
        char *c = canonical(o->dst);
        out_del(c);
        free(c);
    }
    free(o->tmp);
    free(o->dst);
    memset(o, 0, sizeof(*o));
    o->slot = -1;
}

/* make_temp() : registers o->dst as an output of this run (taking canon),
 * removes its stale temporaries and creates a locked temporary beside it, a
 * file or, for a directory output, a folder.  Returns the file's descriptor,
 * or 0 for a folder (its locked descriptor kept in o->lock_fd); on error o is
 * released and -ST_* returned. */
static int
make_temp(struct xout *o, char *canon, struct diag *d)
{
    size_t n;
    int fd, rc;

    rc = out_add(canon);
    free(canon);
    if (rc < 0) {
        xout_release(o);
        return diag_set(d, ST_NOMEM, "too many outputs");
    }
    remove_stale_temps(o->dst, o->is_dir);
    n = strlen(o->dst) + strlen(TMP_INFIX) + 8;
    o->tmp = malloc(n);
    if (!o->tmp) {
        xout_release(o);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    for (int tries = 0;; tries++) {
        bool made;

        snprintf(o->tmp, n, "%s" TMP_INFIX "XXXXXX", o->dst);
        if (o->is_dir) {
            made = mkdtemp(o->tmp) != NULL;
            fd = made ? open(o->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        } else {
            fd = mkstemp(o->tmp);
            made = fd >= 0;
        }
        if (!made) {
            rc = diag_set(d, ST_IO, "cannot create: %s", strerror(errno));
            xout_release(o);
            return rc;
        }
        rc = fd < 0 ? -1 : lock_tmp(fd, o->tmp);
        if (rc == 0)
            break;
        if (fd >= 0)
            close(fd);
        if (rc < 0 || tries >= 8) {
            if (rc < 0 && o->is_dir)
                remove_tree(o->tmp);
            else if (rc < 0)
                unlink(o->tmp);
            xout_release(o);
            return diag_set(d, ST_IO, "cannot lock a temporary");
        }
    }
    if (o->is_dir) {
        o->lock_fd = fd;
        return 0;
    }
    /* The lock lives as long as this duplicate, past the fclose that ends
     * the writing, until the temporary has its final name (xout_release). */
    o->lock_fd = dup(fd);
    if (o->lock_fd < 0) {
        rc = diag_set(d, ST_IO, "cannot lock a temporary: %s", strerror(errno));
        close(fd);
        unlink(o->tmp);
        xout_release(o);
        return rc;
    }
    return fd;
}

int
xout_open(struct xout *o, const char *path, bool force, struct diag *d)
{
    enum dst_kind kind;
    char *canon = NULL;
    int fd, rc;

    memset(o, 0, sizeof(*o));
    o->slot = -1;
    if (!strcmp(path, "-")) {
        o->is_stdout = true;
        o->fp = stdout;
        return 0;
    }
    if ((rc = classify(path, force, false, &kind, &o->dst, &canon, d)) < 0)
        return rc;
    o->force = force;
    if (kind == DST_DIRECT) {
        /* A device or FIFO: written in place, never replaced. */
        o->direct = true;
        fd = open(o->dst, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) {
            rc = diag_set(d, ST_IO, "cannot open: %s", strerror(errno));
            xout_release(o);
            return rc;
        }
        o->fp = fdopen(fd, "wb");
        if (!o->fp) {
            rc = diag_set(d, ST_IO, "cannot open: %s", strerror(errno));
            close(fd);
            xout_release(o);
            return rc;
        }
        return 0;
    }
    if ((fd = make_temp(o, canon, d)) < 0)
        return fd;
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
    enum dst_kind kind;
    char *canon = NULL;
    int rc;

    memset(o, 0, sizeof(*o));
    o->slot = -1;
    o->is_dir = true;
    if ((rc = classify(path, force, true, &kind, &o->dst, &canon, d)) < 0) {
        o->is_dir = false;
        return rc;
    }
    o->force = force;
    if ((rc = make_temp(o, canon, d)) < 0)
        return rc;
    chmod(o->tmp, 0755);
    o->slot = slot_add(o->tmp, true);
    return 0;
}

void
xout_abort(struct xout *o)
{
    if (o->is_stdout) {
        memset(o, 0, sizeof(*o));
        o->slot = -1;
        return;
    }
    if (o->fp)
        fclose(o->fp);
    o->fp = NULL;
    if (o->tmp) {
        if (o->is_dir)
            remove_tree(o->tmp);
        else
            unlink(o->tmp);
    }
    xout_release(o);
}

/* finish() : the first half of a commit: everything is written, flushed,
 * fsynced and closed; nothing is renamed yet.  On error o is left for
 * xout_abort and d holds the reason. */
static int
finish(struct xout *o, struct diag *d)
{
    int e;

    if (o->is_stdout) {
        if (fflush(stdout) != 0 || ferror(stdout))
            return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
        return 0;
    }
    if (o->is_dir || !o->fp)
        return 0;
    if (fflush(o->fp) != 0 || ferror(o->fp))
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
    /* A device or FIFO may not support fsync (EINVAL): nothing to persist. */
    if (fsync(fileno(o->fp)) != 0 && !(o->direct && (errno == EINVAL || errno == EROFS)))
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
    e = fclose(o->fp);
    o->fp = NULL;
    if (e != 0)
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno));
    return 0;
}

/* place() : renames a finished temporary into place.  Without force it never
 * replaces what appeared at dst meanwhile (another run writing the same
 * name): RENAME_NOREPLACE, or link() where the file system lacks it. */
static int
place(const char *tmp, const char *dst, bool force, struct diag *d)
{
    struct stat st;

    if (force) {
        /* what was classified at open may have changed during the run */
        if (lstat(dst, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
            return diag_set(d, ST_IO, "is no longer a regular file: refusing to replace it");
        return rename(tmp, dst) == 0 ? 0 : diag_set(d, ST_IO, "rename failed: %s", strerror(errno));
    }
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno == EEXIST)
        return diag_set(d, ST_IO, "already exists: another run wrote it meanwhile (use --force to overwrite)");
    if (errno != EINVAL && errno != ENOSYS)
        return diag_set(d, ST_IO, "rename failed: %s", strerror(errno));
    if (link(tmp, dst) == 0) {
        unlink(tmp);
        return 0;
    }
    if (errno == EEXIST)
        return diag_set(d, ST_IO, "already exists: another run wrote it meanwhile (use --force to overwrite)");
    return diag_set(d, ST_IO, "rename failed: %s", strerror(errno));
}

/* publish() : the second half: the finished output takes its final name. */
static int
publish(struct xout *o, struct diag *d)
{
    int rc, e;

    if (o->is_stdout || o->direct) {
        xout_release(o);
        return 0;
    }
    if (o->is_dir && o->force && path_is_dir(o->dst)) {
        /* Replace an existing output directory (force was checked at open). */
        char *old = malloc(strlen(o->dst) + 16);
        if (!old) {
            xout_abort(o);
            return diag_set(d, ST_NOMEM, "out of memory");
        }
        sprintf(old, "%s.old.XXXXXX", o->dst);
        sigset_t mask;
        critical_enter(&mask);
        bool made = mkdtemp(old) != NULL;
        if (!made || rename(o->dst, old) != 0) {
            e = errno;
            if (made)
                rmdir(old);
            critical_leave(&mask);
            free(old);
            xout_abort(o);
            return diag_set(d, ST_IO, "cannot replace directory: %s", strerror(e));
        }
        /* what it holds now, moved aside, is what goes: checked again (it
         * may have changed since the open, or appeared only since) */
        if ((rc = replaceable_dir(old, d)) < 0) {
            rename(old, o->dst);
            critical_leave(&mask);
            free(old);
            xout_abort(o);
            return rc;
        }
        if (rename(o->tmp, o->dst) != 0) {
            e = errno;
            rename(old, o->dst);
            critical_leave(&mask);
            free(old);
            xout_abort(o);
            return diag_set(d, ST_IO, "rename failed: %s", strerror(e));
        }
        remove_tree(old);
        slot_del(o->slot);      /* o->tmp is OUT now: nothing for a handler to remove */
        o->slot = -1;
        critical_leave(&mask);
        free(old);
    } else if ((rc = place(o->tmp, o->dst, o->force, d)) < 0) {
        xout_abort(o);
        return rc;
    }
    fsync_parent(o->dst);
    xout_release(o);
    return 0;
}

int
xout_commit(struct xout *o, struct diag *d)
{
    int rc = finish(o, d);

    if (rc < 0) {
        xout_abort(o);
        return rc;
    }
    return publish(o, d);
}

static bool
xout_is_open(const struct xout *o)
{
    return o->is_stdout || o->fp || o->tmp || o->direct;
}

int
xout_commit_all(struct xout *o, int n, struct diag *d)
{
    char **placed = calloc((size_t)(n > 0 ? n : 1), sizeof(*placed));
    int rc = 0, i, np = 0;

    for (i = 0; i < n && rc == 0; i++) {
        if (!xout_is_open(&o[i]))
            continue;
        if ((rc = finish(&o[i], d)) < 0)
            diag_prefix(d, o[i].is_stdout ? "stdout" : "'%s'", o[i].dst);
    }
    if (rc == 0 && !placed)
        rc = diag_set(d, ST_NOMEM, "out of memory");
    /* New names first: they replace nothing, so they can be taken back if a
     * later one fails; then the replacements (force), which cannot. */
    for (int pass = 0; pass < 2; pass++) {
        for (i = 0; i < n; i++) {
            bool late = o[i].force && !o[i].is_stdout && !o[i].direct;
            char *name;

            if (!xout_is_open(&o[i]) || late != (pass == 1))
                continue;
            if (rc < 0) {
                xout_abort(&o[i]);
                continue;
            }
            name = o[i].dst ? strdup(o[i].dst) : NULL;
            bool undo = !o[i].is_stdout && !o[i].direct && !late;
            bool dir = o[i].is_dir;
            if ((rc = publish(&o[i], d)) < 0) {
                diag_prefix(d, "'%s'", name ? name : "?");
                free(name);
                for (int j = 0; j < np; j++) {
                    /* placed[] holds 'd' or 'f' and the path */
                    if (placed[j][0] == 'd')
                        remove_tree(placed[j] + 1);
                    else
                        unlink(placed[j] + 1);
                }
                continue;
            }
            if (undo && name) {
                size_t k = strlen(name);
                placed[np] = malloc(k + 2);
                if (placed[np]) {
                    placed[np][0] = dir ? 'd' : 'f';
                    memcpy(placed[np] + 1, name, k + 1);
                    np++;
                }
            }
            free(name);
        }
    }
    for (i = 0; i < np; i++)
        free(placed[i]);
    free(placed);
    return rc;
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

bool
path_is_stream(const char *path)
{
    struct stat st;

    if (!strcmp(path, "-"))
        return true;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
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
