/*
 * gentok.h - generate --tokenize, --count and --detokenize: a model's
 * vocabulary applied to text, as llama.cpp's llama-tokenize does, with only
 * the vocabulary read (the GGUF header: no weights are mapped or checked).
 *
 * Tokenize: the whole input (-p text, -f file or standard input, taken as
 * it is: no newline is dropped) through tok_encode() with add_special (BOS
 * and EOS as the vocabulary adds them) and parse_special (control-token
 * texts become their tokens) unless turned off.  Output: one id per line;
 * count: the number of tokens only, one line, like wc; json: one generate/1
 * object of type "tokens":
 *     {"schema":"generate/1","type":"tokens","model":PATH,"n_tokens":N,
 *      "tokens":[{"id":ID,"piece":TEXT,"offset":BYTES,"length":BYTES},...]}
 * where piece is what the token prints (llama_token_to_piece with special
 * tokens shown; "piece_hex" instead when that is not valid UTF-8, e.g. one
 * byte of a multi-byte character) and offset/length locate the token in the
 * input in bytes: found by walking the pieces along the text, exact where
 * they spell it; the space SentencePiece puts before the first word, an
 * added BOS or EOS and the U+FFFD that stands for bytes that are not UTF-8
 * are accounted for (those take length 0, 0 and the bad bytes).  With count
 * and json: {"schema":"generate/1","type":"count","model":PATH,"n_tokens":N}.
 *
 * Detokenize: the input holds ids (decimal, separated by white space, commas
 * or brackets, so llama-tokenize's "[1, 2]" and our one-per-line output both
 * read back); unless turned off, a leading BOS and trailing EOS of the kind
 * the vocabulary adds are dropped and control tokens print their text
 * (unparse_special), then the text is tok_decode() without remove_special,
 * so that SentencePiece's prefix space goes too: tokenize | detokenize
 * gives the text back.  When the output is a terminal the text is escaped
 * as generated text is (escape.h, ESC_TEXT: its line breaks, tabs and backslashes kept);
 * to a pipe or file it is written as is.
 * json: {"schema":"generate/1","type":"text","model":PATH,"n_tokens":N,
 * "text":TEXT} (invalid UTF-8 as U+FFFD).
 */
#ifndef LLMKIT_GENTOK_H
#define LLMKIT_GENTOK_H

#include <stdbool.h>

#include "generate.h"
#include "status.h"

enum gentok_mode {
    GENTOK_NONE = 0,
    GENTOK_TOKENIZE,            /* --tokenize */
    GENTOK_COUNT,               /* --count */
    GENTOK_DETOKENIZE,          /* --detokenize */
};

/* With the model, prompt, prompt_file, output, force, json and cb of a
 * struct generate_opts (generate.h). */
struct gentok_opts {
    enum gentok_mode mode;
    bool no_special;            /* tokenize: no BOS/EOS; detokenize: keep them */
    bool no_parse_special;      /* tokenize: control-token texts stay text;
                                 * detokenize: control tokens print nothing */
};

/* run_gentok() : does t->mode on the input of g (-p prompt, else the
 * prompt_file, else stdin), writing to g->output; warnings go to g->cb.
 * Returns 0, -ST_FORMAT (the vocabulary cannot be loaded: its tokenizer is
 * named in d; an input id that is not a number or out of range), -ST_RANGE
 * (an output that exists without force), -ST_IO, -ST_NOMEM; the message in d
 * names the file (a write error the output: the -o file, or "stdout"). */
int run_gentok(const struct gentok_opts *t, const struct generate_opts *g, struct diag *d);

#endif
