/*
 * json.h - a thin layer over jansson: loading with limits and diagnostics,
 * typed member access, and atomic writing.  Objects are jansson's json_t;
 * callers own what *_load returns and json_decref() it.
 */
#ifndef LLMKIT_JSON_H
#define LLMKIT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "status.h"

#define JSON_MAX_FILE ((size_t)512 << 20)

/* json_load_path() : parses a whole file ("-" = stdin) of at most max bytes.
 * Duplicate object keys and invalid UTF-8 are rejected.  Returns 0,
 * -ST_IO, -ST_FORMAT with "line L column C: <jansson's reason>" in d, or
 * -ST_NOMEM (a failed allocation is never taken for bad JSON, and never
 * reaches jansson's lexer, which does not survive one: json.c). */
int json_load_path(const char *path, size_t max, json_t **out, struct diag *d);

/* json_load_mem() : the same over a buffer. */
int json_load_mem(const char *buf, size_t len, json_t **out, struct diag *d);

/* json_stringn_new() : *out = json_stringn(s, n) (caller owns it): 0, or
 * -ST_RANGE when s is not valid UTF-8, -ST_NOMEM when memory ran out
 * (jansson returns NULL for both).  Sets no message. */
int json_stringn_new(const char *s, size_t n, json_t **out);

/* Member access on an object (NULL-safe).  Return 1 when absent (or null),
 * 0 when found, -ST_FORMAT when of the wrong type (message names the key). */
int json_obj_str(const json_t *o, const char *key, const char **out, struct diag *d);
int json_obj_int(const json_t *o, const char *key, int64_t *out, struct diag *d);
int json_obj_num(const json_t *o, const char *key, double *out, struct diag *d);
int json_obj_bool(const json_t *o, const char *key, bool *out, struct diag *d);

/* json_dump_path() : writes o atomically (pretty with indent > 0, keys in
 * insertion order unless sort), with a trailing newline. */
int json_dump_path(const json_t *o, const char *path, int indent, bool sort, bool force,
                   struct diag *d);

/* json_print_line() : writes o as one compact line + "\n" to fp (JSON Lines). */
int json_print_line(const json_t *o, FILE *fp, struct diag *d);

#endif
