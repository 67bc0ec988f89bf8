/*
 * tool.c - what every tool's main shares and the library must not do:
 * messages on stderr, die() and usage_error() (they exit), the signal
 * handlers that remove partial outputs.  Linked into every binary of tools/
 * (with tool_opt.c: option parsing; tool_cb.c: progress bars).
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

    k = vsnprintf(text, sizeof text, fmt, ap);
    if (k < 0)
        snprintf(text, sizeof text, "(a message that could not be formatted)");
    else if (k >= (int)sizeof text)
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


void
cli_end_text_line(bool text_on_stdout)
{
    if (text_on_stdout && isatty(STDOUT_FILENO))
        putchar('\n');
    else if (cli_verbosity >= 1 && isatty(STDERR_FILENO))
        fputc('\n', stderr);
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
