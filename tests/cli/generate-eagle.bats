#!/usr/bin/env bats
# generate --draft-head: EAGLE-2 trees from a head (EAGLE-1 or EAGLE-3) made by draft-train; the
# output is plain decoding's, greedy and sampled (--spec-compare checks it
# and exits 6 otherwise); a head for another model or no head at all is
# refused; the option rules.

load common

FIX="$TOP/tests/fixtures/tiny-llama-f32.gguf"
FIX16="$TOP/tests/fixtures/tiny-llama-f16.gguf"
CALIB="$SHARED/data/calibration-groups-merged.txt"

setup_file() {
    [ -f "$FIX" ] || return 0
    head -c 12000 "$CALIB" > "$BATS_FILE_TMPDIR/text.txt"
    draft-train -m "$FIX" --data "$BATS_FILE_TMPDIR/text.txt" -o "$BATS_FILE_TMPDIR/head.gguf" \
        --epochs 2 --seq-len 32 -q
}

setup() {
    [ -f "$FIX" ] || skip "fixtures missing (make fixtures)"
    HEAD="$BATS_FILE_TMPDIR/head.gguf"
}

@test "generate --draft-head: greedy output equals plain decoding, chains and trees" {
    for w in 1 3; do
        for t in auto 6 12; do
            run -0 --separate-stderr generate -m "$FIX" -p "In addition to a significant" -n 40 \
                --temp 0 --draft-head "$HEAD" --spec-width $w --spec-depth 4 --spec-tokens $t \
                --spec-compare --json
            [ "$(jq -r .speculative.drafter <<<"$output")" = eagle ]
        done
    done
    run -0 --separate-stderr generate -m "$FIX" -p "In addition to a significant" -n 40 \
        --temp 0 --draft-head "$HEAD" --spec-width 4 --spec-tokens 12 --json
    [ "$(jq -r '.speculative.drafted > 0' <<<"$output")" = true ]
}

@test "generate --draft-head: an EAGLE-3 head drafts trees; output equals plain decoding" {
    H3="$BATS_FILE_TMPDIR/head3.gguf"
    [ -f "$H3" ] || draft-train -m "$FIX" --data "$BATS_FILE_TMPDIR/text.txt" -o "$H3" \
        --epochs 2 --seq-len 32 --arch eagle3 --ttt-steps 3 --draft-vocab 120 -q
    for w in 1 3; do
        for t in 6 12; do
            run -0 --separate-stderr generate -m "$FIX" -p "In addition to a significant" -n 40 \
                --temp 0 --draft-head "$H3" --spec-width $w --spec-depth 4 --spec-tokens $t \
                --spec-compare --json
            [ "$(jq -r .speculative.drafter <<<"$output")" = eagle3 ]
            [ "$(jq -r '.speculative.drafted > 0' <<<"$output")" = true ]
        done
    done
    for s in 1 2; do
        run -0 generate -m "$FIX" -p "The history of" -n 30 --temp 0.8 --seed $s \
            --draft-head "$H3" --spec-width 3 --spec-tokens 9 --spec-compare
    done
}

@test "generate --draft-head: sampled output equals plain decoding with the same seed" {
    for s in 1 2 3; do
        run -0 --separate-stderr generate -m "$FIX" -p "The river" -n 30 --temp 0.9 --top-p 0.95 \
            --seed $s --draft-head "$HEAD" --spec-width 3 --spec-tokens 9 --spec-compare
    done
}

@test "generate --draft-head: a head for another model, or no head, is refused (3)" {
    run -3 --separate-stderr generate -m "$FIX16" -p hi -n 2 --draft-head "$HEAD"
    [[ $stderr == *"trained for another model"* ]]
    run -3 --separate-stderr generate -m "$FIX" -p hi -n 2 --draft-head "$FIX"
    [[ $stderr == *"not an EAGLE head"* ]]
    printf 'GGUF' > "$BATS_TEST_TMPDIR/trunc.gguf"
    run -3 --separate-stderr generate -m "$FIX" -p hi -n 2 --draft-head "$BATS_TEST_TMPDIR/trunc.gguf"
    [ -z "$output" ]
}

@test "generate --draft-head: option rules" {
    run -2 --separate-stderr generate -m "$FIX" -p hi --draft-head "$HEAD" --lookup
    [[ $stderr == *"are exclusive"* ]]
    run -2 --separate-stderr generate -m "$FIX" --batch --draft-head "$HEAD" < /dev/null
    [[ $stderr == *"--draft-head works with one prompt"* ]]
    run -0 --separate-stderr generate -m "$FIX" -p hi -n 2 --draft-head "$HEAD" --spec-depth 2
}

@test "generate --draft-head on SmolLM2: greedy output equals plain decoding on held-out prompts" {
    need_model SMOL SmolLM2-135M-Instruct.Q4_1.gguf
    cd "$BATS_TEST_TMPDIR"
    head -c 6000 "$CALIB" > cal.txt
    run -0 draft-train -m "$SMOL" --data cal.txt -o smol.eagle.gguf --epochs 1 --seq-len 64 \
        --batch 2 -q
    # a wikitext-2 passage (never trained on) and a chat question
    python3 -c "
import re
t = open('$SHARED/data/wikitext-2-test.raw', encoding='utf-8').read()
print(' '.join(t.split()[300:420]))" > wiki.txt
    run -0 --separate-stderr generate -m "$SMOL" -f wiki.txt -n 48 --temp 0 \
        --draft-head smol.eagle.gguf --spec-width 3 --spec-depth 4 --spec-tokens 8 --spec-compare --json
    [ "$(jq -r '.speculative.drafted > 0' <<<"$output")" = true ]
    run -0 --separate-stderr generate -m "$SMOL" --chat -p "Why is the sky blue?" -n 48 --temp 0 \
        --draft-head smol.eagle.gguf --spec-width 2 --spec-tokens 6 --spec-compare
}

@test "generate --draft-head: a head with a draft vocabulary drafts from it, losslessly" {
    cd "$BATS_TEST_TMPDIR"
    run -0 draft-train -m "$FIX" --data "$BATS_FILE_TMPDIR/text.txt" -o dv.gguf --epochs 1 \
        --seq-len 32 --draft-vocab 40 -q
    n=$("$LLMKIT_CACHE/venv/bin/python" -c "
import sys, gguf
f = gguf.GGUFReader('dv.gguf').fields['eagle.draft_vocab']
print(len(f.data))")
    [ "$n" = 40 ]
    run -0 --separate-stderr generate -m "$FIX" -p "In addition to a significant" -n 40 \
        --temp 0 --draft-head dv.gguf --spec-width 3 --spec-tokens 9 --spec-compare --json
    [ "$(jq -r '.speculative.drafted > 0' <<<"$output")" = true ]
}
