/*
 * fuzz_lines.h - the line splitter of the JSON Lines harnesses: calls
 * fn(line, len, ctx) for every '\n'-separated line of the input (without
 * its '\n'; a last line without one included), as the readers split them.
 */
#ifndef LLMKIT_FUZZ_LINES_H
#define LLMKIT_FUZZ_LINES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void
fuzz_lines(const uint8_t *data, size_t size, void (*fn)(const char *, size_t, void *), void *ctx)
{
    const char *p = (const char *)data, *end = p + size;

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        fn(p, len, ctx);
        p += len + (nl != NULL);
    }
}

#endif
