#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "xio.h"

/* ---- parsing that survives a failed allocation ----
 *
 * jansson 2.14 does not survive an allocation that fails while it lexes
 * (akheron/jansson#362: lex_save() drops the failure, and the string
 * scanner then reads past its buffer): a long request line under a memory
 * limit crashed generate --batch, or came out as "invalid token".  So
 * jansson allocates through parse_malloc(), which is malloc() except
 * during json_load_mem(): there it records each block, and on a failure
 * jumps back out of the parse, which frees the blocks the parse made and
 * fails with -ST_NOMEM.  A block the parse frees meanwhile is only noted,
 * and freed when the parse ends (a failed parse frees its partial tree
 * oldest first: looking each block up among those recorded would be
 * quadratic), so the recorded blocks are all still allocated when the
 * parse jumps out, each recorded once (a block not freed is not handed
 * out again).  Outside a parse parse_free() is free(), so a block from
 * jansson may be released with free() (json_dumps()'s text). */

struct parse_guard {
    jmp_buf *jmp;               /* set while this thread parses */
    void **v;                   /* [n] blocks the parse made */
    void **f;                   /* [nf] of those it freed (free() deferred) */
    size_t n, cap, nf, fcap;
};

static _Thread_local struct parse_guard guard;

/* appends p to *v ([*n], room for *cap); false when out of memory */
static bool
note_block(void ***v, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        void **nv = realloc(*v, c * sizeof(**v));
        if (!nv)
            return false;
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = p;
    return true;
}

static void *
parse_malloc(size_t n)
{
    void *p = malloc(n);

    if (!guard.jmp)
        return p;
    if (!p || !note_block(&guard.v, &guard.n, &guard.cap, p)) {
        free(p);
        longjmp(*guard.jmp, 1);
    }
    return p;
}

static void
parse_free(void *p)
{
    if (!guard.jmp || !p) {
        free(p);
        return;
    }
    if (note_block(&guard.f, &guard.nf, &guard.fcap, p))
        return;
    /* no room to note it: out of the records, then freed now */
    for (size_t i = guard.n; i-- > 0;) {
        if (guard.v[i] == p) {
            guard.v[i] = guard.v[--guard.n];
            break;
        }
    }
    free(p);
}

__attribute__((constructor)) static void
parse_alloc_init(void)
{
    json_set_alloc_funcs(parse_malloc, parse_free);
}

/* the parse's end: the blocks it freed are freed, and with all, also
 * those it still held (a parse jumped out of) */
static void
guard_end(bool all)
{
    if (all)
        for (size_t i = 0; i < guard.n; i++)
            free(guard.v[i]);
    else
        for (size_t i = 0; i < guard.nf; i++)
            free(guard.f[i]);
    guard.jmp = NULL;
    free(guard.v);
    free(guard.f);
    guard.v = guard.f = NULL;
    guard.n = guard.cap = guard.nf = guard.fcap = 0;
}

int
json_load_mem(const char *buf, size_t len, json_t **out, struct diag *d)
{
    json_error_t err;
    jmp_buf jb;

    *out = NULL;
    if (setjmp(jb)) {
        guard_end(true);
        return diag_set(d, ST_NOMEM, "out of memory parsing %zu bytes of JSON", len);
    }
    guard.jmp = &jb;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    guard_end(false);
    if (!*out && json_error_code(&err) == json_error_out_of_memory)
        return diag_set(d, ST_NOMEM, "out of memory parsing %zu bytes of JSON", len);
    if (!*out)
        return diag_set(d, ST_FORMAT, "invalid JSON at line %d column %d: %s",
                        err.line, err.column, err.text);
    return 0;
}

int
json_stringn_new(const char *s, size_t n, json_t **out)
{
    json_t *raw;

    if ((*out = json_stringn(s, n)))
        return 0;
    /* the same without the UTF-8 check: made, so the check failed */
    if (!(raw = json_stringn_nocheck(s, n)))
        return -ST_NOMEM;
    json_decref(raw);
    return -ST_RANGE;
}

int
json_load_path(const char *path, size_t max, json_t **out, struct diag *d)
{
    char *buf;
    size_t len;
    int rc;

    *out = NULL;
    rc = read_file_all(path, max, &buf, &len, d);
    if (rc)
        return rc;
    rc = json_load_mem(buf, len, out, d);
    free(buf);
    return rc;
}

static const json_t *
member(const json_t *o, const char *key)
{
    const json_t *v;

    if (!o || !json_is_object(o))
        return NULL;
    v = json_object_get(o, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

int
json_obj_str(const json_t *o, const char *key, const char **out, struct diag *d)
{
    const json_t *v = member(o, key);

    if (!v)
        return 1;
    if (!json_is_string(v))
        return diag_set(d, ST_FORMAT, "'%s' is not a string", key);
    *out = json_string_value(v);
    return 0;
}

int
json_obj_int(const json_t *o, const char *key, int64_t *out, struct diag *d)
{
    const json_t *v = member(o, key);

    if (!v)
        return 1;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    /* Some configs write integers as 4096.0; accept exact integral reals. */
    if (json_is_real(v)) {
        double x = json_real_value(v);
        /* Range first: casting an out-of-range double is undefined. */
        if (x >= -9007199254740992.0 && x <= 9007199254740992.0 && x == (double)(int64_t)x) {
            *out = (int64_t)x;
            return 0;
        }
    }
    return diag_set(d, ST_FORMAT, "'%s' is not an integer", key);
}

int
json_obj_num(const json_t *o, const char *key, double *out, struct diag *d)
{
    const json_t *v = member(o, key);

    if (!v)
        return 1;
    if (!json_is_number(v))
        return diag_set(d, ST_FORMAT, "'%s' is not a number", key);
    *out = json_number_value(v);
    return 0;
}

int
json_obj_bool(const json_t *o, const char *key, bool *out, struct diag *d)
{
    const json_t *v = member(o, key);

    if (!v)
        return 1;
    if (!json_is_boolean(v))
        return diag_set(d, ST_FORMAT, "'%s' is not a boolean", key);
    *out = json_is_true(v);
    return 0;
}

int
json_dump_path(const json_t *o, const char *path, int indent, bool sort, bool force,
               struct diag *d)
{
    size_t flags = JSON_ENSURE_ASCII * 0;
    char *s;
    size_t n;
    int rc;

    if (indent > 0)
        flags |= JSON_INDENT(indent);
    else
        flags |= JSON_COMPACT;
    if (sort)
        flags |= JSON_SORT_KEYS;
    s = json_dumps(o, flags);
    if (!s)
        return diag_set(d, ST_NOMEM, "cannot serialise JSON");
    n = strlen(s);
    s = realloc(s, n + 2);
    if (!s)
        return diag_set(d, ST_NOMEM, "out of memory");
    s[n] = '\n';
    s[n + 1] = '\0';
    rc = write_file_atomic(path, s, n + 1, force, d);
    free(s);
    return rc;
}

int
json_print_line(const json_t *o, FILE *fp, struct diag *d)
{
    if (json_dumpf(o, fp, JSON_COMPACT | JSON_REAL_PRECISION(9)) != 0 || fputc('\n', fp) == EOF)
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO));
    return 0;
}
