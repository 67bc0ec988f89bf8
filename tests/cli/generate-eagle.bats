#!/usr/bin/env bats
# generate --draft-head: EAGLE-2 trees from a head (EAGLE-1 or EAGLE-3) made by draft-train; the
# output is plain decoding's, greedy and sampled (--spec-compare checks it
# and exits 6 otherwise), one prompt or a batch of concurrent requests; the
# confidence floor (--draft-p-min); a head for another model or no head at
# all is refused; the option rules.

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
    run -2 --separate-stderr generate -m "$FIX" --batch --draft-head "$HEAD" --spec-width 2 < /dev/null
    [[ $stderr == *"--batch drafts chains of --spec-tokens"* ]]
    run -0 --separate-stderr generate -m "$FIX" -p hi -n 2 --draft-head "$HEAD" --spec-depth 2
}

@test "generate --draft-head --draft-p-min: the confidence floor prunes the tree" {
    local args=(-m "$FIX" -p "In addition to a significant" -n 24 --temp 0 --draft-head "$HEAD"
                --spec-width 3 --spec-tokens 9 --json)
    run -0 --separate-stderr generate "${args[@]}"
    local all; all=$(jq -r .speculative.drafted <<<"$output")
    [ "$all" -gt 0 ]
    # no path has probability 1: nothing is drafted, and the tokens stay
    run -0 --separate-stderr generate "${args[@]}" --draft-p-min 1 --spec-compare
    [ "$(jq -r .speculative.drafted <<<"$output")" = 0 ]
    run -0 --separate-stderr generate "${args[@]}" --draft-p-min 0.02 --spec-compare
    [ "$(jq -r .speculative.drafted <<<"$output")" -lt "$all" ]
}

# eagle_batch ARGS... : generate --batch ARGS gives the same results with the
# head (--draft-head HEAD, the extra options in SPEC) as without; the
# speculative run's statistics go to stats
eagle_batch() {
    generate -q "$@" > "$BATS_TEST_TMPDIR/plain.jsonl"
    generate -v "$@" --draft-head "$HEAD" $SPEC > "$BATS_TEST_TMPDIR/eagle.jsonl" \
        2> "$BATS_TEST_TMPDIR/stats"
    diff <(results_by_line "$BATS_TEST_TMPDIR/plain.jsonl") <(results_by_line "$BATS_TEST_TMPDIR/eagle.jsonl")
}

@test "generate --batch --draft-head: every request's tokens as without, concurrent and mixed lengths, with preemption and small steps" {
    mkreqs 40 "$BATS_TEST_TMPDIR/req.jsonl"
    jq -c 'if (.id | ltrimstr("r") | tonumber) % 3 == 1 then . + {temperature: 0.9, seed: 5} else . + {temperature: 0} end' \
        "$BATS_TEST_TMPDIR/req.jsonl" > "$BATS_TEST_TMPDIR/reqs.jsonl"
    SPEC="--spec-tokens 6" eagle_batch -m "$FIX" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2
    grep -q 'speculative (eagle): [0-9]* of [1-9][0-9]* drafts kept' "$BATS_TEST_TMPDIR/stats"
    grep -q ' 0 prefix-cache blocks reused' "$BATS_TEST_TMPDIR/stats"
    SPEC="--spec-tokens 3" eagle_batch -m "$FIX" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 \
        --kv-mem 64KiB --block-size 4 --max-seqs 8
    grep -q '[1-9][0-9]* preemptions' "$BATS_TEST_TMPDIR/stats"
    SPEC="--spec-tokens 4" eagle_batch -m "$FIX" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 \
        --kv-mem 64KiB --block-size 4 --max-seqs 8 --preempt swap
    SPEC="" eagle_batch -m "$FIX" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 --max-batch-tokens 12
    # the floor applies to the chains: at 1, nothing is drafted
    SPEC="--draft-p-min 1" eagle_batch -m "$FIX" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2
    grep -q 'speculative (eagle): 0 of 0 drafts' "$BATS_TEST_TMPDIR/stats"
    # an EAGLE-3 head (features captured by its hooks in the batch's forward pass)
    draft-train -m "$FIX" --data "$BATS_FILE_TMPDIR/text.txt" -o "$BATS_TEST_TMPDIR/h3.gguf" \
        --arch eagle3 --epochs 2 --seq-len 32 -q
    HEAD="$BATS_TEST_TMPDIR/h3.gguf" SPEC="--spec-tokens 4" eagle_batch -m "$FIX" \
        --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 --kv-mem 64KiB --block-size 4 --max-seqs 8
    grep -q 'speculative (eagle): [0-9]* of [1-9][0-9]* drafts kept' "$BATS_TEST_TMPDIR/stats"
    grep -q '[1-9][0-9]* preemptions' "$BATS_TEST_TMPDIR/stats"
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
    # four concurrent requests of mixed lengths, greedy: the tokens of plain --batch
    for i in 0 1 2 3; do
        jq -cn --arg p "$(cut -c $((1 + 60 * i))-$((200 + 60 * i)) wiki.txt)" \
            --argjson n $((8 + 16 * i)) '{id: "w\($n)", prompt: $p, max_tokens: $n, temperature: 0}'
    done > reqs.jsonl
    HEAD=smol.eagle.gguf SPEC="--spec-tokens 4" eagle_batch -m "$SMOL" --batch reqs.jsonl -t 2
    grep -q 'speculative (eagle): [1-9][0-9]* of [1-9][0-9]* drafts kept' "$BATS_TEST_TMPDIR/stats"
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
