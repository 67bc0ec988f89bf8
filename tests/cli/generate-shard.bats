#!/usr/bin/env bats
# generate --batch split over processes: --shard I/N (by index and by id),
# --resume (a run killed mid-way and resumed, a torn last line, dropped error
# and cancelled results, hostile files, a full disk), --merge (order, missing,
# repeated and stray results, bad files), the man page's sort | jq merge, and
# GNU parallel.  The real Slurm job array is generate-slurm.bats.

load common

TINY="$TOP/tests/fixtures/tiny-llama-f16.gguf"

teardown() {
    unmount_full
}

@test "--shard, --shard-by, --resume, --sync-*, --merge: usage errors exit 2" {
    mkdir "$BATS_TEST_TMPDIR/w"
    cd "$BATS_TEST_TMPDIR/w"
    run -0 generate --help
    assert_output --partial "--shard I/N"
    assert_output --partial "--resume FILE"
    assert_output --partial "--merge REQUESTS"
    for s in 0/0 4/4 5/4 -1/4 1/-4 99999999999999999999/4 0/99999999999999999999 \
        0/1073741825 '' / 1/ /4 ' 1/4' '1/4 ' 1/4x +1/4 0x1/4 1.0/4 1//4 '1/4/8'; do
        run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --shard "$s"
        [[ "$stderr" == *"generate: --shard: '$s'"* ]]
        [[ "$stderr" == *"usage: generate"* ]]
    done
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --shard 5/4
    [[ "$stderr" == *"the index must be below the count: 0..3"* ]]
    run -0 generate -q -m "$TINY" --batch /dev/null --shard 1073741823/1073741824
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --shard-by id
    [[ "$stderr" == *"--shard-by needs --shard"* ]]
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --shard 0/2 --shard-by name
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --sync-lines 4
    [[ "$stderr" == *"need --resume"* ]]
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --resume r.jsonl --sync-lines 0
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --resume r.jsonl --sync-seconds -1
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --resume r.jsonl -o o.jsonl
    [[ "$stderr" == *"no -o with it"* ]]
    run -2 --separate-stderr generate -m "$TINY" --batch /dev/null --resume -
    run -2 --separate-stderr generate -m "$TINY" -p hi --shard 0/2
    [[ "$stderr" == *"need --batch"* ]]
    run -2 --separate-stderr generate -m "$TINY" -p hi --resume r.jsonl
    run -2 --separate-stderr generate --merge /dev/null
    [[ "$stderr" == *"no results files given"* ]]
    run -2 --separate-stderr generate --merge /dev/null -m "$TINY" r.jsonl
    [[ "$stderr" == *"--merge takes only -o, --force and the results files"* ]]
    run -2 --separate-stderr generate --merge /dev/null --batch r.jsonl
    run -2 --separate-stderr generate --merge /dev/null --shard 0/2 r.jsonl
    # nothing was created
    [ -z "$(ls)" ]
}

@test "4 shards merged equal one run of the 64 requests, request for request (by index and by id)" {
    cd "$BATS_TEST_TMPDIR"
    mkreqs 64 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o single.jsonl
    results_by_line single.jsonl >want.txt
    for i in 0 1 2 3; do
        generate -q -m "$TINY" --batch req.jsonl --temp 0 --shard $i/4 -o part.$i.jsonl
    done
    # every request in one shard, request k (from 0) in shard k mod 4
    [ "$(cat part.*.jsonl | wc -l)" -eq 64 ]
    [ "$(jq -r .id part.*.jsonl | sort -u | wc -l)" -eq 64 ]
    for i in 0 1 2 3; do
        jq -e -s --argjson i $i 'length == 16 and all((.line - 1) % 4 == $i)' part.$i.jsonl
    done
    run -0 --separate-stderr generate --merge req.jsonl -o all.jsonl part.0.jsonl part.1.jsonl \
        part.2.jsonl part.3.jsonl
    [[ "$stderr" == *"64 requests, 64 results (0 errors) from 4 files"* ]]
    results_by_line all.jsonl | diff want.txt -
    # in request order, each line as its shard wrote it
    jq -e -s 'map(.line) == [range(1; 65)]' all.jsonl
    [ "$(sort all.jsonl | md5sum)" = "$(cat part.*.jsonl | sort | md5sum)" ]
    # the man page's merge with standard tools puts them in the same order
    jq -c '[.line, .]' part.*.jsonl | sort -t, -k1.2n | jq -c '.[1]' >std.jsonl
    jq -c . all.jsonl | cmp - std.jsonl
    # by a hash of the id: 3 shards, appended with --resume
    for i in 0 1 2; do
        generate -q -m "$TINY" --batch req.jsonl --temp 0 --shard $i/3 --shard-by id \
            --resume id.$i.jsonl
    done
    generate -q --merge req.jsonl id.0.jsonl id.1.jsonl id.2.jsonl >all-id.jsonl
    results_by_line all-id.jsonl | diff want.txt -
    # the hash is the documented one: FNV-1a 64 of "s" + the string id
    python3 - id.0.jsonl id.1.jsonl id.2.jsonl <<'EOF'
import json, sys
def fnv(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) % 2**64
    return h
for i, f in enumerate(sys.argv[1:]):
    for line in open(f):
        r = json.loads(line)
        assert fnv(b"s" + r["id"].encode()) % 3 == i, (f, r["id"])
EOF
}

@test "shards: blank lines are not requests; a repeated id is refused in whichever shard has it" {
    cd "$BATS_TEST_TMPDIR"
    printf '%s\n' 'alpha' '' '{"id":"x","prompt":"beta"}' '{"id":"x","prompt":"gamma"}' \
        '  ' 'delta' >req.txt
    # requests k = 0 alpha (line 1), 1 x (line 3), 2 x again (line 4), 3 delta (line 6)
    run -1 generate -q -m "$TINY" --batch req.txt -n 3 --temp 0 --shard 0/2 -o s0.jsonl
    jq -e -s 'map(.line) | sort == [1, 4]' s0.jsonl
    jq -e -s 'map(select(.line == 4))[0] | .type == "error" and (.error | test("duplicate id: line 3"))' s0.jsonl
    run -0 generate -q -m "$TINY" --batch req.txt -n 3 --temp 0 --shard 1/2 -o s1.jsonl
    jq -e -s '(map(.line) | sort) == [3, 6] and all(.type == "completion")' s1.jsonl
    run -1 generate -q -m "$TINY" --batch req.txt -n 3 --temp 0 -o single.jsonl
    run -0 --separate-stderr generate --merge req.txt s0.jsonl s1.jsonl -o all.jsonl
    [[ "$stderr" == *"4 requests, 4 results (1 errors) from 2 files"* ]]
    results_by_line single.jsonl >want.txt
    results_by_line all.jsonl | diff want.txt -
}

@test "a run killed mid-way (SIGKILL, torn last line) resumes: one run's results, request for request" {
    cd "$BATS_TEST_TMPDIR"
    mkreqs 64 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o single.jsonl
    mkfifo in.fifo
    generate -q -m "$TINY" --batch in.fifo --temp 0 --shard 1/2 --resume res.1.jsonl 2>err.txt &
    pid=$!
    exec 7>in.fifo
    head -n 20 req.jsonl >&7
    # shard 1/2 has 10 of the first 20 requests: once their results are in
    # the file, the run waits for more input, and is killed there
    wait_until 60 "10 results" has_lines res.1.jsonl 10
    kill -KILL $pid
    wait $pid || true
    exec 7>&-
    [ "$(wc -l <res.1.jsonl)" -eq 10 ]
    # as if the machine had died while the line was being written
    printf '{"schema":"generate/1","type":"completion","id":"r' >>res.1.jsonl
    run -0 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --shard 1/2 \
        --resume res.1.jsonl --sync-lines 1
    [[ "$stderr" == *"'res.1.jsonl': cut off its torn last line"* ]]
    [[ "$stderr" == *"32 requests (32 more in other shards): 22 completed, 0 errors, 10 done before"* ]]
    [ "$(wc -l <res.1.jsonl)" -eq 32 ]
    [ "$(jq -r .id res.1.jsonl | sort -u | wc -l)" -eq 32 ]
    # again: nothing is left to do, and the file stays as it is
    cp res.1.jsonl before.jsonl
    run -0 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --shard 1/2 \
        --resume res.1.jsonl
    [[ "$stderr" == *": 0 completed, 0 errors, 32 done before"* ]]
    cmp before.jsonl res.1.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 --shard 0/2 --resume res.0.jsonl \
        --sync-seconds 0
    generate -q --merge req.jsonl res.0.jsonl res.1.jsonl -o all.jsonl
    results_by_line single.jsonl >want.txt
    results_by_line all.jsonl | diff want.txt -
    [ -z "$(ls | grep tmp)" ]
}

@test "--resume drops error, cancelled and repeated results and runs those requests again" {
    cd "$BATS_TEST_TMPDIR"
    printf '%s\n' '{"id":"a","prompt":"one","max_tokens":3}' '{"id":"b","prompt":"two","max_tokens":3}' \
        '{"id":"c","prompt":"three","max_tokens":3}' >req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o single.jsonl
    # a: done (twice); b: an error line; c: cancelled; one blank line
    jq -c 'select(.id == "a")' single.jsonl >res.jsonl
    echo '{"schema":"generate/1","type":"error","id":"b","line":2,"finish_reason":"error","error":"x"}' >>res.jsonl
    jq -c 'select(.id == "c") | .finish_reason = "cancelled"' single.jsonl >>res.jsonl
    echo >>res.jsonl
    jq -c 'select(.id == "a")' single.jsonl >>res.jsonl
    ln -s res.jsonl link.jsonl
    run -0 --separate-stderr generate -v -m "$TINY" --batch req.jsonl --temp 0 --resume link.jsonl
    [[ "$stderr" == *"1 results kept, 3 error, cancelled or repeated results dropped"* ]]
    [[ "$stderr" == *"3 requests: 2 completed, 0 errors, 1 done before"* ]]
    # rewritten through the link, which stays a link
    [ -L link.jsonl ]
    [ "$(grep -c . res.jsonl)" -eq 3 ]
    results_by_line single.jsonl >want.txt
    results_by_line res.jsonl | diff want.txt -
    # the results in the file, the KV trace on stdout
    rm res.jsonl
    run -0 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --resume res.jsonl \
        --kv-trace -
    jq -e -s '.[0].type == "header" and .[-1].type == "summary" and .[-1].completed == 3' <<<"$output"
    results_by_line res.jsonl | diff want.txt -
    # a result that names another line for its id: results of another request file
    jq -c 'select(.id == "a") | .line = 3' single.jsonl >other.jsonl
    run -3 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --resume other.jsonl
    [[ "$stderr" == *"the result for id \"a\" is for line 3, but line 1 of 'req.jsonl' has that id"* ]]
}

@test "--resume refuses a results file with a result no request has (exit 3, file, line and id named): at start, untouched; from a pipe when it ends" {
    cd "$BATS_TEST_TMPDIR"
    printf '%s\n' '{"id":"r1","prompt":"one","max_tokens":3}' '{"id":"r2","prompt":"two","max_tokens":3}' \
        '{"id":"r3","prompt":"three","max_tokens":3}' >req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o good.jsonl
    # an error line too, which a file taken up would have dropped (rewritten)
    { sed 's/"id":"r2"/"id":"zzz"/' good.jsonl
      echo '{"schema":"generate/1","type":"error","id":"r1","line":1,"finish_reason":"error","error":"x"}'; } >stray.jsonl
    cp stray.jsonl keep
    run -3 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --resume stray.jsonl
    [ "$stderr" = "generate: 'stray.jsonl' line 2: a result for id \"zzz\", which no request of 'req.jsonl' has (results of another request file?)" ]
    cmp keep stray.jsonl
    # an integer id (a line without one has its line number) of no request
    { head -n 1 good.jsonl; jq -c '.id = 7 | .line = 7' <<<"$(sed -n 2p good.jsonl)"; } >int.jsonl
    run -3 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --resume int.jsonl
    [[ "$stderr" == *"'int.jsonl' line 2: a result for id 7, which no request of 'req.jsonl' has"* ]]
    # requests from a pipe: known when it ends; the run's results are kept
    run -3 --separate-stderr generate -m "$TINY" --batch - --temp 0 --resume stray.jsonl <req.jsonl
    [[ "$stderr" == *"'stray.jsonl' line 2: a result for id \"zzz\", which no request of '<stdin>' has"* ]]
    jq -e -s 'map(select(.id == "r2")) | length == 1' stray.jsonl
    # --merge agrees: the file holds a stray result
    run -6 --separate-stderr generate --merge req.jsonl stray.jsonl
    [[ "$stderr" == *'a result for id "zzz" on line 2, but line 2 of'* ]]
}

@test "--resume refuses /dev/null, a directory, a FIFO, its inputs, a locked file, lines that are not results" {
    cd "$BATS_TEST_TMPDIR"
    printf 'one\ntwo\n' >req.txt
    mkdir dir
    mkfifo fifo
    ln -s nowhere dangling
    run -4 --separate-stderr generate -m "$TINY" --batch req.txt --resume /dev/null
    [[ "$stderr" == *"'/dev/null': is a character device: --resume needs a regular file"* ]]
    run -4 --separate-stderr generate -m "$TINY" --batch req.txt --resume dir
    [[ "$stderr" == *"'dir': is a directory"* ]]
    # never opened, so never waits for a writer
    run -4 --separate-stderr timeout 20 generate -m "$TINY" --batch req.txt --resume fifo
    [[ "$stderr" == *"'fifo': is a FIFO"* ]]
    run -4 --separate-stderr generate -m "$TINY" --batch req.txt --resume dangling
    [[ "$stderr" == *"dangling"* ]]
    [ ! -e nowhere ]
    cp "$TINY" model.gguf
    for f in req.txt model.gguf; do
        cp $f keep
        run -2 --separate-stderr generate -m model.gguf --batch req.txt --resume $f
        [[ "$stderr" == *"'$f': is also an input of this run"* ]]
        cmp keep $f
    done
    # a run that fails leaves no results file it created
    run -4 --separate-stderr generate -m none.gguf --batch req.txt --resume new.jsonl
    [ ! -e new.jsonl ]
    # lines that are not results: exit 3, the file untouched
    generate -q -m model.gguf --batch req.txt -n 2 --resume good.jsonl
    [ "$(wc -l <good.jsonl)" -eq 2 ]
    { echo 'not a result'; cat good.jsonl; } >bad1.jsonl
    { cat good.jsonl; echo '{"id":1,"text":"x"}'; } >bad2.jsonl
    jq -c 'del(.line)' good.jsonl >bad3.jsonl
    { head -n 1 good.jsonl; printf '\000\000\n'; tail -n 1 good.jsonl; } >bad4.jsonl
    for f in bad1 bad2 bad3 bad4; do
        cp $f.jsonl keep
        run -3 --separate-stderr generate -m model.gguf --batch req.txt --resume $f.jsonl
        [[ "$stderr" == *"'$f.jsonl' line "* ]]
        cmp keep $f.jsonl
    done
    run -3 --separate-stderr generate -m model.gguf --batch req.txt --resume bad3.jsonl
    [[ "$stderr" == *'no "line"'* ]]
    # another run is appending to it: refused at once
    exec 7<good.jsonl
    flock -x 7
    run -4 --separate-stderr generate -m model.gguf --batch req.txt --resume good.jsonl
    exec 7<&-
    [[ "$stderr" == *"'good.jsonl': another run is writing it (it is locked)"* ]]
    run -0 generate -q -m model.gguf --batch req.txt --resume good.jsonl
    [ "$(wc -l <good.jsonl)" -eq 2 ]
}

@test "--resume on a full disk: exit 4 naming the file, whole lines only; the rerun finishes" {
    mount_full 56
    cd "$BATS_TEST_TMPDIR"
    mkreqs 64 req.jsonl
    run -4 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --resume "$FULL/res.jsonl"
    [[ "$stderr" == *"'$FULL/res.jsonl': write failed: No space left on device"* ]]
    n=$(wc -l <"$FULL/res.jsonl")
    [ "$n" -gt 0 ]
    [ "$n" -lt 64 ]
    [ "$(tail -c 1 "$FULL/res.jsonl" | od -An -c | tr -d ' ')" = '\n' ]
    jq -e . "$FULL/res.jsonl" >/dev/null
    rm "$FULL/fill"
    run -0 --separate-stderr generate -m "$TINY" --batch req.jsonl --temp 0 --resume "$FULL/res.jsonl"
    [[ "$stderr" == *"$n done before"* ]]
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o single.jsonl
    results_by_line single.jsonl >want.txt
    results_by_line "$FULL/res.jsonl" | diff want.txt -
}

@test "--merge -o on a full disk: exit 4 naming the output, nothing left" {
    mount_full
    cd "$BATS_TEST_TMPDIR"
    mkreqs 4 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o all.jsonl
    run -4 --separate-stderr generate --merge req.jsonl all.jsonl -o "$FULL/m.jsonl"
    [ "$stderr" = "generate: '$FULL/m.jsonl': write failed: No space left on device" ]
    [ "$(ls -A "$FULL")" = fill ]
}

@test "--merge: missing, repeated and stray results exit 6 with the ids listed; nothing is written" {
    cd "$BATS_TEST_TMPDIR"
    mkreqs 8 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o all.jsonl
    head -n 5 all.jsonl >part.a
    tail -n 3 all.jsonl >part.b
    run -0 --separate-stderr generate --merge req.jsonl part.b part.a
    jq -e -s 'map(.line) == [range(1; 9)]' <<<"$output"
    grep -v '"id":"r3"' all.jsonl >miss.jsonl
    run -6 --separate-stderr generate --merge req.jsonl -o out.jsonl miss.jsonl
    [[ "$stderr" == *'generate: warning: missing: id "r3" (line 4)'* ]]
    [[ "$stderr" == *"generate: 1 of 8 requests have no result, 0 have more than one, 0 results match no request: nothing written"* ]]
    [ ! -e out.jsonl ]
    [ -z "$output" ]
    run -6 --separate-stderr generate --merge req.jsonl all.jsonl part.b
    [[ "$stderr" == *"a second result in 'part.b' line 1"* ]]
    [[ "$stderr" == *"0 of 8 requests have no result, 3 have more than one"* ]]
    # results of another request file
    mkreqs 9 req9.jsonl
    generate -q -m "$TINY" --batch req9.jsonl --temp 0 -o all9.jsonl
    run -6 --separate-stderr generate --merge req.jsonl all9.jsonl
    [[ "$stderr" == *'a result for id "r8" on line 9, which is not a request of'* ]]
    sed 's/"id":"r2"/"id":"zz"/' all.jsonl >other.jsonl
    run -6 --separate-stderr generate --merge req.jsonl other.jsonl
    [[ "$stderr" == *"but line 3 of 'req.jsonl' is id \"r2\""* ]]
    [[ "$stderr" == *'missing: id "r2" (line 3)'* ]]
    # a cancelled result is no result
    jq -c 'if .id == "r1" then .finish_reason = "cancelled" else . end' all.jsonl >canc.jsonl
    run -6 --separate-stderr generate --merge req.jsonl canc.jsonl
    [[ "$stderr" == *'missing: id "r1" (line 2): cancelled'* ]]
    # a torn last line is left out, with a note
    head -c -20 all.jsonl >torn.jsonl
    run -6 --separate-stderr generate --merge req.jsonl torn.jsonl
    [[ "$stderr" == *"'torn.jsonl' line 8: torn"* ]]
    [[ "$stderr" == *"1 of 8 requests have no result"* ]]
    # at most 100 listed
    mkreqs 150 req150.jsonl
    : >empty.jsonl
    run -6 --separate-stderr generate --merge req150.jsonl empty.jsonl
    [ "$(grep -c 'missing: id' <<<"$stderr")" -eq 100 ]
    [[ "$stderr" == *"... 50 more not listed"* ]]
    [[ "$stderr" == *"150 of 150 requests have no result"* ]]
}

@test "--merge: bad results files exit 3 or 4; the output may not replace an input" {
    cd "$BATS_TEST_TMPDIR"
    mkreqs 4 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o all.jsonl
    printf 'hello\n' >junk.jsonl
    run -3 --separate-stderr generate --merge req.jsonl all.jsonl junk.jsonl
    [[ "$stderr" == *"'junk.jsonl' line 1: "* ]]
    mkdir dir
    mkfifo fifo
    run -4 --separate-stderr generate --merge req.jsonl dir
    run -4 --separate-stderr generate --merge req.jsonl /dev/null
    [[ "$stderr" == *"'/dev/null': is not a regular file"* ]]
    run -4 --separate-stderr timeout 20 generate --merge req.jsonl fifo
    run -4 --separate-stderr generate --merge req.jsonl none.jsonl
    run -4 --separate-stderr generate --merge none.jsonl all.jsonl
    run -4 --separate-stderr generate --merge dir all.jsonl
    cp all.jsonl keep
    run -2 --separate-stderr generate --merge req.jsonl -o all.jsonl all.jsonl
    [[ "$stderr" == *"'all.jsonl': is also an input of this run"* ]]
    cmp keep all.jsonl
    echo old >out.jsonl
    run -2 --separate-stderr generate --merge req.jsonl -o out.jsonl all.jsonl
    [ "$(cat out.jsonl)" = old ]
    run -0 generate --merge req.jsonl -o out.jsonl --force all.jsonl
    [ "$(wc -l <out.jsonl)" -eq 4 ]
    # the requests from a pipe
    run -0 --separate-stderr generate --merge - all.jsonl <req.jsonl
    [ "$(wc -l <<<"$output")" -eq 4 ]
    [ -z "$(ls | grep tmp)" ]
}

@test "--merge: a request line over 16 MiB exits 3 naming it, as in --batch (/dev/zero too); nothing written" {
    cd "$BATS_TEST_TMPDIR"
    mkreqs 4 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o all.jsonl
    # an endless line: 16 MiB of it are read, no more (the address-space
    # limit, where AddressSanitizer allows one, and timeout are safety nets)
    local lim=
    [ "${LLMKIT_SAN:-}" = address ] || lim="ulimit -v 1048576;"
    run -3 --separate-stderr bash -c "$lim timeout 120 generate --merge /dev/zero -o out.jsonl all.jsonl"
    [ "$stderr" = "generate: '/dev/zero' line 1: longer than 16777216 bytes (16 MiB), the most a request line may have" ]
    run -3 --separate-stderr bash -c "$lim timeout 120 generate --merge - all.jsonl </dev/zero"
    [[ "$stderr" == "generate: '<stdin>' line 1: longer than 16777216 bytes"* ]]
    [ -z "$output" ]
    { head -n 2 req.jsonl; head -c 16777217 /dev/zero | tr '\0' x; echo; tail -n 2 req.jsonl; } >long.jsonl
    run -3 --separate-stderr generate --merge long.jsonl -o out.jsonl all.jsonl
    [ "$stderr" = "generate: 'long.jsonl' line 3: longer than 16777216 bytes (16 MiB), the most a request line may have" ]
    [ ! -e out.jsonl ]
    [ -z "$(ls | grep tmp)" ]
}

@test "GNU parallel: the shards as parallel jobs, merged, equal one run" {
    if ! command -v parallel >/dev/null || ! parallel --version 2>/dev/null | grep -q 'GNU parallel'; then
        [ "${CI:-}" != true ] || { echo "GNU parallel is missing (scripts/install-deps installs it)"; return 1; }
        skip "GNU parallel not installed (scripts/install-deps installs it)"
    fi
    cd "$BATS_TEST_TMPDIR"
    mkreqs 64 req.jsonl
    generate -q -m "$TINY" --batch req.jsonl --temp 0 -o single.jsonl
    parallel --will-cite -j 2 generate -q -m "$TINY" --temp 0 --batch req.jsonl --shard {}/4 \
        --resume res.{}.jsonl ::: 0 1 2 3
    generate -q --merge req.jsonl res.0.jsonl res.1.jsonl res.2.jsonl res.3.jsonl -o all.jsonl
    results_by_line single.jsonl >want.txt
    results_by_line all.jsonl | diff want.txt -
}
