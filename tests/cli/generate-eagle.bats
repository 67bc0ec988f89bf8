#!/usr/bin/env bats
# generate --draft-head: EAGLE-2 trees from a head (EAGLE-1 or EAGLE-3) made by draft-train; the
# output is plain decoding's, greedy and sampled (--spec-compare checks it
# and exits 6 otherwise), one prompt or a batch of concurrent requests; the
# confidence floor (--draft-p-min); heads for the real SmolLM2 and Gemma 3;
# a head for another model or no head at
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
    grep -q 'speculative (eagle): .*; auto draft size [0-9.]* per sequence and step' "$BATS_TEST_TMPDIR/stats"
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

# gemma_head ARCH OUT : a tiny head of ARCH (eagle1, eagle3) for the real
# gemma-3-270m ($GEMMA) in $BATS_FILE_TMPDIR/OUT, trained once per file on
# 3 KB of the calibration text over a draft vocabulary of 2048 tokens
gemma_head() {
    [ -f "$BATS_FILE_TMPDIR/$2" ] && return 0
    head -c 3000 "$CALIB" > "$BATS_FILE_TMPDIR/g3.txt"
    draft-train -m "$GEMMA" --data "$BATS_FILE_TMPDIR/g3.txt" -o "$BATS_FILE_TMPDIR/$2" \
        --arch "$1" --epochs 1 --seq-len 32 --draft-vocab 2048 -t 2 -q
}

# gemma_spec HEAD : on the real gemma-3-270m, greedy output with HEAD equals
# plain decoding: a tree, a chain, a prompt past the sliding window (512
# tokens) and three concurrent --batch requests
gemma_spec() {
    local h=$1
    run -0 --separate-stderr generate -m "$GEMMA" -p "The history of the city" -n 24 --temp 0 \
        --draft-head "$h" --spec-width 3 --spec-tokens 8 --spec-compare --json -t 2
    [ "$(jq -r '.speculative.drafted > 0' <<<"$output")" = true ]
    python3 -c "
t = open('$SHARED/data/wikitext-2-test.raw', encoding='utf-8').read()
print(' '.join(t.split()[1000:1540]))" > "$BATS_TEST_TMPDIR/long.txt"
    run -0 --separate-stderr generate -m "$GEMMA" -f "$BATS_TEST_TMPDIR/long.txt" -n 8 --temp 0 \
        --draft-head "$h" --spec-width 1 --spec-tokens 4 --spec-compare --json -t 2
    [ "$(jq -r '.prompt_tokens > 512' <<<"$output")" = true ]
    for i in 0 1 2; do
        jq -cn --arg p "$(cut -c $((1 + 80 * i))-$((160 + 80 * i)) "$BATS_TEST_TMPDIR/long.txt")" \
            --argjson n $((6 + 6 * i)) '{id: "g\($n)", prompt: $p, max_tokens: $n, temperature: 0}'
    done > "$BATS_TEST_TMPDIR/g3reqs.jsonl"
    HEAD=$h SPEC="--spec-tokens 4" eagle_batch -m "$GEMMA" --batch "$BATS_TEST_TMPDIR/g3reqs.jsonl" -t 2
    grep -q 'speculative (eagle3\{0,1\}): [0-9]* of [1-9][0-9]* drafts kept' "$BATS_TEST_TMPDIR/stats"
}

@test "generate --draft-head on Gemma 3: an EAGLE-1 head for the real gemma-3-270m keeps greedy output (tree, chain, past the sliding window, --batch)" {
    need_model GEMMA gemma-3-270m.Q4_K_M.gguf
    gemma_head eagle1 g3-eagle1.gguf
    gemma_spec "$BATS_FILE_TMPDIR/g3-eagle1.gguf"
}

@test "generate --draft-head on Gemma 3: an EAGLE-3 head for the real gemma-3-270m keeps greedy output (tree, chain, past the sliding window, --batch)" {
    need_model GEMMA gemma-3-270m.Q4_K_M.gguf
    gemma_head eagle3 g3-eagle3.gguf
    run -0 "$LLMKIT_CACHE/venv/bin/python" -c "
import gguf
r = gguf.GGUFReader('$BATS_FILE_TMPDIR/g3-eagle3.gguf')
f = r.fields
s = lambda k: bytes(f[k].parts[f[k].data[0]]).decode()
v = lambda k: f[k].parts[f[k].data[0]][0]
assert s('eagle3.base.architecture') == 'gemma3'
assert v('eagle3.rope.neox') and v('eagle3.rope.freq_base') == 1e6
assert v('eagle3.attention.key_length') == 256 and v('eagle3.attention.head_count_kv') == 1
assert [int(f['eagle3.feature_layers'].parts[i][0]) for i in f['eagle3.feature_layers'].data] == [2, 9, 15]
assert v('eagle3.draft_vocab_size') == 2048"
    gemma_spec "$BATS_FILE_TMPDIR/g3-eagle3.gguf"
}

@test "generate --draft-head: a head trained for SmolLM2 is refused for Gemma 3, and one for Gemma 3 for SmolLM2 (3)" {
    need_model GEMMA gemma-3-270m.Q4_K_M.gguf
    need_model SMOL SmolLM2-135M-Instruct.Q4_1.gguf
    gemma_head eagle3 g3-eagle3.gguf
    head -c 2000 "$CALIB" > "$BATS_TEST_TMPDIR/s.txt"
    draft-train -m "$SMOL" --data "$BATS_TEST_TMPDIR/s.txt" -o "$BATS_TEST_TMPDIR/smol.gguf" \
        --epochs 1 --seq-len 32 -q
    run -3 --separate-stderr generate -m "$GEMMA" -p hi -n 2 --draft-head "$BATS_TEST_TMPDIR/smol.gguf"
    [[ $stderr == *"smol.gguf': the head was trained for a llama model ("*"), not gemma3" ]]
    [ -z "$output" ]
    run -3 --separate-stderr generate -m "$SMOL" -p hi -n 2 --draft-head "$BATS_FILE_TMPDIR/g3-eagle3.gguf"
    [[ $stderr == *"g3-eagle3.gguf': the head was trained for a gemma3 model ('Gemma 3 270m'), not llama" ]]
    [ -z "$output" ]
}
