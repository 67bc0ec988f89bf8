/*
 * fuzz_resultline.c - libFuzzer harness for the reader of results files
 * (resume_line_parse: `generate --batch --resume` and `generate --merge`
 * read every line of files that may be torn, of another program, or
 * hostile): the input is split into lines and each line is parsed.
 * Checks the contract (abort on violation): 0, 1 or -ST_FORMAT/-ST_NOMEM; a
 * message for every failure; on success an id that is a string or an
 * integer and a line number >= 1; nothing held after a failure.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_lines.h"
#include "resume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
one_line(const char *line, size_t len, void *ctx)
{
    struct result_info ri;
    struct diag d = {{0}};
    int rc = resume_line_parse(line, len, &ri, &d);

    (void)ctx;
    if (rc == 0) {
        if (!(json_is_string(ri.id) || json_is_integer(ri.id)) || ri.line < 1)
            abort();
    } else if (rc == 1 || rc < 0) {
        if (ri.id || (rc < 0 && (!d.msg[0] || (rc != -ST_FORMAT && rc != -ST_NOMEM))))
            abort();
    } else {
        abort();
    }
    result_info_release(&ri);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_lines(data, size, one_line, NULL);
    return 0;
}
