/*
 * escape.c - untrusted text made safe to print (escape.h).
 */
#include "escape.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Private: '"' becomes "" (inside a quoted CSV field). */
#define ESC_CSVQ 0x100u

/* The length of the well-formed UTF-8 sequence at s[0..n), with its code
 * point in *cp, or 0 when s does not start one (RFC 3629: no overlong forms,
 * no surrogates, nothing above U+10FFFF). */
static size_t
utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    uint32_t c = s[0], min;
    size_t len, i;

    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, c &= 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, c &= 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, c &= 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

/* Characters that move or reorder text without showing themselves. */
static bool
cp_hidden(uint32_t c)
{
    return (c >= 0x80 && c <= 0x9f) || c == 0x061c || c == 0x200e || c == 0x200f || c == 0x2028 || c == 0x2029 ||
           (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

/* The next unit of s[0..n) (n > 0): its output text in t (at most 7 bytes
 * and a NUL), whose length is returned; *adv gets the input bytes it
 * stands for. */
static size_t
unit(const unsigned char *s, size_t n, unsigned flags, char t[8], size_t *adv)
{
    unsigned c = s[0];
    uint32_t cp;
    size_t len;

    *adv = 1;
    switch (c) {
    case '\\':
        if (flags & (ESC_KEEP_BACKSLASH | ESC_TEXT))
            break;
        return (size_t)snprintf(t, 8, "\\\\");
    case '\n':
        if (flags & ESC_TEXT)
            return (size_t)snprintf(t, 8, "\n");
        return (size_t)snprintf(t, 8, "\\n");
    case '\r': return (size_t)snprintf(t, 8, "\\r");
    case '\t':
        if (flags & ESC_TEXT)
            return (size_t)snprintf(t, 8, "\t");
        return (size_t)snprintf(t, 8, "\\t");
    case '"':
        if (flags & ESC_CSVQ)
            return (size_t)snprintf(t, 8, "\"\"");
        if (flags & ESC_DQUOTE)
            return (size_t)snprintf(t, 8, "\\\"");
        break;
    default: break;
    }
    if (c < 0x20 || c == 0x7f)
        return (size_t)snprintf(t, 8, "\\x%02x", c);
    if (c < 0x80) {
        t[0] = (char)c;
        t[1] = '\0';
        return 1;
    }
    len = utf8_seq(s, n, &cp);
    if (!len)
        return (size_t)snprintf(t, 8, "\\x%02x", c);
    *adv = len;
    if (cp_hidden(cp))
        return (size_t)snprintf(t, 8, "\\u%04x", (unsigned)cp);
    memcpy(t, s, len);
    t[len] = '\0';
    return len;
}

size_t
esc_fwrite(FILE *fp, const char *s, size_t n, size_t max, unsigned flags)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, adv, k;
    char t[8];

    while (i < n) {
        k = unit(p + i, n - i, flags, t, &adv);
        if (adv > max - i)
            break;
        fwrite(t, 1, k, fp);
        i += adv;
    }
    return i;
}

char *
esc_str(char *buf, size_t cap, const char *s, unsigned flags)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p), i, adv, k, total = 0, len = 0;
    char t[8];

    if (cap == 0)
        return buf;
    for (i = 0; i < n; i += adv)
        total += unit(p + i, n - i, flags, t, &adv);
    for (i = 0; i < n; i += adv) {
        k = unit(p + i, n - i, flags, t, &adv);
        /* cut: keep room for "..." and the NUL */
        if (total >= cap && len + k + 4 > cap)
            break;
        memcpy(buf + len, t, k);
        len += k;
    }
    if (i < n) {
        size_t m = cap - 1 - len < 3 ? cap - 1 - len : 3;
        memcpy(buf + len, "...", m);
        len += m;
    }
    buf[len] = '\0';
    return buf;
}

void
esc_csv_field(FILE *fp, const char *s)
{
    size_t n = strlen(s);
    bool quote = n && (strpbrk(s, ",\"") || s[0] == ' ' || s[n - 1] == ' ');

    if (!quote) {
        esc_fwrite(fp, s, n, SIZE_MAX, 0);
        return;
    }
    fputc('"', fp);
    esc_fwrite(fp, s, n, SIZE_MAX, ESC_CSVQ);
    fputc('"', fp);
}
