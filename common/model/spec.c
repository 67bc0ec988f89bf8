/*
 * spec.c - drafters for speculative decoding (spec.h).
 */
#include <string.h>

#include "spec.h"

int64_t
spec_lookup_draft(const int32_t *hist, int64_t n_hist, int ngram_max, int32_t *draft,
                  int64_t max_draft)
{
    if (max_draft <= 0 || n_hist < 2)
        return 0;
    for (int64_t n = ngram_max < n_hist - 1 ? ngram_max : n_hist - 1; n >= 1; n--) {
        const int32_t *suf = hist + n_hist - n;
        /* occurrences ending at e (exclusive) < n_hist, most recent first */
        for (int64_t e = n_hist - 1; e >= n; e--) {
            if (hist[e - 1] != suf[n - 1] || memcmp(hist + e - n, suf, (size_t)n * sizeof(*suf)))
                continue;
            int64_t k = n_hist - e < max_draft ? n_hist - e : max_draft;
            memcpy(draft, hist + e, (size_t)k * sizeof(*draft));
            return k;
        }
    }
    return 0;
}
