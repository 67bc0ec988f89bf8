/*
 * test_escape.c - escape.h: what untrusted text looks like once escaped for
 * a terminal, a quoted value and a CSV field, and how it is cut.
 */
#include <stdint.h>
#include <stdlib.h>

#include "escape.h"
#include "t.h"

static char buf[4096];

/* esc_fwrite of n bytes into a string (through a memory stream). */
static const char *
fw(const char *s, size_t n, size_t max, unsigned flags, size_t *shown)
{
    FILE *fp;

    memset(buf, 0, sizeof(buf));
    fp = fmemopen(buf, sizeof(buf), "w");
    *shown = esc_fwrite(fp, s, n, max, flags);
    fclose(fp);
    return buf;
}

static const char *
csv(const char *s)
{
    FILE *fp;

    memset(buf, 0, sizeof(buf));
    fp = fmemopen(buf, sizeof(buf), "w");
    esc_csv_field(fp, s);
    fclose(fp);
    return buf;
}

static void
test_str(void)
{
    char b[64];

    CHECK_STR(esc_str(b, sizeof(b), "plain name-1.5B", 0), "plain name-1.5B");
    CHECK_STR(esc_str(b, sizeof(b), NULL, 0), "");
    /* a terminal title, a screen clear and a fake line */
    CHECK_STR(esc_str(b, sizeof(b), "a\x1b]0;t\x07\x1b[2J\nb\r\tc", 0),
              "a\\x1b]0;t\\x07\\x1b[2J\\nb\\r\\tc");
    CHECK_STR(esc_str(b, sizeof(b), "del\x7f", 0), "del\\x7f");
    /* the backslash is escaped so the result reads back; '"' only on request */
    CHECK_STR(esc_str(b, sizeof(b), "a\\n\"q\"", 0), "a\\\\n\"q\"");
    CHECK_STR(esc_str(b, sizeof(b), "a\\n\"q\"", ESC_DQUOTE), "a\\\\n\\\"q\\\"");
    /* well-formed UTF-8 stays; C1 controls, bidi overrides and separators do not */
    CHECK_STR(esc_str(b, sizeof(b), "Qwen\xe9\x80\x9a\xe4\xb9\x89 caf\xc3\xa9", 0),
              "Qwen\xe9\x80\x9a\xe4\xb9\x89 caf\xc3\xa9");
    CHECK_STR(esc_str(b, sizeof(b), "x\xc2\x9b" "31m", 0), "x\\u009b31m");
    CHECK_STR(esc_str(b, sizeof(b), "abc\xe2\x80\xae" "fed", 0), "abc\\u202efed");
    CHECK_STR(esc_str(b, sizeof(b), "l\xe2\x80\xa8" "2\xe2\x81\xa6", 0), "l\\u20282\\u2066");
    /* bytes that are not UTF-8: a lone CSI, a stray continuation, an overlong
     * '/', a surrogate, a cut sequence, above U+10FFFF */
    CHECK_STR(esc_str(b, sizeof(b), "\x9b" "2J", 0), "\\x9b2J");
    CHECK_STR(esc_str(b, sizeof(b), "\x80", 0), "\\x80");
    CHECK_STR(esc_str(b, sizeof(b), "\xc0\xaf", 0), "\\xc0\\xaf");
    CHECK_STR(esc_str(b, sizeof(b), "\xed\xa0\x80", 0), "\\xed\\xa0\\x80");
    CHECK_STR(esc_str(b, sizeof(b), "\xe4\xb9", 0), "\\xe4\\xb9");
    CHECK_STR(esc_str(b, sizeof(b), "\xf4\x90\x80\x80", 0), "\\xf4\\x90\\x80\\x80");
    CHECK_STR(esc_str(b, sizeof(b), "\xf0\x9f\x98\x80", 0), "\xf0\x9f\x98\x80");
}

static void
test_cut(void)
{
    char b[12];
    char big[3000];

    /* fits exactly (11 bytes + NUL): no cut */
    CHECK_STR(esc_str(b, sizeof(b), "hello world", 0), "hello world");
    /* one more: cut with "..." in 12 bytes */
    CHECK_STR(esc_str(b, sizeof(b), "hello world!", 0), "hello wo...");
    /* an escape is never split */
    CHECK_STR(esc_str(b, sizeof(b), "abcde\x1b\x1b\x1b", 0), "abcde...");
    CHECK_STR(esc_str(b, 2, "abc", 0), ".");
    CHECK_STR(esc_str(b, 1, "abc", 0), "");
    /* a multi-byte character is never split either */
    CHECK_STR(esc_str(b, sizeof(b), "abcdef\xe4\xb9\x89\xe4\xb9\x89", 0), "abcdef...");
    /* ESC() in a message */
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CHECK_EQ(strlen(ESC(big)), ESC_MAX - 1);
    CHECK(!strcmp(ESC(big) + ESC_MAX - 4, "..."));
    CHECK_STR(ESC("a\nb"), "a\\nb");
}

static void
test_fwrite(void)
{
    size_t shown;

    CHECK_STR(fw("ab\0c", 4, SIZE_MAX, 0, &shown), "ab\\x00c");
    CHECK_EQ(shown, 4);
    /* max counts input bytes and never splits a character */
    CHECK_STR(fw("ab\xe4\xb9\x89" "c", 6, 4, 0, &shown), "ab");
    CHECK_EQ(shown, 2);
    CHECK_STR(fw("ab\xe4\xb9\x89" "c", 6, 5, ESC_DQUOTE, &shown), "ab\xe4\xb9\x89");
    CHECK_EQ(shown, 5);
    CHECK_STR(fw("\"\n", 2, SIZE_MAX, ESC_DQUOTE, &shown), "\\\"\\n");
    /* text for a terminal: its line breaks stay, other controls do not */
    CHECK_STR(fw("a\nb\r\x1b", 5, SIZE_MAX, ESC_TEXT, &shown), "a\nb\\r\\x1b");
    CHECK_EQ(shown, 5);
    /* and its tabs and backslashes */
    CHECK_STR(fw("\tc:\\x\x07", 6, SIZE_MAX, ESC_TEXT, &shown), "\tc:\\x\\x07");
    CHECK_EQ(shown, 6);
}

static void
test_csv(void)
{
    CHECK_STR(csv("plain"), "plain");
    CHECK_STR(csv(""), "");
    CHECK_STR(csv("a,b"), "\"a,b\"");
    CHECK_STR(csv("say \"hi\""), "\"say \"\"hi\"\"\"");
    CHECK_STR(csv(" lead"), "\" lead\"");
    /* a line break never reaches the file: no fake rows */
    CHECK_STR(csv("x\nmodel,fake,1"), "\"x\\nmodel,fake,1\"");
    CHECK_STR(csv("x\r\ny"), "x\\r\\ny");
    CHECK_STR(csv("\x1b[2Jq\"\x07"), "\"\\x1b[2Jq\"\"\\x07\"");
}

int
main(void)
{
    test_str();
    test_cut();
    test_fwrite();
    test_csv();
    T_DONE();
}
