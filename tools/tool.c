/*
 * tool.c - what every tool's main shares and the library must not do:
 * messages on stderr, die() and usage_error() (they exit), strict number
 * parsing for options, the signal handlers that remove partial outputs.
 * Linked into every binary of tools/ (with tool_cb.c: progress bars).
 */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute.h"
#include "escape.h"
#include "xio.h"

const char *cli_progname = "llmkit";
int cli_verbosity = 1;
bool cli_line_open;

static void
on_signal(int sig)
{
    xio_cleanup_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* handler for SIGINT, SIGTERM and SIGHUP (SIGHUP left ignored when it came
 * so: nohup, the run meant to outlive its terminal); no SA_RESTART: a
 * blocked read returns */
static void
catch_signals(void (*handler)(int))
{
    struct sigaction sa = { .sa_handler = handler }, old;

    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (sigaction(SIGHUP, NULL, &old) < 0 || old.sa_handler != SIG_IGN)
        sigaction(SIGHUP, &sa, NULL);
}

void
cli_init(const char *argv0)
{
    const char *b;

    if (argv0) {
        b = strrchr(argv0, '/');
        cli_progname = b ? b + 1 : argv0;
    }
    catch_signals(on_signal);
}

/* Writes buf[0..n) to stderr in one write(2), more only when the kernel
 * takes less (a pipe takes up to PIPE_BUF bytes at once, a file opened with
 * O_APPEND a whole write): the messages of processes sharing a log, such as
 * the shards of a batch job, then do not interleave byte by byte. */
static void
write_stderr(const char *buf, size_t n)
{
    fflush(stderr);     /* what stdio holds goes first */
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, buf, n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        buf += w;
        n -= (size_t)w;
    }
}

/* Messages quote names and text from files; whatever a caller forgot to
 * escape, the line that reaches stderr holds no control character, no bytes
 * that are not UTF-8 and no hidden reordering (escape.h), so it stays one
 * line and cannot drive the terminal.  The line (and the usage line after
 * it, when usage is not NULL) is made in a buffer on the stack, so that the
 * message of a failed allocation can be shown, and written at once; a
 * message too long for it ends in "...". */
static void
vmsg(const char *prefix, const char *fmt, va_list ap, const char *usage)
{
    int e = errno;
    size_t n = strlen(fmt), len, tail;
    const char *err = n && fmt[n - 1] == ':' ? strerror(e) : NULL;
    char text[8192], line[16384];
    int k;

    if (vsnprintf(text, sizeof text, fmt, ap) >= (int)sizeof text)
        memcpy(text + sizeof text - 4, "...", 4);
    /* a progress bar's line open: the message goes below */
    k = snprintf(line, sizeof line, "%s%.255s: %s", cli_line_open ? "\n" : "", cli_progname, prefix);
    len = k > 0 ? (size_t)k : 0;
    /* what follows the message: " strerror", the newline, the usage line */
    tail = (err ? 1 + strlen(err) : 0) + 1 + (usage ? strlen(usage) + 1 : 0);
    if (len + tail < sizeof line) {
        esc_str(line + len, sizeof line - len - tail, text, ESC_KEEP_BACKSLASH);
        len += strlen(line + len);
        k = snprintf(line + len, sizeof line - len, "%s%s\n%s%s", err ? " " : "", err ? err : "",
                     usage ? usage : "", usage ? "\n" : "");
        len += k > 0 ? (size_t)k : 0;
    }
    if (len >= sizeof line)
        len = sizeof line - 1;
    write_stderr(line, len);
    cli_line_open = false;
    errno = e;
}

void
die(int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("", fmt, ap, NULL);
    va_end(ap);
    xio_cleanup_all();
    /* no exit handlers: OpenBLAS's joins its worker threads, and a worker
     * whose buffer could not be mapped (ulimit -v: the out-of-memory exit
     * this often is) retries the mmap forever, so exit() would hang */
    fflush(NULL);
    _exit(rc);
}

void
usage_error(const char *usage, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("", fmt, ap, usage);
    va_end(ap);
    xio_cleanup_all();
    exit(RC_USAGE);
}

void
cli_check_usage(const char *usage, const struct usage_rule *rules, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (rules[i].bad)
            usage_error(usage, "%s", rules[i].msg);
}

void
cli_exit_help(const char *text, const char *usage)
{
    fputs(text, stdout);
    fputc('\n', stdout);
    puts(usage);
    cli_finish_stdout();
    exit(RC_OK);
}

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

void
cli_exit_usage(const char *usage)
{
    fprintf(stderr, "%s\n", usage);
    exit(RC_USAGE);
}

void
cli_exit_version(const char *tool)
{
    printf("%s (llmkit) %s\n", tool, LLMKIT_VERSION);
    cli_finish_stdout();
    exit(RC_OK);
}

void
warnmsg(const char *fmt, ...)
{
    va_list ap;

    if (cli_verbosity < 1)
        return;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap, NULL);
    va_end(ap);
}

void
notemsg(const char *fmt, ...)
{
    va_list ap;

    if (cli_verbosity < 1)
        return;
    va_start(ap, fmt);
    vmsg("", fmt, ap, NULL);
    va_end(ap);
}

void
infomsg(const char *fmt, ...)
{
    va_list ap;

    if (cli_verbosity < 2)
        return;
    va_start(ap, fmt);
    vmsg("", fmt, ap, NULL);
    va_end(ap);
}

int
cli_cap_threads(int n, bool oversubscribe)
{
    int cpus = compute_n_cpus();

    if (n > cpus && !oversubscribe) {
        warnmsg("-t %d: this process may run on %d CPUs; using %d threads "
                "(--oversubscribe keeps %d)", n, cpus, cpus, n);
        return cpus;
    }
    return n;
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

void
cli_finish_stdout(void)
{
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (!errno)     /* the error came from an earlier write */
            errno = EIO;
        die(RC_IO, "stdout: write failed:");
    }
    if (fclose(stdout) != 0)
        die(RC_IO, "stdout: write failed:");
}

/* ---- stop signals ---- */

volatile sig_atomic_t tool_stop_count, tool_stop_sig;

static void
on_stop(int sig)
{
    tool_stop_sig = sig;
    if (tool_stop_count < 2)
        tool_stop_count++;
}

void
tool_catch_stop(void)
{
    struct sigaction sa = { .sa_handler = on_signal };   /* removes partial files, re-raises */

    catch_signals(on_stop);
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
}
