#!/usr/bin/env bats
# generate --batch: options, request lines (JSON and plain text, bad lines),
# results, the same tokens batched as alone (64 requests, also with a KV
# budget that forces preemption by recompute and by swap), prefix caching,
# the KV trace read by kvstat, atomic -o, SIGTERM and SIGPIPE, and SmolLM2.

load common

TINY="$TOP/tests/fixtures/tiny-llama-f16.gguf"

# alone_tokens REQS OUT : each request run on its own with generate -p
alone_tokens() {
    while IFS= read -r line; do
        id=$(jq -r .id <<<"$line")
        p=$(jq -r .prompt <<<"$line")
        n=$(jq -r .max_tokens <<<"$line")
        generate -q -m "$TINY" --temp 0 -n "$n" --json -p "$p" |
            jq -c --arg id "$id" '{id: $id, tokens: .tokens}'
    done <"$1" | sort >"$2"
}

batch_tokens() {
    jq -c '{id: .id, tokens: .tokens}' "$1" | sort
}

@test "--help documents --batch; batch usage errors exit 2" {
    run -0 generate --help
    assert_output --partial "--batch [FILE|-]"
    assert_output --partial "--kv-trace FILE"
    run -2 --separate-stderr generate -m "$TINY" --max-seqs 4 -p hi
    [[ "$stderr" == *"need --batch"* ]]
    run -2 --separate-stderr generate -m "$TINY" --batch -p hi
    [[ "$stderr" == *"--batch takes no -p"* ]]
    run -2 --separate-stderr generate -m "$TINY" --batch --kv-type q4_0 /dev/null
    [[ "$stderr" == *"--kv-type"* ]]
    run -2 --separate-stderr generate -m "$TINY" --batch --schedule fifo /dev/null
    run -2 --separate-stderr generate -m "$TINY" --batch --preempt drop /dev/null
    run -2 --separate-stderr generate -m "$TINY" --batch --max-seqs 0 /dev/null
    run -2 --separate-stderr generate -m "$TINY" --batch a b
    [[ "$stderr" == *"unexpected operand 'b'"* ]]
    run -2 --separate-stderr generate -m "$TINY" --batch --kv-trace - /dev/null
}

@test "a missing request file exits 4 before the model loads" {
    run -4 --separate-stderr generate -m /nonexistent.gguf --batch "$BATS_TEST_TMPDIR/none.jsonl"
    [[ "$stderr" == *"none.jsonl"* ]]
}

@test "JSON and plain-text lines; a bad line is an error result and the rest go on" {
    cd "$BATS_TEST_TMPDIR"
    printf '%s\n' 'first plain prompt' \
        '{"id": "j", "prompt": "the cat", "max_tokens": 4, "temperature": 0}' \
        '{"id": 9, "tokens": [5, 6, 7], "max_tokens": 3}' \
        '{not json' '' \
        '{"prompt": "x", "tokens": [1]}' \
        '{"id": [1], "prompt": "x"}' \
        '{"id": "big", "tokens": [999999]}' \
        '{"id": "t", "prompt": "x", "temperature": -1}' \
        '{"id": "z", "prompt": "x", "max_tokens": 0}' \
        'last plain prompt' >req.jsonl
    run -1 --separate-stderr generate -m "$TINY" --batch req.jsonl -n 5 --temp 0
    [ "$(grep -c . <<<"$output")" -eq 10 ]
    # every line is a generate/1 object; ids echoed with their JSON type
    jq -e -s 'all(.schema == "generate/1")' <<<"$output"
    jq -e -s 'map(select(.id == 1 and .type == "completion")) | length == 1' <<<"$output"
    jq -e -s 'map(select(.id == 11 and .type == "completion")) | length == 1' <<<"$output"
    jq -e -s 'map(select(.id == "j")) | .[0] | .completion_tokens <= 4 and (.tokens | length) == .completion_tokens' <<<"$output"
    jq -e -s 'map(select(.id == 9)) | .[0].prompt_tokens == 3' <<<"$output"
    jq -e -s 'map(select(.id == "z")) | .[0] | .completion_tokens == 0 and .finish_reason == "length"' <<<"$output"
    # errors: line numbers, ids where readable, and messages
    jq -e -s '[.[] | select(.type == "error") | .line] == [4, 6, 7, 8, 9]' <<<"$output"
    jq -e -s 'map(select(.line == 4)) | .[0].error | test("invalid JSON")' <<<"$output"
    jq -e -s 'map(select(.line == 8)) | .[0] | .id == "big" and (.error | test("out of range"))' <<<"$output"
    jq -e -s 'map(select(.type == "error")) | all(.finish_reason == "error")' <<<"$output"
    [[ "$stderr" == *"10 requests: 5 completed, 5 errors"* ]]
}

@test "an id of null is refused as 1.5 is: an error line whose id is its line number, not a request without id" {
    cd "$BATS_TEST_TMPDIR"
    printf '%s\n' '{"id":1.5,"prompt":"hi","max_tokens":4}' '{"id":null,"prompt":"hi","max_tokens":4}' \
        '{"prompt":"hi","max_tokens":4}' >req.jsonl
    run -1 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0
    jq -e -s 'map(.type) == ["error", "error", "completion"] and map(.id) == [1, 2, 3]' <<<"$output"
    local m="'id' must be a string or an integer"
    jq -e -s --arg m "$m" '.[0].error == $m' <<<"$output"
    jq -e -s --arg m "$m, not null" '.[1].error | startswith($m)' <<<"$output"
    [[ "$stderr" == *"3 requests: 1 completed, 2 errors"* ]]
    # --merge takes the error lines as the results of those lines
    printf '%s\n' "$output" >res.jsonl
    generate --merge req.jsonl res.jsonl >/dev/null
}

@test "64 requests give the same tokens batched as alone (greedy)" {
    cd "$BATS_TEST_TMPDIR"
    mkreqs 64 req.jsonl
    alone_tokens req.jsonl alone.txt
    [ "$(wc -l <alone.txt)" -eq 64 ]
    generate -q -m "$TINY" --batch req.jsonl --temp 0 --max-seqs 16 --max-batch-tokens 96 >out.jsonl
    batch_tokens out.jsonl >batch.txt
    diff alone.txt batch.txt
    # prefix caching shared the common prompt start
    jq -e -s 'map(.cached_tokens) | add > 0' out.jsonl
    # tiny KV budgets: 24 blocks of 16 tokens force preemption
    for mode in recompute swap; do
        generate -m "$TINY" --batch req.jsonl --temp 0 --kv-mem 96KiB --preempt $mode \
            --kv-trace tr-$mode.jsonl >out-$mode.jsonl 2>err-$mode.txt
        batch_tokens out-$mode.jsonl >batch-$mode.txt
        diff alone.txt batch-$mode.txt
        jq -e -s 'map(select(.type == "step") | .preemptions) | add > 0' tr-$mode.jsonl
        jq -e -s 'map(.preemptions) | add > 0' out-$mode.jsonl
        kvstat --trace tr-$mode.jsonl >/dev/null
    done
    grep -q 'swap_bytes":[1-9]' tr-swap.jsonl
    # static batches and no prefix cache: same tokens again
    generate -q -m "$TINY" --batch req.jsonl --temp 0 --schedule static --no-prefix-cache \
        --max-seqs 8 --block-size 8 >out-static.jsonl
    batch_tokens out-static.jsonl | diff alone.txt -
    jq -e -s 'map(.cached_tokens) | add == 0' out-static.jsonl
}

@test "seeded sampling per request is the same batched as alone" {
    cd "$BATS_TEST_TMPDIR"
    for i in 1 2 3 4 5 6; do
        printf '{"id":%d,"prompt":"story %d about a fox","max_tokens":12,"temperature":0.9,"seed":%d}\n' \
            "$i" "$i" "$((i * 11))"
    done >req.jsonl
    generate -q -m "$TINY" --batch req.jsonl >out.jsonl
    for i in 1 2 3 4 5 6; do
        want=$(generate -q -m "$TINY" -p "story $i about a fox" -n 12 --temp 0.9 --seed $((i * 11)) --json | jq -c .tokens)
        got=$(jq -c "select(.id == $i) | .tokens" out.jsonl)
        [ "$want" = "$got" ]
    done
}

@test "stop strings cut the text; max_tokens and finish reasons" {
    cd "$BATS_TEST_TMPDIR"
    full=$(generate -q -m "$TINY" -p "the quick fox" -n 20 --temp 0 --ignore-eos --json)
    text=$(jq -r .text <<<"$full")
    [ "${#text}" -gt 6 ]
    stop=${text:3:2}
    jq -nc --arg s "$stop" '{id: "s", prompt: "the quick fox", max_tokens: 20, stop: [$s]}' >req.jsonl
    run -0 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --ignore-eos
    jq -e '.finish_reason == "stop"' <<<"$output"
    got=$(jq -r .text <<<"$output")
    [[ "$got" != *"$stop"* ]]
    [[ "$text" == "$got$stop"* ]]
}

@test "the KV trace is kvtrace/1 for kvstat, with header and summary" {
    cd "$BATS_TEST_TMPDIR"
    mkreqs 20 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 --kv-trace tr.jsonl --max-seqs 4 >/dev/null
    jq -e -s '.[0].type == "header" and .[-1].type == "summary"' tr.jsonl
    jq -e -s 'map(select(.type == "step")) | all(.blocks_used + .blocks_free == .blocks_total)' tr.jsonl
    jq -e -s 'map(select(.type == "step")) | all(.running <= 4)' tr.jsonl
    jq -e -s 'map(select(.type == "step") | .phase) | unique | length >= 2' tr.jsonl
    jq -e -s '.[-1].completed == 20' tr.jsonl
    run -0 kvstat --trace tr.jsonl
    assert_output --partial "steps"
    steps=$(jq -s 'map(select(.type == "step")) | length' tr.jsonl)
    [[ "$output" == *"$steps"* ]]
    run -0 kvstat --trace tr.jsonl --svg tr.svg
    grep -q '<svg' tr.svg
}

@test "-o writes atomically and keeps an existing file without --force" {
    cd "$BATS_TEST_TMPDIR"
    printf 'one\ntwo\n' >req.txt
    echo keep >out.jsonl
    run -2 --separate-stderr generate -m "$TINY" --batch req.txt -o out.jsonl
    [ "$(cat out.jsonl)" = keep ]
    run -0 generate -q -m "$TINY" --batch req.txt -o out.jsonl --force -n 3
    [ "$(wc -l <out.jsonl)" -eq 2 ]
    [ -z "$(ls | grep tmp)" ]
}

@test "pipeline: prompt file on stdin to a JSONL report" {
    printf 'alpha\nbeta\ngamma\n' |
        generate -q -m "$TINY" --batch - -n 4 --temp 0 |
        jq -s -e 'length == 3 and all(.completion_tokens <= 4) and (map(.id) | sort == [1, 2, 3])'
}

# padded N JSON : JSON padded with spaces to a line of exactly N bytes
padded() {
    python3 -c 'import sys; n, j = int(sys.argv[1]), sys.argv[2]
sys.stdout.write(j + " " * (n - len(j)) + "\n")' "$1" "$2"
}

@test "a request line over 16 MiB ends the run with exit 3 naming it, the rest unread (/dev/zero too)" {
    cd "$BATS_TEST_TMPDIR"
    # an endless line ends the run once 16 MiB of it are in (timeout only
    # turns a hang into a failure)
    run -3 --separate-stderr timeout 120 generate -m "$TINY" --batch /dev/zero -n 2
    [ "$stderr" = "generate: '/dev/zero' line 1: longer than 16777216 bytes (16 MiB), the most a request line may have" ]
    [ -z "$output" ]
    run -3 --separate-stderr bash -c "timeout 120 generate -m '$TINY' --batch - -n 2 -o out.jsonl </dev/zero"
    [[ "$stderr" == "generate: '<stdin>' line 1: longer than 16777216 bytes"* ]]
    [ ! -e out.jsonl ]
    # 16 MiB is a line; one byte more is not
    { echo one; padded 16777216 '{"id":"max","prompt":"two"}'; echo three; } >ok.jsonl
    run -0 --separate-stderr generate -m "$TINY" --batch ok.jsonl -n 2 --temp 0
    jq -e -s 'map(.id | tostring) | sort == ["1", "3", "max"]' <<<"$output"
    # so is 16 MiB ending "\r\n", also as the last line with no "\n"
    { echo one; padded 16777216 '{"id":"crlf","prompt":"two"}' | sed 's/$/\r/'; echo three; } >crlf.jsonl
    run -0 --separate-stderr generate -m "$TINY" --batch crlf.jsonl -n 2 --temp 0
    jq -e -s 'map(.id | tostring) | sort == ["1", "3", "crlf"]' <<<"$output"
    { echo one; padded 16777216 '{"id":"crlf","prompt":"two"}' | sed 's/$/\r/' | head -c -1; } >crlf.jsonl
    run -0 --separate-stderr generate -m "$TINY" --batch crlf.jsonl -n 2 --temp 0
    jq -e -s 'map(.id | tostring) | sort == ["1", "crlf"]' <<<"$output"
    # one byte more before the "\r" is over, and so is a last "\r" not before "\n" when the line is over
    { echo one; padded 16777217 '{"id":"over","prompt":"two"}' | sed 's/$/\r/'; } >long.jsonl
    run -3 --separate-stderr generate -m "$TINY" --batch long.jsonl -n 2
    [ "$stderr" = "generate: 'long.jsonl' line 2: longer than 16777216 bytes (16 MiB), the most a request line may have" ]
    { echo one; padded 16777216 '{"id":"over","prompt":"two"}' | head -c -1; printf 'x\n'; } >long.jsonl
    run -3 --separate-stderr generate -m "$TINY" --batch long.jsonl -n 2
    [ "$stderr" = "generate: 'long.jsonl' line 2: longer than 16777216 bytes (16 MiB), the most a request line may have" ]
    { echo one; padded 16777217 '{"id":"over","prompt":"two"}'; echo three; } >long.jsonl
    run -3 --separate-stderr generate -m "$TINY" --batch long.jsonl -n 2 -o out.jsonl
    [ "$stderr" = "generate: 'long.jsonl' line 2: longer than 16777216 bytes (16 MiB), the most a request line may have" ]
    [ ! -e out.jsonl ]
    [ -z "$(ls | grep tmp)" ]
}

# out_tmp_lines N : the output's temporary (out.jsonl.tmp.*, where results are
# written as they end) holds N lines
out_tmp_lines() {
    [ "$(cat out.jsonl.tmp.* 2>/dev/null | wc -l)" -ge "$1" ]
}

# drain_on SIG : generate --batch on the tiny model reading a FIFO kept open,
# results to out.jsonl (-o) and a KV trace to tr.jsonl; two requests are
# sent, and once both have their result lines (written to the output's
# temporary as they end) SIG arrives; rc = its exit status
drain_on() {
    local pid
    mkfifo in.fifo
    printf '{"id":"a","prompt":"one","max_tokens":3}\n{"id":"b","prompt":"two","max_tokens":3}\n' >first.jsonl
    with_hup generate -q -m "$TINY" --batch in.fifo -o out.jsonl --kv-trace tr.jsonl 2>err.txt &
    pid=$!
    exec 7>in.fifo
    cat first.jsonl >&7
    wait_until 60 "two results" out_tmp_lines 2 || { kill -KILL $pid; exec 7>&-; return 1; }
    kill -"$1" $pid
    rc=0
    wait $pid || rc=$?
    exec 7>&-
}

@test "SIGTERM stops admission, keeps the finished results, exits 143" {
    cd "$BATS_TEST_TMPDIR"
    drain_on TERM
    [ "$rc" -eq 143 ]
    [ "$(jq -s 'length' out.jsonl)" -eq 2 ]
    jq -e -s '.[-1].type == "summary"' tr.jsonl
    [ -z "$(ls | grep tmp)" ]
}

@test "SIGHUP (the terminal gone) drains as SIGTERM does: the finished results kept, exit 129" {
    cd "$BATS_TEST_TMPDIR"
    drain_on HUP
    [ "$rc" -eq 129 ]
    [ "$(jq -s 'length' out.jsonl)" -eq 2 ]
    jq -e -s '.[-1].type == "summary"' tr.jsonl
    [ -z "$(ls | grep tmp)" ]
}

@test "SIGHUP ignored when the run starts (nohup) stays ignored: the run goes on to its end" {
    cd "$BATS_TEST_TMPDIR"
    local pid
    mkfifo in.fifo
    (trap '' HUP; exec generate -q -m "$TINY" --batch in.fifo -o out.jsonl 2>err.txt) &
    pid=$!
    exec 7>in.fifo
    printf '{"id":"a","prompt":"one","max_tokens":3}\n' >&7
    wait_until 60 "the first result" out_tmp_lines 1 || { kill -KILL $pid; exec 7>&-; return 1; }
    kill -HUP $pid
    printf '{"id":"b","prompt":"two","max_tokens":3}\n' >&7
    exec 7>&-
    rc=0
    wait $pid || rc=$?
    [ "$rc" -eq 0 ]
    [ "$(jq -s 'length' out.jsonl)" -eq 2 ]
}

@test "SIGPIPE ends the run quietly with 141 and no partial trace" {
    cd "$BATS_TEST_TMPDIR"
    for i in $(seq 1 200); do echo "prompt $i"; done >req.txt
    run bash -c "generate -m '$TINY' --batch req.txt -n 20 --ignore-eos --max-seqs 2 \
        --kv-trace tr.jsonl 2>err.txt | head -n 1 >/dev/null; echo \${PIPESTATUS[0]}"
    [ "$output" = 141 ]
    [ ! -s err.txt ]
    [ -z "$(ls | grep tmp)" ]
    [ ! -e tr.jsonl ]
}

@test "--kv-type q8_0 runs in batch mode (64-wide heads), and generate(1) says so" {
    cd "$BATS_TEST_TMPDIR"
    printf '%s\n' '{"id":"a","prompt":"the cat sat","max_tokens":4}' \
        '{"id":"b","prompt":"on the mat","max_tokens":3}' >req.jsonl
    run -0 --separate-stderr generate -q -m "$TOP/tests/fixtures/tiny-llama256-f32.gguf" \
        --batch req.jsonl --temp 0 --kv-type q8_0 --kv-trace tr.jsonl
    [ "$(jq -s '[.[] | select(.error == null and (.tokens | length) > 0)] | length' <<<"$output")" -eq 2 ]
    [ "$(head -1 tr.jsonl | jq -r .kv_type)" = q8_0 ]
    # the man page and docs/generate.md no longer call it refused
    run -0 awk '/^\.It Fl \\-kv-type/ { p = 1; next } /^\.It/ { p = 0 } p' "$TOP/man/generate.1"
    assert_output --partial 'needs heads whose widths are multiples of 32'
    refute_output --partial 'refused'
    run grep -n 'refused until the forward pass' "$TOP/docs/generate.md"
    [ "$status" -eq 1 ]
}

@test "q8_0 KV needs heads that are whole q8_0 blocks; SmolLM2 runs with it" {
    # the tiny fixture's heads are 16 wide: not a multiple of 32
    run --separate-stderr generate -m "$TINY" --batch --kv-type q8_0 /dev/null
    [ "$status" -ne 0 ]
    [[ "$stderr" == *"q8_0"* || "$stderr" == *"block"* ]]
    need_model M SmolLM2-135M-Instruct.Q4_1.gguf
    not_under_sanitizer
    printf '%s\n' '{"id":"a","prompt":"The capital of France is","max_tokens":8}' \
        '{"id":"b","prompt":"1, 2, 3, 4,","max_tokens":6}' >"$BATS_TEST_TMPDIR/req.jsonl"
    run -0 --separate-stderr generate -m "$M" --batch "$BATS_TEST_TMPDIR/req.jsonl" --temp 0 \
        --kv-type q8_0
    [ "$(jq -s 'length' <<<"$output")" -eq 2 ]
    [ "$(jq -s '[.[] | select(.error == null and (.tokens | length) > 0)] | length' <<<"$output")" -eq 2 ]
}

@test "SmolLM2: 4 requests give the same greedy tokens batched as alone, also preempted" {
    need_model M SmolLM2-135M-Instruct.Q4_1.gguf
    not_under_sanitizer
    cd "$BATS_TEST_TMPDIR"
    printf '%s\n' \
        '{"id":1,"prompt":"The capital of France is","max_tokens":8}' \
        '{"id":2,"prompt":"Once upon a time, in a small village by the sea, there lived","max_tokens":12}' \
        '{"id":3,"prompt":"1, 2, 3, 4,","max_tokens":6}' \
        '{"id":4,"prompt":"The capital of France is a city where","max_tokens":10}' >req.jsonl
    while IFS= read -r line; do
        generate -q -m "$M" --temp 0 -n "$(jq -r .max_tokens <<<"$line")" \
            -p "$(jq -r .prompt <<<"$line")" --json | jq -c --argjson id "$(jq .id <<<"$line")" \
            '{id: $id, tokens: .tokens}'
    done <req.jsonl | sort >alone.txt
    # 1 MiB holds 2 blocks of 16 tokens: sequences are preempted
    for mode in swap recompute; do
        generate -q -m "$M" --batch req.jsonl --temp 0 --kv-mem 1MiB --preempt $mode \
            --kv-trace tr-$mode.jsonl >out-$mode.jsonl
        jq -c '{id: .id, tokens: .tokens}' out-$mode.jsonl | sort | diff alone.txt -
        jq -e -s 'map(.preemptions) | add > 0' out-$mode.jsonl
        kvstat --trace tr-$mode.jsonl >/dev/null
    done
}

@test "a malformed request of a million values is an error result at once (the failed parse's frees are not quadratic)" {
    cd "$BATS_TEST_TMPDIR"
    python3 -c "import sys; sys.stdout.write('{\"prompt\": [' + '0,' * 1000000 + '\n{\"prompt\": \"hi\"}\n')" > req.jsonl
    # (timeout: only a safety net; the old parser took minutes here)
    run -1 --separate-stderr timeout 300 generate -m "$TINY" --batch req.jsonl -n 1 --temp 0
    [ "$(jq -r 'select(.id == 1) | .finish_reason' <<< "$output")" = error ]
    [[ "$(jq -r 'select(.id == 1) | .error' <<< "$output")" == *"invalid JSON"* ]]
    [ "$(jq -r 'select(.id == 2) | .finish_reason' <<< "$output")" = length ]
}
