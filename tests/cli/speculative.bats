#!/usr/bin/env bats
# generate --lookup: prompt lookup drafts verified in one forward pass; the
# output is plain decoding's, token for token (greedy and sampled), and the
# statistics say what was drafted and kept.  --device: cpu, and cuda refused
# with exit 5 until the CUDA backend exists.

load common

TINY="$TOP/tests/fixtures/tiny-llama-f32.gguf"
GOLD="$TOP/tests/golden/generate"

# same_tokens ARGS... : generate --json with ARGS, plain and with --lookup
# (and the extra options in SPEC), gives the same tokens; the lookup run's
# statistics are consistent
same_tokens() {
    local plain look
    plain=$(generate --json -q "$@" | jq -c .tokens)
    look=$(generate --json -q "$@" --lookup $SPEC)
    [ "$plain" = "$(jq -c .tokens <<<"$look")" ] ||
        { echo "plain $plain"; echo "lookup $(jq -c .tokens <<<"$look")"; return 1; }
    jq -e '.speculative.drafter == "lookup" and .speculative.accepted <= .speculative.drafted
           and .speculative.verify_passes >= 0
           and (.completion_tokens == 0 or .speculative.verify_passes <= .completion_tokens)' \
        <<<"$look" >/dev/null
    echo "$look" > "$BATS_TEST_TMPDIR/last.json"
}

@test "tiny model: --lookup gives plain decoding's tokens, greedy and sampled, every draft size" {
    local p="one two three one two three one two three one two"
    SPEC="" same_tokens -m "$TINY" -p "$p" -n 48 --temp 0
    # the prompt repeats: something was drafted
    jq -e '.speculative.drafted > 0' "$BATS_TEST_TMPDIR/last.json"
    for seed in 1 2 3; do
        SPEC="--spec-tokens 3 --lookup-ngram 1" same_tokens -m "$TINY" -p "$p" -n 48 --seed "$seed" \
            --repeat-penalty 1.2
        SPEC="--spec-tokens 64" same_tokens -m "$TINY" -p "$p" -n 40 --seed "$seed" --temp 1.5 --top-k 0
    done
    # -n and the context bound the drafts: exactly -n tokens, and the context's worth
    SPEC="" same_tokens -m "$TINY" -p "$p" -n 5 --temp 0 --ignore-eos
    jq -e '.completion_tokens == 5' "$BATS_TEST_TMPDIR/last.json"
    SPEC="" same_tokens -m "$TINY" -p "$p" --ctx 40 --temp 0 --ignore-eos
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
        SPEC="" same_tokens -m "$m" -p "$prompt" --temp 0 -n 64 --ctx 512 -t 2
    done
    prompt="List the numbers 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, then list them again: 1, 2,"
    SPEC="" same_tokens -m "$m" -p "$prompt" --temp 0 -n 40 -t 2
    # a repetitive continuation: most drafts are kept, several tokens per pass
    jq -e '.speculative.accepted > 10 and .speculative.acceptance > 0.5' "$BATS_TEST_TMPDIR/last.json"
    for seed in 7 8; do
        SPEC="--spec-tokens 5" same_tokens -m "$m" -p "$prompt" -n 40 --seed "$seed" -t 2
    done
}

@test "--lookup options: usage errors" {
    run -2 --separate-stderr generate -m "$TINY" -p x --spec-tokens 4
    [[ "$stderr" == *'need --lookup'* ]]
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --lookup-ngram 0
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --spec-tokens 65
    run -2 --separate-stderr generate -m "$TINY" -p x --lookup --spec-tokens -1
    run -2 --separate-stderr generate -m "$TINY" --lookup --batch /dev/null
    [[ "$stderr" == *'not with --batch'* ]]
    run -2 --separate-stderr generate -m "$TINY" --lookup --perplexity /dev/null
}

@test "--device: cpu runs; cuda exits 5 with the reason until the CUDA backend exists; unknown is a usage error" {
    local a b
    a=$(generate -m "$TINY" -p "hello" -n 8 --temp 0 -q)
    b=$(generate -m "$TINY" -p "hello" -n 8 --temp 0 -q --device cpu)
    [ "$a" = "$b" ]
    run -5 --separate-stderr generate -m "$TINY" -p "hello" -n 8 --device cuda
    [[ "$stderr" == *'--device cuda: '* ]]
    [ "$(wc -l <<<"$stderr")" -eq 1 ]
    [ -z "$output" ]
    run -2 --separate-stderr generate -m "$TINY" -p "hello" --device tpu
    [[ "$stderr" == *"unknown device 'tpu'"* ]]
}
