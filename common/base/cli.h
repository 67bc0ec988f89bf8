/*
 * cli.h - the command-line contract the library shares with the tools: exit
 * codes (the table of every man page's EXIT STATUS), the map from a library
 * status to an exit code, the version, and a monotonic clock.  Nothing here
 * prints or exits: die(), messages, option parsing and progress bars are the
 * tools' (tools/tool.h).
 */
#ifndef LLMKIT_CLI_H
#define LLMKIT_CLI_H

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

/* rc_from_st() : maps a library status (negative -ST_*) to an exit code. */
int rc_from_st(int st);

/* now_seconds() : monotonic clock in seconds. */
double now_seconds(void);

#endif
