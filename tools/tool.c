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

/* Messages quote names and text from files; whatever a caller forgot to
 * escape, the line that reaches stderr holds no control character, no bytes
 * that are not UTF-8 and no hidden reordering (escape.h), so it stays one
 * line and cannot drive the terminal. */
static void
vmsg(const char *prefix, const char *fmt, va_list ap)
{
    int e = errno;
    size_t n = strlen(fmt);
    char *buf = NULL;
    int len = vasprintf(&buf, fmt, ap);

    if (cli_line_open)          /* a progress bar's line: the message goes below */
        fputc('\n', stderr);
    cli_line_open = false;
    fprintf(stderr, "%s: %s", cli_progname, prefix);
    if (len >= 0 && buf)
        esc_fwrite(stderr, buf, (size_t)len, SIZE_MAX, ESC_KEEP_BACKSLASH);
    else
        fputs("(out of memory formatting a message)", stderr);
    free(buf);
    if (n && fmt[n - 1] == ':')
        fprintf(stderr, " %s", strerror(e));
    fputc('\n', stderr);
}

void
die(int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("", fmt, ap);
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
    vmsg("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", usage);
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
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

void
notemsg(const char *fmt, ...)
{
    va_list ap;

    if (cli_verbosity < 1)
        return;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void
infomsg(const char *fmt, ...)
{
    va_list ap;

    if (cli_verbosity < 2)
        return;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
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
