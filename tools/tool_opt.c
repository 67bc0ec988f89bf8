/*
 * tool_opt.c - option parsing every tool's main shares: cli_getopt() (bad
 * options reported in the tools' own words, escaped, never by getopt),
 * file name operands (cli_path), inputs that would both read standard
 * input (cli_check_stdin), strict numbers (cli_parse_i64, cli_parse_double).
 * Linked into every binary of tools/ (Makefile TOOL_SHARED).
 */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

/* The long option arg ("--name" or "--name=value") names: the one with that
 * exact name, else the only one whose name it begins; NULL when none is,
 * with *n_match the number of those it begins (getopt_long's rule). */
static const struct option *
long_find(const struct option *lo, const char *arg, size_t *n_match)
{
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    const struct option *hit = NULL;

    *n_match = 0;
    for (; lo && lo->name; lo++) {
        if (strncmp(lo->name, name, len) != 0)
            continue;
        if (strlen(lo->name) == len) {
            *n_match = 1;
            return lo;
        }
        hit = lo;
        ++*n_match;
    }
    return *n_match == 1 ? hit : NULL;
}

/* "option '--top' is ambiguous (--top-k, --top-p)" */
_Noreturn static void
ambiguous(const char *usage, const struct option *lo, const char *arg)
{
    size_t len = strcspn(arg + 2, "="), k = 0;
    char name[256], names[1024] = "";

    for (; lo->name; lo++) {
        if (strncmp(lo->name, arg + 2, len) == 0 && k < sizeof names)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s--%s", k ? ", " : "", lo->name);
    }
    snprintf(name, sizeof name, "%.*s", (int)(len + 2), arg);    /* without "=value" */
    usage_error(usage, "option '%s' is ambiguous (%s)", ESC(name), names);
}

int
cli_getopt(int argc, char *const argv[], const char *shortopts, const struct option *longopts,
           const char *usage)
{
    /* ':' first (after a '+' or '-'): a missing argument returns ':' */
    size_t k = shortopts[0] == '+' || shortopts[0] == '-', n = 0;
    char opts[256], ch[2] = { 0, 0 };
    const struct option *lo;
    const char *arg;
    int c;

    snprintf(opts, sizeof opts, "%.*s%s%s", (int)k, shortopts, shortopts[k] == ':' ? "" : ":",
             shortopts + k);
    opterr = 0;
    c = getopt_long(argc, argv, opts, longopts, NULL);
    if (c != '?' && c != ':')
        return c;
    /* the element that held the option: argv[optind - 1] for a long option
     * and a short one that ended its element; a bad short option's
     * character is optopt */
    arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    lo = strncmp(arg, "--", 2) == 0 ? long_find(longopts, arg, &n) : NULL;
    ch[0] = (char)optopt;
    if (c == ':' && lo)
        usage_error(usage, "option '--%s' requires an argument", lo->name);
    if (c == ':')
        usage_error(usage, "option requires an argument -- '%s'", ESC(ch));
    if (optopt == 0 && n > 1)
        ambiguous(usage, longopts, arg);
    if (optopt == 0)
        usage_error(usage, "unrecognized option '%s'", ESC(arg));
    /* a long option without arguments given one ("--help=x"): its value is
     * optopt too, and the element that held it is the last one */
    if (lo && lo->has_arg == no_argument && !lo->flag && lo->val == optopt && strchr(arg, '='))
        usage_error(usage, "option '--%s' doesn't allow an argument", lo->name);
    usage_error(usage, "invalid option -- '%s'", ESC(ch));
}

const char *
cli_path(const char *usage, const char *what, const char *path)
{
    if (path && !*path)
        usage_error(usage, "%s: empty file name", what);
    return path;
}

void
cli_check_stdin(const char *usage, const struct stdin_use *uses, size_t n)
{
    const char *first = NULL;

    for (size_t i = 0; i < n; i++) {
        if (!uses[i].path || strcmp(uses[i].path, "-") != 0)
            continue;
        if (first && !strcmp(first, uses[i].what))
            usage_error(usage, "%s: standard input ('-') given twice", first);
        if (first)
            usage_error(usage, "%s and %s cannot both read standard input", first, uses[i].what);
        first = uses[i].what;
    }
}

int64_t
cli_parse_i64(const char *s, int64_t min, int64_t max, const char *what, bool sizes)
{
    char *end;
    long long v;
    int64_t mul = 1;

    if (!s || !*s)
        die(RC_USAGE, "%s: empty value", what);
    if (isspace((unsigned char)*s))     /* strtoll would skip them */
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    errno = 0;
    v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE)
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    if (sizes && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1LL << 10; break;
        case 'm': case 'M': mul = 1LL << 20; break;
        case 'g': case 'G': mul = 1LL << 30; break;
        case 't': case 'T': mul = 1LL << 40; break;
        default: mul = 0; break;
        }
        if (mul) {
            end++;
            if (*end == 'i')
                end++;
            if (*end == 'B')
                end++;
        } else if (*end == 'B' && end[1] == '\0') {
            mul = 1;
            end++;
        }
    }
    if (*end || !mul)
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    if (v != 0 && (v > INT64_MAX / mul || v < INT64_MIN / mul))
        die(RC_USAGE, "%s: '%s' is out of range", what, ESC(s));
    v *= mul;
    if (v < min || v > max)
        die(RC_USAGE, "%s: '%s' is out of range [%lld, %lld]", what, ESC(s),
            (long long)min, (long long)max);
    return v;
}

double
cli_parse_double(const char *s, double min, double max, const char *what)
{
    char *end;
    double v;

    if (!s || !*s)
        die(RC_USAGE, "%s: empty value", what);
    /* decimal only: strtod also takes hex floats ("0x10" = 16) and
       leading blanks, which no option here means */
    if (strpbrk(s, "xXpP") || isspace((unsigned char)*s))
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    if (v < min || v > max)
        die(RC_USAGE, "%s: '%s' is out of range [%g, %g]", what, ESC(s), min, max);
    return v;
}
