#!/usr/bin/env bats
# generate --tokenize / --count / --detokenize: llama.cpp's vocabulary test
# files (vocabulary-only GGUFs: no weights) against their .out ids, SmolLM2
# against llama.cpp's golden tokenizations, round trips, --json pieces and
# offsets, bad input, write errors and usage.

load common

VOCAB="$SHARED/vocab"
GOLD="$TOP/tests/golden/tokenizer"

teardown() {
    unmount_full
}

# vcase NAME I [DIR] : writes case I (from 0) of ggml-vocab-NAME's .inp to
# $BATS_TEST_TMPDIR/in and its ids (.out line I, one per line) to .../want
vcase() {
    python3 - "${3:-$VOCAB}/ggml-vocab-$1.gguf" "$2" "$BATS_TEST_TMPDIR" <<'PY'
import sys
v, i, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
inp = open(v + ".inp", "rb").read().split(b"\n__ggml_vocab_test__\n")
out = open(v + ".out").read().split("\n")
open(d + "/in", "wb").write(inp[i])
open(d + "/want", "w").write("".join(x + "\n" for x in out[i].split()))
PY
}

@test "tokenize: the vocabulary test files give llama.cpp's ids (vocabulary only, no weights)" {
    [ -d "$VOCAB" ] || skip "no $VOCAB"
    local v i
    for v in llama-spm phi-3 gpt-2 starcoder falcon deepseek-coder; do
        for i in 0 3 9 17 30 41; do
            vcase "$v" "$i"
            run -0 --separate-stderr generate -m "$VOCAB/ggml-vocab-$v.gguf" --tokenize \
                --no-bos --no-parse-special -f "$BATS_TEST_TMPDIR/in"
            [ "$output" = "$(cat "$BATS_TEST_TMPDIR/want")" ] ||
                { echo "$v case $i: got $output"; false; }
            # --count is the number of those lines
            run -0 generate -m "$VOCAB/ggml-vocab-$v.gguf" --count --no-bos \
                --no-parse-special -f "$BATS_TEST_TMPDIR/in"
            [ "$output" -eq "$(wc -l < "$BATS_TEST_TMPDIR/want")" ]
        done
    done
}

@test "tokenize: every vocabulary test file of the llama.cpp sources (WPM, Gemma 4, ...)" {
    local dir v f i
    dir=$(compgen -G "$LLMKIT_CACHE/llama.cpp-*/src/*/vendor/llama.cpp/models" | tail -1)
    if [ -z "$dir" ]; then
        [ "${CI:-}" != true ] || { echo "no llama.cpp sources under $LLMKIT_CACHE" >&2; false; }
        skip "no llama.cpp sources under $LLMKIT_CACHE (scripts/build-llamacpp unpacks them)"
    fi
    for f in "$dir"/ggml-vocab-*.gguf.inp; do
        v=$(basename "$f" .gguf.inp)
        v=${v#ggml-vocab-}
        for i in 1 7 22 40; do
            vcase "$v" "$i" "$dir"
            run -0 --separate-stderr generate -m "$dir/ggml-vocab-$v.gguf" --tokenize \
                --no-bos --no-parse-special -f "$BATS_TEST_TMPDIR/in"
            [ "$output" = "$(cat "$BATS_TEST_TMPDIR/want")" ] ||
                { echo "$v case $i: got $output"; false; }
        done
    done
}

@test "tokenize: SmolLM2 matches llama.cpp's golden tokenizations (BOS, special texts)" {
    need_model M SmolLM2-135M-Instruct.Q4_1.gguf
    local n ci want
    # (not $i: bats' run sets it)
    n=$(jq '.cases | length' "$GOLD/smollm2.json")
    for ((ci = 0; ci < n; ci++)); do
        jq -j ".cases[$ci].text" "$GOLD/smollm2.json" > "$BATS_TEST_TMPDIR/in"
        want=$(jq -r ".cases[$ci].ids_special[]" "$GOLD/smollm2.json")
        run -0 --separate-stderr generate -m "$M" --tokenize -f "$BATS_TEST_TMPDIR/in"
        [ "$output" = "$want" ] || { echo "case $ci"; false; }
        want=$(jq -r ".cases[$ci].ids[]" "$GOLD/smollm2.json")
        run -0 --separate-stderr generate -m "$M" --tokenize --no-parse-special \
            -f "$BATS_TEST_TMPDIR/in"
        [ "$output" = "$want" ] || { echo "case $ci (--no-parse-special)"; false; }
    done
}

@test "tokenize | detokenize gives the text back; stdin, -p and -f agree" {
    [ -d "$VOCAB" ] || skip "no $VOCAB"
    # (no special-token text in the middle: SentencePiece puts a space after
    # one, as in llama.cpp, so that text would not come back)
    local v text=$'Hello world, it\'s 2024!\n  Indented\tline and 日本語 🦙'
    for v in llama-spm gpt-2 deepseek-coder phi-3; do
        printf '%s' "$text" > "$BATS_TEST_TMPDIR/t"
        generate -m "$VOCAB/ggml-vocab-$v.gguf" --tokenize -f "$BATS_TEST_TMPDIR/t" \
            > "$BATS_TEST_TMPDIR/ids"
        generate -m "$VOCAB/ggml-vocab-$v.gguf" --detokenize < "$BATS_TEST_TMPDIR/ids" \
            > "$BATS_TEST_TMPDIR/back"
        cmp "$BATS_TEST_TMPDIR/t" "$BATS_TEST_TMPDIR/back"
        run -0 generate -m "$VOCAB/ggml-vocab-$v.gguf" --tokenize -p "$text"
        [ "$output" = "$(cat "$BATS_TEST_TMPDIR/ids")" ]
        run -0 generate -m "$VOCAB/ggml-vocab-$v.gguf" --tokenize < "$BATS_TEST_TMPDIR/t"
        [ "$output" = "$(cat "$BATS_TEST_TMPDIR/ids")" ]
    done
    # byte-level BPE: control-token texts too
    run -0 bash -c "'$LLMKIT_BIN/generate' -m '$VOCAB/ggml-vocab-gpt-2.gguf' --tokenize \
        -p 'a<|endoftext|>b' | '$LLMKIT_BIN/generate' -m '$VOCAB/ggml-vocab-gpt-2.gguf' --detokenize"
    [ "$output" = 'a<|endoftext|>b' ]
    # llama-tokenize's "[1, 2, 3]" reads back too
    run -0 generate -m "$VOCAB/ggml-vocab-llama-spm.gguf" --detokenize -p "[1, 15043, 3186]"
    [ "$output" = "Hello world" ]
}

@test "tokenize --json: pieces and byte offsets locate every token in the text" {
    [ -d "$VOCAB" ] || skip "no $VOCAB"
    local v text='Hello  world, naïve café! <s>x'
    for v in llama-spm gpt-2 falcon; do
        run -0 --separate-stderr generate -m "$VOCAB/ggml-vocab-$v.gguf" --tokenize --json \
            -p "$text"
        echo "$output" > "$BATS_TEST_TMPDIR/j"
        [ "$(jq -r .schema "$BATS_TEST_TMPDIR/j")" = generate/1 ]
        [ "$(jq -r .type "$BATS_TEST_TMPDIR/j")" = tokens ]
        [ "$(jq '.n_tokens == (.tokens | length)' "$BATS_TEST_TMPDIR/j")" = true ]
        # the ids are --tokenize's
        [ "$(jq -r '.tokens[].id' "$BATS_TEST_TMPDIR/j")" = \
          "$(generate -m "$VOCAB/ggml-vocab-$v.gguf" --tokenize -p "$text")" ]
        # offsets tile the text; each span is its piece (the SPM prefix space aside)
        python3 - "$BATS_TEST_TMPDIR/j" "$text" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); text = sys.argv[2].encode()
pos = 0
for t in j["tokens"]:
    assert t["offset"] == pos, (t, pos)
    span = text[t["offset"]:t["offset"] + t["length"]]
    piece = t["piece"].encode() if "piece" in t else bytes.fromhex(t["piece_hex"])
    assert span == piece or span == piece[1:] or t["length"] == 0, (t, span)
    pos += t["length"]
assert pos == len(text), (pos, len(text))
PY
    done
    # a byte token that is part of a character comes as piece_hex
    run -0 generate -m "$VOCAB/ggml-vocab-llama-spm.gguf" --tokenize --json --no-bos -p "🦙"
    [ "$(echo "$output" | jq -r '[.tokens[].piece_hex] | join(",")')" != "" ]
    run -0 generate -m "$VOCAB/ggml-vocab-gpt-2.gguf" --count --json -p "Hello world"
    [ "$(echo "$output" | jq -c '[.type, .n_tokens]')" = '["count",2]' ]
    run -0 generate -m "$VOCAB/ggml-vocab-gpt-2.gguf" --detokenize --json -p "15496 995"
    [ "$(echo "$output" | jq -r .text)" = "Hello world" ]
}

@test "detokenize: --no-bos keeps BOS, --no-parse-special hides control tokens" {
    [ -d "$VOCAB" ] || skip "no $VOCAB"
    local m="$VOCAB/ggml-vocab-llama-spm.gguf"
    run -0 generate -m "$m" --tokenize -p "Hi"
    [ "$(echo "$output" | head -1)" = 1 ]
    run -0 generate -m "$m" --detokenize --no-bos -p "1 6324"
    [ "$output" = "<s> Hi" ]
    run -0 generate -m "$m" --detokenize --no-parse-special -p "6324 2"
    [ "$output" = "Hi" ]
    run -0 generate -m "$m" --detokenize -p "6324 2"
    [ "$output" = "Hi</s>" ]
}

@test "detokenize on a terminal escapes control bytes; to a pipe they pass" {
    [ -d "$VOCAB" ] || skip "no $VOCAB"
    command -v script >/dev/null || skip "no script(1)"
    local m="$VOCAB/ggml-vocab-llama-spm.gguf"
    # <0x1B> is id 30: ESC
    run -0 generate -m "$m" --detokenize -p "30 29961"
    [ "$output" = $'\e[' ]
    run script -qec "$LLMKIT_BIN/generate -m $m --detokenize -p '30 29961'" /dev/null
    [ "$status" -eq 0 ]
    [[ $output == *'\x1b['* ]]
    [[ $output != *$'\e['* ]]
}

@test "tokenize: output to a file (atomic, --force), count in a pipeline" {
    [ -d "$VOCAB" ] || skip "no $VOCAB"
    local m="$VOCAB/ggml-vocab-gpt-2.gguf"
    generate -m "$m" --tokenize -p "a b c" -o "$BATS_TEST_TMPDIR/ids"
    [ "$(wc -l < "$BATS_TEST_TMPDIR/ids")" -eq 3 ]
    run -2 --separate-stderr generate -m "$m" --tokenize -p "x" -o "$BATS_TEST_TMPDIR/ids"
    [[ $stderr == *exists* ]]
    generate -m "$m" --tokenize -p "x" -o "$BATS_TEST_TMPDIR/ids" --force
    [ "$(cat "$BATS_TEST_TMPDIR/ids")" = 87 ]
    run -0 bash -c "printf 'one two three' | '$LLMKIT_BIN/generate' -m '$m' --count"
    [ "$output" = 3 ]
}

@test "tokenize: bad ids, unsupported vocabularies and files are refused by name" {
    [ -d "$VOCAB" ] || skip "no $VOCAB"
    local m="$VOCAB/ggml-vocab-gpt-2.gguf"
    run -3 --separate-stderr generate -m "$m" --detokenize -p "15496 abc"
    [[ $stderr == *"'-p': byte 6: expected a token id"* ]]
    run -3 --separate-stderr generate -m "$m" --detokenize -p "99999999"
    [[ $stderr == *"out of range"* ]]
    run -3 --separate-stderr generate -m "$m" --detokenize -p "-1"
    # a vocabulary whose tokenizer we do not have: refused, naming it
    python3 - "$m" "$BATS_TEST_TMPDIR/v.gguf" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
old = b"tokenizer.ggml.pre" + (8).to_bytes(4, "little") + (5).to_bytes(8, "little") + b"gpt-2"
new = b"tokenizer.ggml.pre" + (8).to_bytes(4, "little") + (5).to_bytes(8, "little") + b"zzz-9"
assert old in b
open(sys.argv[2], "wb").write(b.replace(old, new))
PY
    run -3 --separate-stderr generate -m "$BATS_TEST_TMPDIR/v.gguf" --tokenize -p hi
    [[ $stderr == *"unsupported pre-tokenizer 'zzz-9'"* ]]
    [ -z "$output" ]
    run -4 --separate-stderr generate -m "$BATS_TEST_TMPDIR/none.gguf" --tokenize -p hi
    run -4 --separate-stderr generate -m "$m" --tokenize -f "$BATS_TEST_TMPDIR/none.txt"
    [[ $stderr == *none.txt* ]]
}

@test "tokenize: a write error names the output: stdout, -o FILE on a full disk, -o /dev/full" {
    cd "$BATS_TEST_TMPDIR"
    local tiny="$TOP/tests/fixtures/tiny-llama-f16.gguf" mode json p
    mount_full
    for mode in --tokenize --count --detokenize; do
        p="the cat"
        [ "$mode" != --detokenize ] || p="40 41 42"
        for json in "" --json; do
            run -4 --separate-stderr bash -c "generate -m '$tiny' $mode $json -p '$p' >/dev/full"
            [ "$stderr" = "generate: stdout: write failed: No space left on device" ]
            run -4 --separate-stderr generate -m "$tiny" $mode $json -p "$p" -o "$FULL/out.txt"
            [ "$stderr" = "generate: '$FULL/out.txt': write failed: No space left on device" ]
            [ -z "$(ls "$FULL" | grep -v '^fill$')" ]
            run -4 --separate-stderr generate -m "$tiny" $mode $json -p "$p" -o /dev/full
            [ "$stderr" = "generate: '/dev/full': write failed: No space left on device" ]
        done
    done
}

@test "tokenize: usage errors" {
    local m="$VOCAB/ggml-vocab-gpt-2.gguf"
    run -2 --separate-stderr generate -m "$m" --tokenize --detokenize -p x
    [[ $stderr == *exclusive* ]]
    run -2 --separate-stderr generate -m "$m" --tokenize --temp 0 -p x
    [[ $stderr == *"take only"* ]]
    run -2 --separate-stderr generate -m "$m" --count --chat -p x
    run -2 --separate-stderr generate -m "$m" --no-bos -p x
    [[ $stderr == *"need --tokenize"* ]]
    run -2 --separate-stderr generate --tokenize -p x
    [[ $stderr == *"no model"* ]]
}
