#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "xio.h"

/* jansson reports an allocation that fails while it parses as a syntax
 * error where it happened (an "invalid token" in a string cut short), or
 * with no reason at all.  Its allocations go through json_malloc, which
 * notes a failure, so that json_load_mem says out of memory instead.
 * Memory from malloc is freed with free either way, so objects made before
 * the allocator was installed are released alike. */
static _Thread_local bool json_alloc_failed;
static pthread_once_t json_alloc_once = PTHREAD_ONCE_INIT;

static void *
json_malloc(size_t n)
{
    void *p = malloc(n);

    if (!p)
        json_alloc_failed = true;
    return p;
}

static void
json_alloc_init(void)
{
    json_set_alloc_funcs(json_malloc, free);
}

int
json_load_mem(const char *buf, size_t len, json_t **out, struct diag *d)
{
    json_error_t err;

    pthread_once(&json_alloc_once, json_alloc_init);
    json_alloc_failed = false;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!*out && (json_alloc_failed || json_error_code(&err) == json_error_out_of_memory))
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
