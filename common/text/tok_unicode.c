/*
 * tok_unicode.c - lookups in the generated Unicode tables (tok_unicode.h).
 */
#include "tok_unicode.h"

/* the range of r[0..n) (sorted, disjoint) holding cp, or NULL */
static const struct tok_urange *
range_find(const struct tok_urange *r, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (cp < r[mid].first)
            hi = mid;
        else if (cp > r[mid].last)
            lo = mid + 1;
        else
            return &r[mid];
    }
    return NULL;
}

int
tok_ucat(uint32_t cp)
{
    const struct tok_urange *r = range_find(tok_ucat_ranges, tok_ucat_n, cp);

    return r ? (int)r->value : 0;
}

uint32_t
tok_ulower(uint32_t cp)
{
    size_t lo = 0, hi = tok_ulower_n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (tok_ulower_map[mid].from == cp)
            return tok_ulower_map[mid].to;
        if (tok_ulower_map[mid].from < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return cp;
}

uint32_t
tok_unfd(uint32_t cp)
{
    const struct tok_urange *r = range_find(tok_unfd_ranges, tok_unfd_n, cp);

    return r ? r->value : cp;
}

int
tok_uspace(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}
