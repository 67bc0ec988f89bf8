/*
 * escape.h - untrusted text made safe to print: names and strings from model
 * files, config.json, traces and file names, shown in tables, CSV, --info
 * text and messages on stderr.
 *
 * Escaped: the backslash itself (\\), so that the result reads back without
 * ambiguity; C0 controls and DEL (\n, \r, \t, other bytes \xHH); bytes that
 * are not part of well-formed UTF-8 (\xHH: a lone 0x9b is a CSI to some
 * terminals); and the characters that move or reorder text without being
 * seen, U+0080..U+009F (C1 controls), U+061C, U+200E/U+200F, U+2028/U+2029 and the
 * bidirectional embeddings, overrides and isolates U+202A..U+202E and
 * U+2066..U+2069 (\uHHHH).  Printable ASCII and other well-formed UTF-8
 * pass through unchanged, so names in any script stay readable.
 *
 * JSON output does not need this (jansson escapes what JSON requires).
 */
#ifndef LLMKIT_ESCAPE_H
#define LLMKIT_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* Also escape '"' as \" : for text shown between double quotes. */
#define ESC_DQUOTE 1u
/* Leave the backslash as it is: for a whole message whose quoted names were
 * escaped already (a second pass must not double their backslashes). */
#define ESC_KEEP_BACKSLASH 4u
/* Text shown on a terminal as text (generated or decoded text): the
 * newline, the tab and the backslash stay as they are; only what a
 * terminal would act on unseen is escaped. */
#define ESC_TEXT 8u

/* esc_fwrite() : writes the n bytes at s to fp, escaped.  At most max input
 * bytes are shown, cut before a character that would cross the limit
 * (SIZE_MAX = no limit); returns the number of input bytes shown, so a
 * caller sees a cut as a return value below n.  Write errors are left in
 * ferror(fp). */
size_t esc_fwrite(FILE *fp, const char *s, size_t n, size_t max, unsigned flags);

/* esc_str() : the NUL-terminated s escaped into buf (cap > 0 bytes, always
 * NUL-terminated).  When the escaped text does not fit it is cut after a
 * whole character or escape and ends in "...".  s NULL is taken as "".
 * Returns buf. */
char *esc_str(char *buf, size_t cap, const char *s, unsigned flags);

/* ESC(s) : esc_str() into a temporary that lives until the end of the
 * enclosing block, for use in a message:
 *     die(RC_DATA, "'%s': %s", ESC(path), ESC(d.msg));  */
#define ESC_MAX 1024
#define ESC(s) esc_str((char[ESC_MAX]){0}, ESC_MAX, (s), 0)

/* esc_csv_field() : writes s as one CSV field (RFC 4180): escaped as above,
 * so it never holds a line break, then enclosed in double quotes, with each
 * '"' doubled, when it holds a comma or a double quote or begins or ends
 * with a space. */
void esc_csv_field(FILE *fp, const char *s);

#endif
