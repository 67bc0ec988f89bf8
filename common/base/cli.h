/*
 * cli.h - what every tool's main shares: exit codes, messages, number parsing,
 * progress bars.  die() and the x*() helpers end the process and are meant for
 * tools/ only; the rest of common/ returns status codes (status.h).
 */
#ifndef LLMKIT_CLI_H
#define LLMKIT_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum rc {
    RC_OK = 0,        /* success */
    RC_FAIL = 1,      /* general failure; some inputs failed but processing went on */
    RC_USAGE = 2,     /* bad option, bad argument, missing operand */
    RC_DATA = 3,      /* bad input data: magic, version, shape, truncated, corrupt */
    RC_IO = 4,        /* open/read/write/rename/fsync failure, disk full */
    RC_RESOURCE = 5,  /* out of memory; no usable GPU */
    RC_CHECK = 6,     /* a requested check failed */
};

#define LLMKIT_VERSION "0.1.0"

extern const char *cli_progname;
extern int cli_verbosity;      /* 0 = quiet, 1 = normal, 2 = verbose */

/* cli_init() : sets the program name (basename of argv0 without "llm-" prefix
 * handling) and installs the SIGINT/SIGTERM/SIGHUP handler that removes
 * registered partial outputs (xio.h) and re-raises the signal. */
void cli_init(const char *argv0);

/* die() : prints "prog: message" on stderr, removes partial outputs and exits
 * with rc.  A format ending in ':' appends ": strerror(errno)". */
_Noreturn void die(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* usage_error() : "prog: message" then the usage line, exit RC_USAGE. */
_Noreturn void usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* warnmsg() : "prog: warning: message" on stderr unless quiet. */
void warnmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* infomsg() : "prog: message" on stderr when verbose. */
void infomsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* rc_from_st() : maps a library status (negative -ST_*) to an exit code. */
int rc_from_st(int st);

/* cli_parse_i64() : parses a decimal integer in [min, max] for option `what`;
 * accepts K/M/G/T suffixes (powers of 1024, with optional "iB"/"B") when
 * `sizes` is true.  Dies with RC_USAGE on junk or out-of-range values. */
int64_t cli_parse_i64(const char *s, int64_t min, int64_t max, const char *what, bool sizes);

/* cli_parse_double() : parses a finite float in [min, max]; dies with RC_USAGE. */
double cli_parse_double(const char *s, double min, double max, const char *what);

/* cli_cap_threads() : -t N for a tool's compute threads: above the CPUs this
 * process may run on, threads sharing a core make every barrier wait for a
 * descheduled thread (20-200x slower), so N is capped there with a warning,
 * unless oversubscribe (--oversubscribe).  0 or less = all CPUs. */
int cli_cap_threads(int n, bool oversubscribe);

/* cli_finish_stdout() : flushes and closes stdout; dies with RC_IO and
 * "prog: stdout: write failed: <reason>" on error (an earlier failed write
 * included).  Call at the end of every tool that wrote to stdout. */
void cli_finish_stdout(void);

/* ---- progress ---- */

/* A TTY-aware progress bar on stderr: redrawn at most 10 times a second with
 * "\r", ended with "\n".  enabled < 0 means auto (stderr is a TTY and the tool
 * is not quiet), 0 off, 1 forced on. */
struct progress {
    bool on;
    const char *label;
    uint64_t total;
    uint64_t done;
    double last_draw;
    double start;
};

void progress_begin(struct progress *p, int enabled, const char *label, uint64_t total);
void progress_update(struct progress *p, uint64_t done);
void progress_end(struct progress *p);

/* now_seconds() : monotonic clock in seconds. */
double now_seconds(void);

#endif
