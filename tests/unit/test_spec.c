/*
 * test_spec.c - prompt lookup drafting (spec.h).
 */
#include <stdint.h>
#include <string.h>

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

    /* trees: a caterpillar of two levels of width 2 */
    struct spec_tree t;
    CHECK_EQ(spec_tree_init(&t, 5, NULL), 0);
    spec_tree_reset(&t, 7);
    CHECK_EQ(spec_tree_add(&t, 10, 0), 1);
    CHECK(t.chain);
    CHECK_EQ(spec_tree_add(&t, 11, 0), 2);
    CHECK(!t.chain);
    CHECK_EQ(spec_tree_add(&t, 20, 1), 3);
    CHECK_EQ(spec_tree_add(&t, 21, 1), 4);
    CHECK_EQ(spec_tree_add(&t, 22, 1), -1);             /* full */
    CHECK_EQ(spec_tree_add(&t, 22, 9), -1);
    CHECK_EQ(t.depth[4], 2);
    CHECK_EQ(spec_tree_child(&t, 0, 11), 2);
    CHECK_EQ(spec_tree_child(&t, 1, 21), 4);
    CHECK_EQ(spec_tree_child(&t, 2, 21), -1);
    uint8_t m[25];
    spec_tree_mask(&t, m);
    const uint8_t want[25] = { 1, 0, 0, 0, 0,  1, 1, 0, 0, 0,  1, 0, 1, 0, 0,
                               1, 1, 0, 1, 0,  1, 1, 0, 0, 1 };
    CHECK(memcmp(m, want, 25) == 0);
    spec_tree_release(&t);

    /* the draft size: a flat cost pays for every level a likely draft
     * brings; a cost linear in the tokens never pays */
    struct spec_cost flat = { 3, { 1, 2, 4 }, { 10, 10, 10 } };
    CHECK_NEAR(spec_cost_at(&flat, 3), 10, 1e-9);
    CHECK_NEAR(spec_cost_at(&flat, 8), 10, 1e-9);
    CHECK_EQ(spec_choose(&flat, 0.9, 1, 0, 16), 16);
    struct spec_cost lin = { 3, { 1, 2, 4 }, { 10, 20, 40 } };
    CHECK_NEAR(spec_cost_at(&lin, 3), 30, 1e-9);
    CHECK_NEAR(spec_cost_at(&lin, 8), 80, 1e-9);
    CHECK_EQ(spec_choose(&lin, 0.9, 1, 0, 16), 0);
    /* a cheap verify but an expensive draft level: fewer levels */
    struct spec_cost gentle = { 3, { 1, 2, 4 }, { 10, 11, 13 } };
    int k_free = spec_choose(&gentle, 0.7, 1, 0, 16), k_dear = spec_choose(&gentle, 0.7, 1, 4, 16);
    CHECK(k_free > k_dear);
    CHECK(k_dear >= 1);
    struct spec_cost none = { 0, { 0 }, { 0 } };
    CHECK_EQ(spec_choose(&none, 0.5, 1, 0, 5), 5);
    T_DONE();
}
