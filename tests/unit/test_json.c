/*
 * test_json.c - json.h: what a failed parse or string means.  jansson
 * returns NULL both for bad input and for memory that ran out; the layer
 * tells them apart (-ST_FORMAT / -ST_RANGE against -ST_NOMEM), so that the
 * tools exit 3 for a bad file and 5 for too little memory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "json.h"
#include "t.h"

#if !defined(__SANITIZE_ADDRESS__)
/* Bytes of address space this process maps now (/proc/self/statm), or 0. */
static uint64_t
mapped_bytes(void)
{
    FILE *fp = fopen("/proc/self/statm", "r");
    unsigned long long pages = 0;

    if (!fp)
        return 0;
    if (fscanf(fp, "%llu", &pages) != 1)
        pages = 0;
    fclose(fp);
    return (uint64_t)pages * 4096u;
}
#endif

static void
test_strings(void)
{
    json_t *s = NULL;

    CHECK_EQ(json_stringn_new("abc", 3, &s), 0);
    CHECK(s && json_is_string(s) && !strcmp(json_string_value(s), "abc"));
    json_decref(s);
    s = NULL;
    CHECK_EQ(json_stringn_new("a\xff", 2, &s), -ST_RANGE);
    CHECK(s == NULL);
}

static void
test_parse(void)
{
    struct diag d;
    json_t *j = NULL;

    const char *good = "{\"a\": [1, 2]}", *bad = "{\"a\": [1, 2}";

    CHECK_EQ(json_load_mem(good, strlen(good), &j, &d), 0);
    json_decref(j);
    CHECK_EQ(json_load_mem(bad, strlen(bad), &j, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "invalid JSON") != NULL);
}

/* A parse that runs out of memory (an address-space limit a little above
 * what the process maps) is out of memory, not invalid JSON: jansson fails
 * in the middle of a string and reports "invalid token" there. */
static void
test_parse_oom(void)
{
#if defined(__SANITIZE_ADDRESS__)
    fprintf(stderr, "test_json: no address-space limit under AddressSanitizer\n");
#else
    const size_t n_str = (size_t)1 << 20;
    size_t len = 0, cap = n_str * 12 + 16;
    char *buf = malloc(cap);
    struct rlimit old, lim;
    struct diag d;
    json_t *j = NULL;
    int rc;

    CHECK(buf != NULL);
    if (!buf)
        return;
    /* ~12 MiB of JSON: a million short strings, each a jansson object */
    buf[len++] = '[';
    for (size_t i = 0; i < n_str; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s\"s%07zu\"", i ? "," : "", i);
    buf[len++] = ']';
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    lim = old;
    lim.rlim_cur = mapped_bytes() + ((rlim_t)24 << 20);
    if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < lim.rlim_cur)
        lim.rlim_cur = old.rlim_cur;
    CHECK(setrlimit(RLIMIT_AS, &lim) == 0);
    rc = json_load_mem(buf, len, &j, &d);
    CHECK(setrlimit(RLIMIT_AS, &old) == 0);
    CHECK_EQ(rc, -ST_NOMEM);
    if (rc == -ST_NOMEM)
        CHECK(strstr(d.msg, "out of memory") != NULL);
    else if (rc < 0)
        fprintf(stderr, "test_json: %s\n", d.msg);
    json_decref(j);
    /* with the limit gone the same text parses */
    CHECK_EQ(json_load_mem(buf, len, &j, &d), 0);
    CHECK(j && json_array_size(j) == n_str);
    json_decref(j);
    free(buf);
#endif
}

int
main(void)
{
    test_strings();
    test_parse();
    test_parse_oom();
    T_DONE();
}
