/*
 * tool.h - what every tool's main shares (tools/tool.c and tool_opt.c, linked into each
 * binary of tools/; the library never calls it): the program name and
 * verbosity, die() and usage_error() (they exit), messages on stderr, strict
 * option numbers, stdout's final check, and the stop signals of a run that
 * drains.  The callbacks for the library's run_*() are tool_cb.h.
 */
#ifndef LLMKIT_TOOL_H
#define LLMKIT_TOOL_H

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli.h"

extern const char *cli_progname;
extern int cli_verbosity;      /* 0 = quiet, 1 = normal, 2 = verbose */
extern bool cli_line_open;     /* a progress bar's line is open on stderr (no newline yet) */

/* cli_init() : sets the program name (basename of argv0 without "llm-" prefix
 * handling) and installs the SIGINT/SIGTERM/SIGHUP handler that removes
 * registered partial outputs (xio.h) and re-raises the signal (SIGHUP left
 * ignored when it came so: nohup). */
void cli_init(const char *argv0);

/* Every message below (die, usage_error, warnmsg, notemsg, infomsg) reaches
 * stderr as one write(2) of the whole line (the usage line included), so
 * that the messages of processes sharing a log do not interleave. */

/* die() : prints "prog: message" on stderr, removes partial outputs and exits
 * with rc.  A format ending in ':' appends ": strerror(errno)". */
_Noreturn void die(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* usage_error() : "prog: message" then the usage line, exit RC_USAGE. */
_Noreturn void usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* warnmsg() : "prog: warning: message" on stderr unless quiet. */
void warnmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* notemsg() : "prog: message" on stderr unless quiet. */
void notemsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* infomsg() : "prog: message" on stderr when verbose. */
void infomsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A rule on the options: when bad, the run stops with usage_error(msg). */
struct usage_rule {
    bool bad;
    const char *msg;
};

/* cli_check_usage() : usage_error(usage, "%s", msg) for the first bad rule
 * of rules[0..n), in order; returns when none is bad. */
void cli_check_usage(const char *usage, const struct usage_rule *rules, size_t n);

/* cli_exit_help() : --help: text, an empty line and the usage line on
 * stdout, exit 0 (RC_IO when stdout fails). */
_Noreturn void cli_exit_help(const char *text, const char *usage);

/* cli_getopt() : getopt_long() (longopts may be NULL) that reports a bad
 * option itself, in the tools' words, with the short program name and the
 * option escaped (escape.h): "prog: unrecognized option '--x'", "option
 * '--x' is ambiguous (--xa, --xb)", "option '--x' doesn't allow an
 * argument", "option '--x' requires an argument", "invalid option -- 'x'",
 * "option requires an argument -- 'x'"; then the usage line, exit RC_USAGE
 * (usage_error).  getopt itself prints nothing (opterr = 0).  Returns the
 * option as getopt_long() does, -1 after the last one. */
int cli_getopt(int argc, char *const argv[], const char *shortopts, const struct option *longopts,
               const char *usage);

/* cli_exit_usage() : an option the table has and the caller's switch does
 * not (cli_getopt reports the others): the usage line on stderr, exit
 * RC_USAGE. */
_Noreturn void cli_exit_usage(const char *usage);

/* cli_path() : path, after usage_error(usage, "WHAT: empty file name") when
 * it is "" (an option's FILE or an operand: nothing can be opened or
 * created under that name, and an output would be found out only at the
 * end of the work). */
const char *cli_path(const char *usage, const char *what, const char *path);

/* One file name that may be "-" (standard input) and the option or
 * operand it came from; path NULL = not given. */
struct stdin_use {
    const char *what;
    const char *path;
};

/* cli_check_stdin() : usage_error(usage, "A and B cannot both read standard
 * input") for the first two of uses[0..n) whose path is "-"; returns when
 * at most one is. */
void cli_check_stdin(const char *usage, const struct stdin_use *uses, size_t n);

/* cli_exit_version() : --version: "tool (llmkit) VERSION" on stdout, exit 0. */
_Noreturn void cli_exit_version(const char *tool);

/* cli_parse_i64() : parses a decimal integer in [min, max] for option `what`;
 * accepts K/M/G/T suffixes (powers of 1024, with optional "iB"/"B") when
 * `sizes` is true.  Dies with RC_USAGE on junk or out-of-range values. */
int64_t cli_parse_i64(const char *s, int64_t min, int64_t max, const char *what, bool sizes);

/* cli_parse_double() : parses a finite decimal float in [min, max] (no hex
 * floats, no leading blanks); dies with RC_USAGE. */
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

/* cli_end_text_line() : after text that did not end its line: ends it on a
 * terminal, so that the statistics or the shell prompt do not follow the
 * text there (on stdout when the text went to it, else on stderr, where a
 * pipe may lead to the same terminal); a pipe or a file gets exactly the
 * text's bytes. */
void cli_end_text_line(bool text_on_stdout);

/* ---- stop signals ---- */

/* Set by the handler tool_catch_stop() installs: the number of SIGINT,
 * SIGTERM and SIGHUP received (at most 2) and the last of them. */
extern volatile sig_atomic_t tool_stop_count, tool_stop_sig;

/* tool_catch_stop() : for a run that can drain (generate --batch): from now
 * on SIGINT, SIGTERM and SIGHUP (unless it came ignored: nohup) only count
 * (tool_stop_count) and interrupt a blocked read (no SA_RESTART); SIGPIPE, the reader of the results gone, removes
 * partial outputs and ends the process by the signal. */
void tool_catch_stop(void);

#endif
