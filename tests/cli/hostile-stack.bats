#!/usr/bin/env bats
# The tools under a small stack limit (ulimit -s).  glibc sizes a thread's
# stack by RLIMIT_STACK and carves the thread's static TLS (about 1.5 MiB of
# kernel tiles) out of it: under `ulimit -s 1024` or less the pool's workers
# were left a few KiB and crashed with SIGSEGV in their first attention call
# (generate on SmolLM2 with -t 2 and --batch, tested here; also --draft-head
# and quantize --method gptq).  The workers now take a stack of their own size
# (threadpool.c).  --oversubscribe: -t 2 starts a worker on one CPU too.

load common

# greedy text of "$@" with the stack limited to $1 KiB
at_stack() {
    local kib=$1
    shift
    bash -c 'ulimit -s "$1" || exit 99; shift; exec "$@"' at_stack "$kib" "$@"
}

@test "generate with two threads under ulimit -s 256 and 1024: the unlimited run's tokens" {
    need_model M SmolLM2-135M-Instruct.Q4_1.gguf
    run -0 generate -m "$M" -p "The history of the city of London" -n 24 -t 2 --oversubscribe --temp 0 -q
    want=$output
    for kib in 256 1024; do
        run at_stack "$kib" generate -m "$M" -p "The history of the city of London" -n 24 -t 2 --oversubscribe --temp 0 -q
        [ "$status" -eq 0 ] || { echo "ulimit -s $kib: exit $status: $output"; return 1; }
        [ "$output" = "$want" ] || { echo "ulimit -s $kib: other text: $output"; return 1; }
    done
}

@test "generate --batch with two threads under ulimit -s 256: every request answered" {
    need_model M SmolLM2-135M-Instruct.Q4_1.gguf
    printf 'The sky is\nOnce upon a time\nThe capital of France is\n' > "$BATS_TEST_TMPDIR/p.txt"
    run -0 generate -m "$M" --batch "$BATS_TEST_TMPDIR/p.txt" -n 12 -t 2 --oversubscribe --temp 0 -q
    want=$output
    run at_stack 256 generate -m "$M" --batch "$BATS_TEST_TMPDIR/p.txt" -n 12 -t 2 --oversubscribe --temp 0 -q
    [ "$status" -eq 0 ] || { echo "exit $status: $output"; return 1; }
    [ "$(printf '%s\n' "$output" | grep -c '"type":"completion"')" -eq 3 ] ||
        { echo "not 3 results: $output"; return 1; }
    [ "$(printf '%s\n' "$output" | jq -c '.tokens')" = "$(printf '%s\n' "$want" | jq -c '.tokens')" ]
}
