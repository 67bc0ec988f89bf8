/*
 * test_generate.c - the pieces of generate that need no model: UTF-8
 * streaming (never cut a multibyte character, whatever the token
 * boundaries; escaped for a terminal) and the perplexity arithmetic (per-token NLL, PPL and its
 * standard error, worked out by hand).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "perplexity.h"
#include "t.h"

static void
test_complete_len(void)
{
    const unsigned char euro[] = { 0xE2, 0x82, 0xAC };          /* U+20AC */
    const unsigned char emoji[] = { 'a', 0xF0, 0x9F, 0x98, 0x80 }; /* U+1F600 */
    const unsigned char bad[] = { 'x', 0x80, 0x80, 0x80, 0x80 };

    CHECK_EQ(utf8_complete_len((const unsigned char *)"abc", 3), 3);
    CHECK_EQ(utf8_complete_len(euro, 1), 0);
    CHECK_EQ(utf8_complete_len(euro, 2), 0);
    CHECK_EQ(utf8_complete_len(euro, 3), 3);
    CHECK_EQ(utf8_complete_len(emoji, 2), 1);
    CHECK_EQ(utf8_complete_len(emoji, 4), 1);
    CHECK_EQ(utf8_complete_len(emoji, 5), 5);
    CHECK_EQ(utf8_complete_len(bad, 5), 5);    /* stray continuation bytes go out */
    CHECK_EQ(utf8_complete_len(bad, 0), 0);
    /* 0xC0 and 0xFF never start a sequence: released at once */
    CHECK_EQ(utf8_complete_len((const unsigned char *)"\xC0", 1), 1);
    CHECK_EQ(utf8_complete_len((const unsigned char *)"\xFF", 1), 1);
}

/* Feeds text to a stream in pieces of the given sizes and checks that
 * everything comes out: the text itself, every flush point a character
 * boundary; or, with want (the stream escapes, as on a terminal), want,
 * whatever the pieces. */
static void
split_and_check(const char *text, const size_t *sizes, size_t n_sizes, const char *want)
{
    struct utf8_stream u = { { 0 }, 0, want != NULL };
    char *buf = NULL;
    size_t len = 0, off = 0, i, total = strlen(text);
    FILE *fp = open_memstream(&buf, &len);

    if (!fp) {
        CHECK(!"open_memstream");
        return;
    }
    for (i = 0; i < n_sizes && off < total; i++) {
        size_t n = sizes[i] < total - off ? sizes[i] : total - off;
        CHECK_EQ(utf8_stream_push(&u, text + off, n, fp, NULL), 0);
        fflush(fp);
        off += n;
        /* what is out so far ends on a boundary of the text */
        CHECK(want || len == 0 || (((unsigned char)text[len] & 0xC0) != 0x80));
        CHECK(want || (len <= off && off - len <= 3));
    }
    CHECK_EQ(utf8_stream_flush(&u, fp, NULL), 0);
    fclose(fp);
    if (!want)
        want = text;
    CHECK_EQ(len, strlen(want));
    CHECK(buf && memcmp(buf, want, len) == 0);
    free(buf);
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const size_t ones[] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
static const size_t mixed[] = { 2, 5, 1, 3, 6, 2, 4, 100 };

static void
test_stream(void)
{
    /* "héllo €uro 😀 done" */
    const char *t = "h\xC3\xA9llo \xE2\x82\xAC" "uro \xF0\x9F\x98\x80 done";
    const size_t whole[] = { 100 };
    const size_t odd[] = { 7, 1, 1, 1, 9, 100 };

    split_and_check(t, ones, N(ones), NULL);
    split_and_check(t, mixed, N(mixed), NULL);
    split_and_check(t, whole, 1, NULL);
    split_and_check(t, odd, N(odd), NULL);
}

/* On a terminal: a character split between pieces is escaped whole (U+202E
 * as \u202e, not as three \xHH). */
static void
test_stream_escape(void)
{
    /* an OSC title, a clear screen, RLO (U+202E), é, tab, backslash, a lone
     * 0xFF; the line break, the tab and the backslash stay */
    const char *t = "a\x1B]0;x\a\x1B[2J\xE2\x80\xAE" "b\n\xC3\xA9\t\\\xFF.";
    const char *want = "a\\x1b]0;x\\x07\\x1b[2J\\u202eb\n\xC3\xA9\t\\\\xff.";
    const size_t cut[] = { 13, 100 };  /* two bytes of U+202E, then a long piece */

    split_and_check(t, ones, N(ones), want);
    split_and_check(t, mixed, N(mixed), want);
    split_and_check(t, cut, N(cut), want);
}

static void
test_nll(void)
{
    /* logits 0, ln 2, ln 4 -> p = 1/7, 2/7, 4/7 */
    const float l[] = { 0.0f, (float)M_LN2, (float)(2 * M_LN2) };
    /* large logits must not overflow */
    const float big[] = { 1000.0f, 1000.0f };

    CHECK_NEAR(ppl_token_nll(l, 3, 0), log(7.0), 1e-6);
    CHECK_NEAR(ppl_token_nll(l, 3, 1), log(7.0 / 2), 1e-6);
    CHECK_NEAR(ppl_token_nll(l, 3, 2), log(7.0 / 4), 1e-6);
    CHECK_NEAR(ppl_token_nll(big, 2, 1), M_LN2, 1e-9);
}

static void
test_ppl_acc(void)
{
    struct ppl_acc a = { 0, 0, 0 };
    double ppl, err;

    ppl_acc_result(&a, &ppl, &err);
    CHECK_NEAR(ppl, 0.0, 0);
    /* nll 1, 2, 3: mean 2 -> PPL e^2; mean(nll^2) = 14/3, var = 14/3 - 4 = 2/3,
     * error = e^2 * sqrt((2/3) / 2) = e^2 / sqrt(3) */
    ppl_acc_add(&a, 1.0);
    ppl_acc_result(&a, &ppl, &err);
    CHECK_NEAR(ppl, exp(1.0), 1e-12);
    CHECK_NEAR(err, 0.0, 0);                 /* one token: no error estimate */
    ppl_acc_add(&a, 2.0);
    ppl_acc_add(&a, 3.0);
    CHECK_EQ(a.count, 3);
    ppl_acc_result(&a, &ppl, &err);
    CHECK_NEAR(ppl, exp(2.0), 1e-12);
    CHECK_NEAR(err, exp(2.0) / sqrt(3.0), 1e-12);

    /* identical values: zero variance, no error */
    memset(&a, 0, sizeof(a));
    ppl_acc_add(&a, 0.5);
    ppl_acc_add(&a, 0.5);
    ppl_acc_result(&a, &ppl, &err);
    CHECK_NEAR(ppl, exp(0.5), 1e-12);
    CHECK_NEAR(err, 0.0, 0);
}

int
main(void)
{
    test_complete_len();
    test_stream();
    test_stream_escape();
    test_nll();
    test_ppl_acc();
    T_DONE();
}
