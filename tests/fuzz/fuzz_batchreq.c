/*
 * fuzz_batchreq.c - libFuzzer harness for the `generate --batch` request
 * parser (batch_req_parse): the input is split into lines as the batch
 * reader splits them, and each line is parsed.  Checks the parser's
 * contract (abort on violation): a result of 0, 1 or -ST_*; a message for
 * every failure; an id (string or integer) whenever the line is not blank;
 * exactly one of prompt and tokens on success, with a prompt of the stated
 * length, token ids >= 0, at most 16 non-empty stop strings, sampling values
 * in range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "genbatch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(const struct batch_req *r, int rc, const struct diag *d)
{
    if (rc == 1) {
        if (r->id || r->prompt || r->tokens)
            abort();
        return;
    }
    if (!r->id || !(json_is_string(r->id) || json_is_integer(r->id)))
        abort();
    if (rc < 0) {
        if (!d->msg[0] || (rc != -ST_FORMAT && rc != -ST_NOMEM))
            abort();
        return;
    }
    if (rc != 0 || !r->prompt == !r->tokens)
        abort();
    if (r->prompt && r->prompt[r->prompt_len] != '\0')
        abort();
    if (r->tokens) {
        if (r->n_tokens < 1)
            abort();
        for (int64_t i = 0; i < r->n_tokens; i++)
            if (r->tokens[i] < 0)
                abort();
    }
    if (r->n_stop > 16)
        abort();
    for (size_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            abort();
    if (!(r->sp.temp >= 0) || !(r->sp.top_p >= 0 && r->sp.top_p <= 1) ||
        !(r->sp.min_p >= 0 && r->sp.min_p <= 1) || r->sp.top_k < 0 ||
        !(r->sp.repeat_penalty > 0) || r->max_tokens < -1)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    struct batch_req_defaults def;
    int64_t lineno = 0;

    def.max_tokens = -1;
    sample_params_init(&def.sp);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        struct batch_req r;
        struct diag d = {{0}};
        int rc = batch_req_parse(p, len, ++lineno, &def, &r, &d);
        check(&r, rc, &d);
        batch_req_release(&r);
        p += len + (nl != NULL);
    }
    return 0;
}
