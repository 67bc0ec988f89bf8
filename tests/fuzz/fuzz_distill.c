/*
 * fuzz_distill.c - libFuzzer harness for draft-train's JSON Lines data
 * parser (distill_line_parse): the input is split into lines as draft-train
 * splits them, and each line is parsed.  Checks the parser's contract
 * (abort on violation): a result of 0, 1 or -ST_FORMAT / -ST_NOMEM; a
 * message for every failure; on success a known kind with its text (of the
 * stated length, NUL-terminated) or 1 .. DISTILL_MSGS_MAX messages, each
 * with a role and content.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "distill.h"
#include "fuzz_lines.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(const struct distill_line *l, int rc, const struct diag *d)
{
    if (rc == 1) {
        if (l->obj || l->text || l->msgs)
            abort();
        return;
    }
    if (rc < 0) {
        if (!d->msg[0] || (rc != -ST_FORMAT && rc != -ST_NOMEM))
            abort();
        return;
    }
    if (rc != 0 || !l->obj)
        abort();
    if (l->kind == DISTILL_MESSAGES) {
        if (l->text || !l->msgs || l->n_msgs < 1 || l->n_msgs > DISTILL_MSGS_MAX)
            abort();
        for (size_t i = 0; i < l->n_msgs; i++)
            if (!l->msgs[i].role || !l->msgs[i].content)
                abort();
    } else if (l->kind == DISTILL_TEXT || l->kind == DISTILL_PROMPT) {
        if (!l->text || l->text[l->text_len] != '\0' || l->msgs)
            abort();
        if (l->kind == DISTILL_PROMPT && l->text_len == 0)
            abort();
    } else {
        abort();
    }
}

static void
one_line(const char *line, size_t len, void *ctx)
{
    struct distill_line l;
    struct diag d = {{0}};
    int rc = distill_line_parse(line, len, &l, &d);

    (void)ctx;
    check(&l, rc, &d);
    distill_line_release(&l);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_lines(data, size, one_line, NULL);
    return 0;
}
