#!/usr/bin/env bats
# generate --lookup: prompt lookup drafts verified in one forward pass; the
# output is plain decoding's, token for token (greedy and sampled), and the
# statistics say what was drafted and kept.  --device: cpu, and cuda refused
# with exit 5 where no GPU is usable.

load common

TINY="$TOP/tests/fixtures/tiny-llama-f32.gguf"
GOLD="$TOP/tests/golden/generate"

# same_tokens ARGS... : generate --json with ARGS, plain and with the
# speculative options in SPEC, gives the same tokens; the speculative run's
# statistics are consistent (it is kept in last.json)
same_tokens() {
    local plain look
    plain=$(generate --json -q "$@" | jq -c .tokens)
    look=$(generate --json -q "$@" $SPEC)
    [ "$plain" = "$(jq -c .tokens <<<"$look")" ] ||
        { echo "plain $plain"; echo "lookup $(jq -c .tokens <<<"$look")"; return 1; }
    jq -e '(.speculative.drafter == "lookup" or .speculative.drafter == "draft")
           and .speculative.accepted <= .speculative.drafted
           and .speculative.verify_passes >= 0
           and (.completion_tokens == 0 or .speculative.verify_passes <= .completion_tokens)' \
        <<<"$look" >/dev/null
    echo "$look" > "$BATS_TEST_TMPDIR/last.json"
}

@test "tiny model: --lookup gives plain decoding's tokens, greedy and sampled, every draft size" {
    local p="one two three one two three one two three one two"
    SPEC="--lookup" same_tokens -m "$TINY" -p "$p" -n 48 --temp 0
    # the prompt repeats: something was drafted (a fixed size: auto's depends on timings)
    SPEC="--lookup --spec-tokens 8" same_tokens -m "$TINY" -p "$p" -n 48 --temp 0
    jq -e '.speculative.drafted > 0' "$BATS_TEST_TMPDIR/last.json"
    for seed in 1 2 3; do
        SPEC="--lookup --spec-tokens 3 --lookup-ngram 1" same_tokens -m "$TINY" -p "$p" -n 48 --seed "$seed" \
            --repeat-penalty 1.2
        SPEC="--lookup --spec-tokens 64" same_tokens -m "$TINY" -p "$p" -n 40 --seed "$seed" --temp 1.5 --top-k 0
    done
    # -n and the context bound the drafts: exactly -n tokens, and the context's worth
    SPEC="--lookup" same_tokens -m "$TINY" -p "$p" -n 5 --temp 0 --ignore-eos
    jq -e '.completion_tokens == 5' "$BATS_TEST_TMPDIR/last.json"
    SPEC="--lookup" same_tokens -m "$TINY" -p "$p" --ctx 40 --temp 0 --ignore-eos
    jq -e '.completion_tokens + .prompt_tokens == 40' "$BATS_TEST_TMPDIR/last.json"
}

@test "tiny model: streamed --lookup text equals plain text, to a pipe and to a file" {
    local p="a b c d a b c d a b c"
    generate -m "$TINY" -p "$p" -n 40 --temp 0 -q > "$BATS_TEST_TMPDIR/plain"
    generate -m "$TINY" -p "$p" -n 40 --temp 0 -q --lookup | cat > "$BATS_TEST_TMPDIR/look"
    cmp "$BATS_TEST_TMPDIR/plain" "$BATS_TEST_TMPDIR/look"
    generate -m "$TINY" -p "$p" -n 40 --temp 0 -q --lookup -o "$BATS_TEST_TMPDIR/look2"
    cmp "$BATS_TEST_TMPDIR/plain" "$BATS_TEST_TMPDIR/look2"
}

@test "SmolLM2: --lookup reproduces plain greedy decoding on every prompt of the greedy goldens, and sampled decoding" {
    not_under_sanitizer
    local m n ci prompt
    need_model m SmolLM2-135M-Instruct.Q4_1.gguf
    n=$(jq '.cases | length' "$GOLD/smollm2-greedy.json")
    for ci in $(seq 0 $((n - 1))); do
        prompt=$(jq -j ".cases[$ci].prompt" "$GOLD/smollm2-greedy.json"; printf x)
        prompt=${prompt%x}
        SPEC="--lookup" same_tokens -m "$m" -p "$prompt" --temp 0 -n 64 --ctx 512 -t 2
    done
    prompt="List the numbers 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, then list them again: 1, 2,"
    SPEC="--lookup" same_tokens -m "$m" -p "$prompt" --temp 0 -n 40 -t 2
    # a repetitive continuation: several tokens per pass (a fixed draft size: auto's
    # choice depends on the measured timings)
    SPEC="--lookup --spec-tokens 8" same_tokens -m "$m" -p "$prompt" --temp 0 -n 40 -t 2
    jq -e '.speculative.accepted > 10 and .speculative.accept_len > 2' "$BATS_TEST_TMPDIR/last.json"
    for seed in 7 8; do
        SPEC="--lookup --spec-tokens 5" same_tokens -m "$m" -p "$prompt" -n 40 --seed "$seed" -t 2
    done
}

@test "--lookup options: usage errors" {
    run -2 --separate-stderr generate -m "$TINY" -p x --spec-tokens 4
    [[ "$stderr" == *'need --lookup'* ]]
    run -2 --separate-stderr generate -m "$TINY" -p x --draft "$TINY" --lookup-ngram 2
    [[ "$stderr" == *'--lookup-ngram needs --lookup'* ]]
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --lookup-ngram 0
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --spec-tokens 65
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --spec-tokens -1
    run -2 --separate-stderr generate -m "$TINY" --draft "$TINY" --spec-depth 4 --batch /dev/null
    [[ "$stderr" == *'--batch drafts chains of --spec-tokens'* ]]
    run -2 --separate-stderr generate -m "$TINY" --draft "$TINY" --perplexity /dev/null
    [[ "$stderr" == *'--draft and --draft-head do not go with --perplexity'* ]]
    run -2 --separate-stderr generate -m "$TINY" --lookup --spec-compare --batch /dev/null
    run -2 --separate-stderr generate -m "$TINY" --lookup --perplexity /dev/null
}

@test "--device: cpu runs; cuda exits 5 with the reason where no GPU is usable; unknown is a usage error" {
    local a b
    a=$(generate -m "$TINY" -p "hello" -n 8 --temp 0 -q)
    b=$(generate -m "$TINY" -p "hello" -n 8 --temp 0 -q --device cpu)
    [ "$a" = "$b" ]
    run --separate-stderr generate -m "$TINY" -p "hello" -n 8 --temp 0 -q --device cuda
    if [ "$status" -eq 0 ]; then
        # a machine with a GPU (tests/kernels/test_cuda.c and scripts/gpu-check
        # compare it with the CPU): it generated the 8 tokens
        [ -n "$output" ]
    else
        [ "$status" -eq 5 ]
        [[ "$stderr" == *'--device cuda: '* ]]
        [ "$(wc -l <<<"$stderr")" -eq 1 ]
        [ -z "$output" ]
    fi
    run -2 --separate-stderr generate -m "$TINY" -p "hello" --device tpu
    [[ "$stderr" == *"unknown device 'tpu'"* ]]
}

# mkvocab OUT : the tiny fixture with token 100's text changed (same length,
# so every offset stays), written from the GGUF byte layout
mkvocab() {
    python3 - "$TINY" "$1" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
key = b"tokenizer.ggml.tokens"
p = b.index(key) + len(key)
typ, et = struct.unpack_from("<II", b, p)
assert typ == 9 and et == 8
n = struct.unpack_from("<Q", b, p + 8)[0]
p += 16
for i in range(n):
    ln = struct.unpack_from("<Q", b, p)[0]
    if i == 100:
        b[p + 8 + ln - 1] = 0x7f
        break
    p += 8 + ln
open(sys.argv[2], "wb").write(b)
PY
}

@test "tiny model: --draft (the model itself, its f16 twin, trees of width 1-4) gives plain decoding's tokens" {
    local p="one two three one two three one two" f16="$TOP/tests/fixtures/tiny-llama-f16.gguf"
    for w in 1 2 4; do
        SPEC="--draft $TINY --spec-width $w --spec-tokens 12 --draft-p-min 0" same_tokens -m "$TINY" -p "$p" -n 40 --temp 0
        jq -e '.speculative.drafter == "draft" and .speculative.drafted > 0' "$BATS_TEST_TMPDIR/last.json"
        SPEC="--draft $f16 --spec-width $w --draft-p-min 0" same_tokens -m "$TINY" -p "$p" -n 40 \
            --seed 3 --temp 1.2 --top-k 0
    done
    # the model drafting for itself, greedy: every draft is kept
    SPEC="--draft $TINY --draft-p-min 0" same_tokens -m "$TINY" -p "$p" -n 30 --temp 0 --ignore-eos
    jq -e '.speculative.accepted == .speculative.drafted' "$BATS_TEST_TMPDIR/last.json"
    SPEC="--draft $TINY --spec-depth 2 --spec-width 3 --spec-tokens 5" same_tokens -m "$TINY" -p "$p" -n 30 \
        --seed 9
}

@test "--draft: a different vocabulary is refused, naming the token; usage errors" {
    mkvocab "$BATS_TEST_TMPDIR/v.gguf"
    run -3 --separate-stderr generate -m "$TINY" -p "one two" -n 4 --draft "$BATS_TEST_TMPDIR/v.gguf"
    [[ "$stderr" == *"v.gguf': the draft's vocabulary differs from the target's at token 100"* ]]
    run -3 --separate-stderr generate -m "$TINY" -p "one" --draft "$TOP/tests/fixtures/tiny-spm-f32.gguf"
    [[ "$stderr" == *"vocabulary has 279 tokens, the target's 281"* ]]
    run -4 --separate-stderr generate -m "$TINY" -p "one" --draft "$BATS_TEST_TMPDIR/none.gguf"
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --draft "$TINY"
    [[ "$stderr" == *'exclusive'* ]]
    run -2 --separate-stderr generate -m "$TINY" -p x --spec-width 2
    [[ "$stderr" == *'need --draft'* ]]
    run -2 --separate-stderr generate -m "$TINY" -p x --draft "$TINY" --spec-width 17
    run -2 --separate-stderr generate -m "$TINY" -p x --draft "$TINY" --draft-p-min 1.5
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --draft "$TINY" --spec-width 2
    # the draft may not be the output
    run -2 --separate-stderr generate -m "$TINY" -p x --draft "$BATS_TEST_TMPDIR/v.gguf" \
        -o "$BATS_TEST_TMPDIR/v.gguf" --force
}

@test "SmolLM2: self-speculation (a Q2_K draft of the Q4_1 model), chains and trees, reproduces plain decoding; a tree over a context past the split-KV threshold too" {
    not_under_sanitizer
    local m d n ci prompt
    need_model m SmolLM2-135M-Instruct.Q4_1.gguf
    d=$BATS_TEST_TMPDIR/q2k.gguf
    run -0 quantize -q "$m" "$d" --type Q2_K
    n=$(jq '.cases | length' "$GOLD/smollm2-greedy.json")
    for ci in 0 3 6 9; do
        prompt=$(jq -j ".cases[$ci].prompt" "$GOLD/smollm2-greedy.json"; printf x)
        prompt=${prompt%x}
        SPEC="--draft $d" same_tokens -m "$m" -p "$prompt" --temp 0 -n 48 --ctx 512 -t 2
        SPEC="--draft $d --spec-width 3 --spec-tokens 12" same_tokens -m "$m" -p "$prompt" --temp 0 \
            -n 48 --ctx 512 -t 2
    done
    # 560+ tokens of context: the tree's masked rows are split in chunks of visible slots
    python3 -c "print(' '.join(['The cat sat on the mat.'] * 80))" > "$BATS_TEST_TMPDIR/long"
    SPEC="--draft $d --spec-width 3 --spec-tokens 12 --draft-p-min 0" same_tokens -m "$m" \
        -f "$BATS_TEST_TMPDIR/long" --temp 0 -n 40 --ignore-eos -t 2
    jq -e '.prompt_tokens > 520 and .speculative.accepted > 0' "$BATS_TEST_TMPDIR/last.json"
    SPEC="--draft $d --spec-width 2" same_tokens -m "$m" -p "Once upon a time" -n 40 --seed 11 -t 2
}

@test "--spec-tokens auto (the default) measures the verify cost and reports its choice; --spec-compare checks the tokens and reports the speedup" {
    local p="one two three one two three one two three"
    generate -m "$TINY" -p "$p" -n 24 --temp 0 --lookup --json -q > "$BATS_TEST_TMPDIR/a.json"
    jq -e '.speculative.budget == "auto" and (.speculative.verify_cost_ms | has("1") and has("2"))
           and (.speculative.verify_slot_ms | type == "number" and . >= 0)
           and .speculative.mean_levels >= 0 and .speculative.mean_levels <= 16
           and .speculative.accept_len >= 1' "$BATS_TEST_TMPDIR/a.json"
    generate -m "$TINY" -p "$p" -n 24 --temp 0 --lookup --spec-tokens 4 --json -q > "$BATS_TEST_TMPDIR/b.json"
    jq -e '.speculative.budget == 4 and (.speculative | has("verify_cost_ms") | not)' "$BATS_TEST_TMPDIR/b.json"
    run -0 --separate-stderr generate -m "$TINY" -p "$p" -n 24 --seed 4 --draft "$TINY" --spec-compare --json
    jq -e '.speculative.plain_tok_s > 0 and .speculative.speedup > 0' <<<"$output"
    run -0 --separate-stderr generate -m "$TINY" -p "$p" -n 24 --seed 4 --lookup --spec-compare
    [[ "$stderr" == *'the same tokens: speedup'* ]]
    [[ "$stderr" == *'speculative (lookup): '* ]]
    run -2 --separate-stderr generate -m "$TINY" -p x --spec-compare
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --spec-tokens automatic
}

@test "--spec-compare --json: plain_tok_s and speedup always there, null when one token left nothing to time" {
    local p="1 2 3 1 2 3 1 2"
    run -0 --separate-stderr generate -m "$TINY" -q --temp 0 -n 1 -p "$p" --lookup --spec-compare --json
    jq -e '.speculative | has("plain_tok_s") and has("speedup") and .plain_tok_s == null
           and .speedup == null' <<<"$output"
    run -0 --separate-stderr generate -m "$TINY" --temp 0 -n 1 -p "$p" --lookup --spec-compare
    [[ "$stderr" == *'plain decoding: the same tokens; no decoding step to time'* ]]
    run -0 --separate-stderr generate -m "$TINY" -q --temp 0 -n 8 --ignore-eos -p "$p" --lookup \
        --spec-compare --json
    jq -e '.speculative.plain_tok_s > 0 and .speculative.speedup > 0' <<<"$output"
    # without --spec-compare, neither key
    run -0 --separate-stderr generate -m "$TINY" -q --temp 0 -n 8 -p "$p" --lookup --json
    jq -e '.speculative | has("plain_tok_s") or has("speedup") | not' <<<"$output"
}

@test "sampled speculative output follows the target's distribution: chi-square of 1500 seeded draws against a numpy forward pass" {
    not_under_sanitizer
    local PY="${LLMKIT_CACHE}/venv/bin/python" prompt s
    if ! "$PY" -c 'import gguf, numpy' 2>/dev/null; then
        [ "${CI:-}" != true ] || { echo "no venv at $PY (scripts/pyenv)"; return 1; }
        skip "no Python venv with gguf and numpy (run scripts/pyenv)"
    fi
    prompt=$(generate -m "$TINY" -p "one two three" -n 1 --temp 0 --json -q | jq -c .prompt_token_ids)
    # the second token comes from a verify pass of a tree of 3 draft tokens
    for s in $(seq 1 1500); do
        generate -m "$TINY" -p "one two three" -n 5 --seed "$s" --temp 0.3 --top-k 0 --top-p 1 \
            --min-p 0 --draft "$TINY" --spec-width 3 --spec-tokens 3 --draft-p-min 0 --ignore-eos \
            --json -q | jq -c .tokens
    done > "$BATS_TEST_TMPDIR/draws"
    "$PY" "$TOP/tests/cli/lib/spec_chi2.py" "$TINY" "$BATS_TEST_TMPDIR/draws" "$prompt" 0.3 >&3
    # the control: the first token's draws are not distributed as the second's
    run -1 "$PY" "$TOP/tests/cli/lib/spec_chi2.py" "$TINY" "$BATS_TEST_TMPDIR/draws" "$prompt" 0.3 0
}

# batch_same ARGS... : generate --batch with ARGS gives the same results with
# the drafter DRAFTER (default --lookup; the extra options in SPEC) as
# without; the speculative run's statistics line goes to stats
batch_same() {
    generate -q -m "$@" > "$BATS_TEST_TMPDIR/plain.jsonl"
    generate -v -m "$@" ${DRAFTER:---lookup} $SPEC > "$BATS_TEST_TMPDIR/look.jsonl" \
        2> "$BATS_TEST_TMPDIR/stats"
    diff <(results_by_line "$BATS_TEST_TMPDIR/plain.jsonl") <(results_by_line "$BATS_TEST_TMPDIR/look.jsonl")
}

@test "--batch --lookup: every request's tokens as without, with preemption (recompute, swap), small steps and a prefix cache" {
    local f16="$TOP/tests/fixtures/tiny-llama-f16.gguf"
    mkreqs 64 "$BATS_TEST_TMPDIR/req.jsonl"
    # half of the requests sampled, with their own seeds
    jq -c 'if (.id | ltrimstr("r") | tonumber) % 2 == 1 then . + {temperature: 0.9, seed: 5} else . + {temperature: 0} end' \
        "$BATS_TEST_TMPDIR/req.jsonl" > "$BATS_TEST_TMPDIR/reqs.jsonl"
    SPEC="--spec-tokens 6" batch_same "$f16" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2
    grep -q 'speculative (lookup): [0-9]* of [1-9][0-9]* drafts kept' "$BATS_TEST_TMPDIR/stats"
    SPEC="" batch_same "$f16" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 --kv-mem 64KiB --block-size 4 \
        --max-seqs 8
    grep -q '[1-9][0-9]* preemptions' "$BATS_TEST_TMPDIR/stats"
    SPEC="--spec-tokens 3 --lookup-ngram 1" batch_same "$f16" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 \
        --kv-mem 64KiB --block-size 4 --max-seqs 8 --preempt swap
    SPEC="--spec-tokens 8" batch_same "$f16" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 --max-batch-tokens 12
}

@test "SmolLM2 --batch --lookup: the same tokens as without, pools that preempt included" {
    not_under_sanitizer
    local m
    need_model m SmolLM2-135M-Instruct.Q4_1.gguf
    for i in $(seq 0 11); do
        printf '{"id": "r%d", "prompt": "List the numbers 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, then list them again: 1, 2, %d", "max_tokens": %d, "temperature": %s, "seed": %d}\n' \
            "$i" "$i" $((10 + 5 * i)) "$([ $((i % 2)) = 0 ] && echo 0 || echo 0.8)" "$i"
    done > "$BATS_TEST_TMPDIR/reqs.jsonl"
    # auto: whether drafts pay depends on the machine's verify cost curve
    SPEC="" batch_same "$m" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2
    grep -q 'speculative (lookup): .*; auto draft size [0-9.]* per sequence and step, verify cost [0-9.]* ms per token and slot' "$BATS_TEST_TMPDIR/stats"
    SPEC="--spec-tokens 8" batch_same "$m" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 --kv-mem 2MiB \
        --max-seqs 12 --block-size 4
    grep -q '[1-9][0-9]* preemptions' "$BATS_TEST_TMPDIR/stats"
    grep -q 'speculative (lookup): [1-9][0-9]* of' "$BATS_TEST_TMPDIR/stats"
}

@test "--batch --draft: every request's tokens as without (the model itself and its f16 twin as drafts), with preemption, small steps and a prefix cache" {
    local f16="$TOP/tests/fixtures/tiny-llama-f16.gguf"
    mkreqs 64 "$BATS_TEST_TMPDIR/req.jsonl"
    jq -c 'if (.id | ltrimstr("r") | tonumber) % 2 == 1 then . + {temperature: 0.9, seed: 5} else . + {temperature: 0} end' \
        "$BATS_TEST_TMPDIR/req.jsonl" > "$BATS_TEST_TMPDIR/reqs.jsonl"
    DRAFTER="--draft $TINY" SPEC="--spec-tokens 6 --draft-p-min 0" batch_same "$f16" \
        --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2
    grep -q 'speculative (draft): [1-9][0-9]* of [1-9][0-9]* drafts kept' "$BATS_TEST_TMPDIR/stats"
    DRAFTER="--draft $f16" SPEC="--draft-p-min 0 --spec-tokens 4" batch_same "$f16" \
        --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 --kv-mem 64KiB --block-size 4 --max-seqs 8
    grep -q '[1-9][0-9]* preemptions' "$BATS_TEST_TMPDIR/stats"
    grep -q 'speculative (draft): [1-9][0-9]* of' "$BATS_TEST_TMPDIR/stats"
    # auto (the size chosen from the cost curve: tokens unchanged whatever it is)
    DRAFTER="--draft $f16" SPEC="--draft-p-min 0" batch_same "$f16" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 \
        --kv-mem 64KiB --block-size 4 --max-seqs 8
    grep -q 'speculative (draft): .*; auto draft size' "$BATS_TEST_TMPDIR/stats"
    DRAFTER="--draft $TINY" SPEC="--spec-tokens 3" batch_same "$f16" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" \
        -t 2 --kv-mem 64KiB --block-size 4 --max-seqs 8 --preempt swap
    DRAFTER="--draft $TINY" SPEC="--spec-tokens 8" batch_same "$f16" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" \
        -t 2 --max-batch-tokens 12 --no-prefix-cache
}

@test "SmolLM2 --batch --draft (its Q2_K self-draft): the same tokens as without, a pool that preempts included" {
    not_under_sanitizer
    local m d
    need_model m SmolLM2-135M-Instruct.Q4_1.gguf
    d=$BATS_TEST_TMPDIR/q2k.gguf
    run -0 quantize -q "$m" "$d" --type Q2_K
    for i in $(seq 0 7); do
        printf '{"id": "r%d", "prompt": "Write one sentence about the number %d.", "max_tokens": %d, "temperature": %s, "seed": %d}\n' \
            "$i" "$i" $((10 + 4 * i)) "$([ $((i % 2)) = 0 ] && echo 0 || echo 0.8)" "$i"
    done > "$BATS_TEST_TMPDIR/reqs.jsonl"
    DRAFTER="--draft $d" SPEC="" batch_same "$m" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2
    grep -q 'speculative (draft): .*; auto draft size' "$BATS_TEST_TMPDIR/stats"
    DRAFTER="--draft $d" SPEC="--spec-tokens 4" batch_same "$m" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2
    grep -q 'speculative (draft): [1-9][0-9]* of' "$BATS_TEST_TMPDIR/stats"
    DRAFTER="--draft $d" SPEC="--spec-tokens 6" batch_same "$m" --batch "$BATS_TEST_TMPDIR/reqs.jsonl" -t 2 \
        --kv-mem 1MiB --max-seqs 8 --block-size 4
    grep -q '[1-9][0-9]* preemptions' "$BATS_TEST_TMPDIR/stats"
}

@test "Gemma 3: a draft tree verified past the 512-token sliding window (the window counts from each node's position) gives plain decoding's tokens" {
    not_under_sanitizer
    local m
    need_model m gemma-3-270m.Q4_K_M.gguf
    python3 -c "print(' '.join(['The cat sat on the mat and looked at the red ball.'] * 50))" > "$BATS_TEST_TMPDIR/long"
    SPEC="--draft $m --spec-width 3 --spec-tokens 12 --draft-p-min 0" same_tokens -m "$m" \
        -f "$BATS_TEST_TMPDIR/long" --temp 0 -n 24 --ignore-eos -t 2
    jq -e '.prompt_tokens > 560 and .speculative.accepted > 0' "$BATS_TEST_TMPDIR/last.json"
    SPEC="--lookup --spec-tokens 8" same_tokens -m "$m" -f "$BATS_TEST_TMPDIR/long" --temp 0 -n 24 \
        --ignore-eos -t 2
}
