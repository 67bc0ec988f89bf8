#!/usr/bin/env bats
# The command line of every tool under a hostile caller: a bad option is
# reported by the tool (short name, escaped, exit 2, the usage line), not by
# getopt; an empty file name and two inputs on standard input are usage
# errors found before any work; each message reaches stderr in one write(2).

load common

FIX="$TOP/tests/fixtures"
M="$FIX/tiny-llama-f32.gguf"
TOOLS="convert draft-train generate kvstat quantize"

# bad_option TOOL WANT ARGS... : TOOL ARGS exits 2 with stderr WANT (after
# "TOOL: ") and then its usage line, nothing on stdout, no control
# character on stderr; TOOL is run by its full path
bad_option() {
    local tool=$1 want=$2
    shift 2
    run -2 --separate-stderr "$LLMKIT_BIN/$tool" "$@"
    [ -z "$output" ] || { echo "stdout: $output"; return 1; }
    [ "${stderr_lines[0]}" = "$tool: $want" ] || { echo "stderr: $stderr"; echo "want: $tool: $want"; return 1; }
    [[ "${stderr_lines[1]}" == "usage: $tool "* ]] || { echo "no usage line: $stderr"; return 1; }
    printf '%s\n' "$stderr" >"$BATS_TEST_TMPDIR/err"
    clean "$BATS_TEST_TMPDIR/err"
}

@test "a bad option: the tool's own message, escaped, the short name, exit 2, the usage line" {
    local t
    for t in $TOOLS; do
        bad_option "$t" "unrecognized option '--\\x1b]0;PWN\\x07\\x1b[2J'" $'--\e]0;PWN\a\e[2J'
        bad_option "$t" "unrecognized option '--bogus=1'" --bogus=1
        bad_option "$t" "invalid option -- '\\x1b'" $'-\e'
        bad_option "$t" "invalid option -- '\\xff'" $'-q\xff'
        bad_option "$t" "invalid option -- 'Z'" -qZ
        bad_option "$t" "option '--help' doesn't allow an argument" --help=x
        bad_option "$t" "option '--version' doesn't allow an argument" --vers=$'\e[2J'
    done
    bad_option generate "option '--temp' requires an argument" --temp
    bad_option generate "option requires an argument -- 't'" -qt
    bad_option generate "option '--top' is ambiguous (--top-k, --top-logits, --top-p)" --top=1
    bad_option quantize "option '--type' requires an argument" --type
    bad_option convert "option '--from' requires an argument" --from
    bad_option kvstat "option '--ctx' requires an argument" --ctx
    bad_option kvstat "option requires an argument -- 'o'" -o
    bad_option draft-train "option '--lr' requires an argument" --lr
    bad_option draft-train "option requires an argument -- 'm'" -m
}

@test "the test helpers built on the tools' layer report bad options the same way" {
    local q=${LLMKIT_MKQGRID:-$TOP/build/mkqgrid}
    [ -x "$q" ] || skip "no $q (make build/mkqgrid)"
    run -2 --separate-stderr "$q" $'--\e[2J'
    [ "${stderr_lines[0]}" = "mkqgrid: unrecognized option '--\\x1b[2J'" ]
    [[ "${stderr_lines[1]}" == "usage: mkqgrid "* ]]
}

# empty_name WHAT TOOL ARGS... : TOOL ARGS exits 2 with "TOOL: WHAT: empty
# file name" and the usage line, leaving nothing in the directory
empty_name() {
    local what=$1 tool=$2
    shift 2
    run -2 --separate-stderr "$tool" "$@"
    [ "${stderr_lines[0]}" = "$tool: $what: empty file name" ] ||
        { echo "$tool $*: $stderr"; echo "want: $tool: $what: empty file name"; return 1; }
    [[ "${stderr_lines[1]}" == "usage: $tool "* ]]
    [ -z "$(ls -A | grep -v -x -e req.jsonl -e res.jsonl -e text.txt)" ] || { ls -A; return 1; }
}

@test "an empty file name is a usage error before any work, for every path of every tool" {
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    printf '%s\n' '{"id":"a","prompt":"hi","max_tokens":2}' >req.jsonl
    generate -q -m "$M" --batch req.jsonl --temp 0 -o res.jsonl
    printf 'the cat sat on the mat\n%.0s' {1..20} >text.txt
    # generate
    empty_name -o generate -m "$M" -p hi -n 2 -o ''
    empty_name --kv-trace generate -m "$M" --batch req.jsonl --kv-trace ''
    empty_name --resume generate -m "$M" --batch req.jsonl --resume ''
    empty_name -o generate --merge req.jsonl res.jsonl -o ''
    empty_name --merge generate --merge '' res.jsonl
    empty_name "--merge: a results file" generate --merge req.jsonl res.jsonl ''
    empty_name -m generate -m '' -p hi
    empty_name -f generate -m "$M" -f ''
    empty_name --batch generate -m "$M" --batch ''
    empty_name --perplexity generate -m "$M" --perplexity ''
    empty_name --draft generate -m "$M" -p hi --draft ''
    empty_name --draft-head generate -m "$M" -p hi --draft-head ''
    # quantize
    empty_name OUTPUT quantize --method rtn "$M" ''
    empty_name INPUT quantize --type Q8_0 '' o.gguf
    empty_name --imatrix quantize --type Q4_K_M --imatrix '' "$M" o.gguf
    empty_name --calib quantize --type Q4_K_M --calib '' "$M" o.gguf
    empty_name --imatrix-out quantize --type Q4_K_M --calib text.txt --imatrix-out '' "$M" o.gguf
    empty_name --eval quantize --type Q8_0 --eval '' "$M" o.gguf
    # convert
    empty_name INPUT convert '' o.gguf
    empty_name OUTPUT convert "$M" ''
    empty_name INPUT convert --info ''
    empty_name --tokenizer convert --tokenizer '' "$FIX/tiny-l2c.bin" o.gguf
    empty_name --base convert --base '' hf o.gguf
    run -2 --separate-stderr convert --layout speculators --verifier '' "$M" o
    [ "${stderr_lines[0]}" = "convert: --verifier: empty name" ]
    # kvstat
    empty_name FILE kvstat ''
    empty_name FILE kvstat "$M" ''
    empty_name -o kvstat -o '' "$M"
    empty_name --trace kvstat --trace ''
    empty_name --svg kvstat --trace t.jsonl --svg ''
    empty_name --lengths kvstat --lengths '' "$M"
    empty_name --weights kvstat --mem 1GiB --weights '' "$M"
    # draft-train
    empty_name -m draft-train -m '' --data text.txt -o h.gguf --epochs 1
    empty_name --data draft-train -m "$M" --data '' -o h.gguf --epochs 1
    empty_name -o draft-train -m "$M" --data text.txt -o '' --epochs 1
    empty_name --eval draft-train -m "$M" --data text.txt --eval '' -o h.gguf --epochs 1
    empty_name --cache draft-train -m "$M" --data text.txt --cache '' -o h.gguf --epochs 1
}

# two_stdin WANT TOOL ARGS... : TOOL ARGS, with the model on stdin, exits 2
# with "TOOL: WANT" and the usage line, writing nothing on stdout
two_stdin() {
    local want=$1 tool=$2
    shift 2
    run -2 --separate-stderr "$tool" "$@" <"$M"
    [ "${stderr_lines[0]}" = "$tool: $want" ] || { echo "$tool $*: $stderr"; echo "want: $tool: $want"; return 1; }
    [[ "${stderr_lines[1]}" == "usage: $tool "* ]]
    [ -z "$output" ]
}

@test "two inputs that would both read standard input are a usage error, in every tool" {
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    printf 'the cat sat on the mat\n%.0s' {1..20} >text.txt
    two_stdin "-m and --batch cannot both read standard input" generate -m - --batch -
    two_stdin "-m and --batch cannot both read standard input" generate -m - --batch
    two_stdin "-m and -f cannot both read standard input" generate -m - -f -
    two_stdin "-m and the prompt (no -p or -f) cannot both read standard input" generate -m - -n 2
    two_stdin "-m and the prompt (no -p or -f) cannot both read standard input" generate -m - --count
    two_stdin "-m and --draft cannot both read standard input" generate -m - --draft - -p hi
    two_stdin "--draft-head and --batch cannot both read standard input" \
        generate -m "$M" --draft-head - --batch
    two_stdin "-m and --perplexity cannot both read standard input" generate -m - --perplexity -
    two_stdin "--imatrix and INPUT cannot both read standard input" quantize --type Q8_0 --imatrix - - o.gguf
    two_stdin "--imatrix and --eval cannot both read standard input" \
        quantize --type Q4_K_M --imatrix - --eval - "$M" o.gguf
    two_stdin "--calib and --eval cannot both read standard input" \
        quantize --type Q4_K_M --calib - --eval - "$M" o.gguf
    two_stdin "INPUT and --tokenizer cannot both read standard input" convert --tokenizer - - o.gguf
    two_stdin "INPUT and --base cannot both read standard input" convert --base - - o.gguf
    two_stdin "FILE: standard input ('-') given twice" kvstat - -
    two_stdin "--trace and FILE cannot both read standard input" kvstat --trace - -
    two_stdin "--trace and --lengths cannot both read standard input" kvstat --trace - --lengths -
    two_stdin "--data and --eval cannot both read standard input" \
        draft-train -m "$M" --data - --eval - -o h.gguf --epochs 1
    [ -z "$(ls -A | grep -v -x text.txt)" ]
    # one of them is fine
    run -0 --separate-stderr generate -q -m - -p hi -n 2 --temp 0 <"$M"
}

# writes_to_stderr CMD... : the number of write(2) calls on fd 2 of CMD
writes_to_stderr() {
    strace -f -qq -e trace=write -o "$BATS_TEST_TMPDIR/st" "$@" 2>/dev/null || true
    grep -c 'write(2, ' "$BATS_TEST_TMPDIR/st" || true
}

@test "a message, escaped, with the usage line after it, reaches stderr in one write" {
    # (counted in the plain build: under the sanitizer more than one write shows)
    [ "${LLMKIT_SAN:-}" != address ] || skip "write(2) counted without AddressSanitizer"
    command -v strace >/dev/null || skip "no strace"
    strace -qq -o /dev/null true 2>/dev/null || skip "strace cannot trace here"
    cd "$BATS_TEST_TMPDIR"
    # a die() with a name to escape (it was one write per byte)
    [ "$(writes_to_stderr generate -m $'no\e[2Jpe.gguf' -p hi)" = 1 ]
    [ "$(writes_to_stderr quantize --type Q8_0 $'no\e[2Jpe.gguf' o.gguf)" = 1 ]
    [ "$(writes_to_stderr kvstat $'no\e[2Jpe.gguf')" = 1 ]
    # a usage error: the message and the usage line together
    [ "$(writes_to_stderr generate $'--\e]0;PWN\a')" = 1 ]
    [ "$(writes_to_stderr convert -o x)" = 1 ]
    [ "$(writes_to_stderr draft-train -m "$M")" = 1 ]
    # the line is whole: message, then the usage line
    run -4 --separate-stderr generate -m $'no\e[2Jpe.gguf' -p hi
    [ "$stderr" = "generate: 'no\\x1b[2Jpe.gguf': cannot open: No such file or directory" ]
}
