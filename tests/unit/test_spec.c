/*
 * test_spec.c - prompt lookup drafting (spec.h).
 */
#include <stdint.h>

#include "spec.h"
#include "t.h"

static int
eq(const int32_t *a, const int32_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

int
main(void)
{
    int32_t d[8];

    /* the last 3 tokens (7 8 9) occurred at 1..3, followed by 4 5 6 7 8 9 */
    int32_t h1[] = { 1, 7, 8, 9, 4, 5, 6, 7, 8, 9 };
    CHECK_EQ(spec_lookup_draft(h1, 10, 3, d, 8), 6);
    CHECK(eq(d, (const int32_t[]){ 4, 5, 6, 7, 8, 9 }, 6));
    CHECK_EQ(spec_lookup_draft(h1, 10, 3, d, 2), 2);
    CHECK(eq(d, (const int32_t[]){ 4, 5 }, 2));
    /* the most recent occurrence wins: "2" after 5 2 3 ... 5 2 4 ... 5 */
    int32_t h2[] = { 5, 2, 3, 0, 5, 2, 4, 0, 5 };
    CHECK_EQ(spec_lookup_draft(h2, 9, 1, d, 3), 3);
    CHECK(eq(d, (const int32_t[]){ 2, 4, 0 }, 3));
    /* longer n-grams first: suffix 1 5 matches at 0..1 (followed by 9),
     * though 5 alone last occurred before 7 */
    int32_t h3[] = { 1, 5, 9, 5, 7, 1, 5 };
    CHECK_EQ(spec_lookup_draft(h3, 7, 2, d, 1), 1);
    CHECK_EQ(d[0], 9);
    CHECK_EQ(spec_lookup_draft(h3, 7, 1, d, 1), 1);
    CHECK_EQ(d[0], 7);
    /* no match, empty and tiny histories, no budget */
    int32_t h4[] = { 1, 2, 3, 4 };
    CHECK_EQ(spec_lookup_draft(h4, 4, 3, d, 8), 0);
    CHECK_EQ(spec_lookup_draft(h4, 1, 3, d, 8), 0);
    CHECK_EQ(spec_lookup_draft(h4, 0, 3, d, 8), 0);
    CHECK_EQ(spec_lookup_draft(h1, 10, 3, d, 0), 0);
    /* a run of one token drafts its continuation */
    int32_t h5[] = { 4, 4, 4, 4 };
    CHECK_EQ(spec_lookup_draft(h5, 4, 3, d, 8), 1);
    CHECK_EQ(d[0], 4);
    T_DONE();
}
