#!/usr/bin/env bats
# Outputs and inputs that are not plain files, shared by every tool through
# common/base/xio.c: devices and FIFOs written in place (never replaced, even with
# --force), symlinks followed, block devices refused, no-clobber that holds
# against a second run, an output that is also an input, stale temporaries of
# killed runs, out of memory while mapping an input (exit 5), endless inputs.
# Devices are made with mknod inside the test's own folder: no test points a
# tool at a real device node of the machine.

load common

TINY="$TOP/tests/fixtures/tiny-llama-f32.gguf"
TINY16="$TOP/tests/fixtures/tiny-llama-f16.gguf"

setup() {
    T=$BATS_TEST_TMPDIR
    bg=
}

# A test that fails early must not leave a process blocked on a FIFO: bats
# would wait for it for ever.
teardown() {
    [ -z "$bg" ] || kill "$bg" 2>/dev/null || true
}

# mkchr PATH : a character device equal to /dev/null (1,3), made here
mkchr() {
    mknod "$1" c 1 3 2>/dev/null || skip "mknod is not permitted here (needs root)"
}

# each_tool_writes OUT [-f] : every tool writes one output to OUT
each_tool_writes() {
    local out=$1 f=${2:-}
    convert --type f16 $f "$TINY" "$out" || return 1
    quantize -q $f --type Q8_0 "$TINY" "$out" || return 1
    generate -m "$TINY" -p hi -n 2 --temp 0 $f -o "$out" 2>/dev/null || return 1
    kvstat -q $f --layers 2 --heads 4 --head-dim 8 -o "$out" || return 1
}

@test "a character device output is written in place, with and without --force" {
    mkchr "$T/null.gguf"
    each_tool_writes "$T/null.gguf" --force
    [ -c "$T/null.gguf" ]
    each_tool_writes "$T/null.gguf"
    [ -c "$T/null.gguf" ]
    [ -z "$(ls "$T" | grep tmp)" ]
}

@test "a FIFO output is written in place: the reader gets the same bytes as a file" {
    mkfifo "$T/p.gguf"
    cat "$T/p.gguf" > "$T/got.gguf" &
    bg=$!
    convert --type f16 "$TINY" "$T/p.gguf"
    [ -p "$T/p.gguf" ]
    wait "$bg"
    convert --type f16 "$TINY" "$T/want.gguf"
    cmp "$T/want.gguf" "$T/got.gguf"
    [ -p "$T/p.gguf" ]
}

@test "a symlink output is followed: the file it names is replaced, the link stays" {
    echo old > "$T/target.gguf"
    ln -s target.gguf "$T/link.gguf"
    run -2 --separate-stderr convert --type f16 "$TINY" "$T/link.gguf"
    [[ "$stderr" == *"already exists"* ]]
    convert --type f16 --force "$TINY" "$T/link.gguf"
    [ -L "$T/link.gguf" ]
    [ "$(readlink "$T/link.gguf")" = target.gguf ]
    convert --type f16 "$TINY" "$T/want.gguf"
    cmp "$T/want.gguf" "$T/target.gguf"
    # the temporary went beside the target, and is gone
    [ -z "$(ls "$T" | grep tmp)" ]
}

@test "a dangling symlink, a block device, a socket and a directory are refused" {
    ln -s nowhere "$T/dang.gguf"
    run -4 --separate-stderr convert --type f16 --force "$TINY" "$T/dang.gguf"
    [[ "$stderr" == "convert: '$T/dang.gguf': "*"dangling"* ]]
    [ -L "$T/dang.gguf" ]
    [ ! -e "$T/nowhere" ]
    # (7, 255): a loop device number; it is never opened
    mknod "$T/blk.gguf" b 7 255 2>/dev/null || skip "mknod is not permitted here (needs root)"
    run -4 --separate-stderr quantize --force --type Q8_0 "$TINY" "$T/blk.gguf"
    [[ "$stderr" == *"'$T/blk.gguf': is a block device"* ]]
    [ -b "$T/blk.gguf" ]
    python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$T/s.gguf"
    run -4 --separate-stderr convert --type f16 --force "$TINY" "$T/s.gguf"
    [[ "$stderr" == *"is a socket"* ]]
    [ -S "$T/s.gguf" ]
    mkdir "$T/d.gguf"
    run -4 --separate-stderr quantize --force --type Q8_0 "$TINY" "$T/d.gguf"
    [[ "$stderr" == *"is a directory"* ]]
    [ -z "$(ls "$T" | grep tmp)" ]
}

@test "an output that is also an input, or two outputs of one path, is refused (2)" {
    cp "$TINY" "$T/m.gguf"
    sum=$(sha256sum < "$T/m.gguf")
    run -2 --separate-stderr convert --type f16 --force "$T/m.gguf" "$T/m.gguf"
    [[ "$stderr" == *"'$T/m.gguf': is also an input"* ]]
    run -2 --separate-stderr quantize --force --type Q8_0 "$T/m.gguf" "$T/m.gguf"
    [[ "$stderr" == *"is also an input"* ]]
    ln -s m.gguf "$T/alias.gguf"
    run -2 --separate-stderr quantize --force --type Q8_0 "$T/m.gguf" "$T/alias.gguf"
    [[ "$stderr" == *"is also an input"* ]]
    run -2 --separate-stderr generate -m "$T/m.gguf" -p hi -n 1 --force -o "$T/m.gguf"
    [[ "$stderr" == *"is also an input"* ]]
    echo hi > "$T/p.txt"
    run -2 --separate-stderr generate -m "$T/m.gguf" -f "$T/p.txt" -n 1 --force -o "$T/p.txt"
    [[ "$stderr" == *"'$T/p.txt': is also an input"* ]]
    [ "$(cat "$T/p.txt")" = hi ]
    [ "$(sha256sum < "$T/m.gguf")" = "$sum" ]
    echo '{"id": "a", "prompt": "hi", "max_tokens": 2}' > "$T/req.jsonl"
    run -2 --separate-stderr generate -m "$TINY16" --batch "$T/req.jsonl" -o "$T/x" --kv-trace "$T/x"
    [[ "$stderr" == *"'$T/x': is named for two outputs"* ]]
    generate -m "$TINY16" --batch "$T/req.jsonl" -o "$T/res.jsonl" --kv-trace "$T/trace.jsonl" 2>/dev/null
    run -2 --separate-stderr kvstat --trace "$T/trace.jsonl" -o "$T/x" --svg "$T/x"
    [[ "$stderr" == *"is named for two outputs"* ]]
    [ ! -e "$T/x" ]
    [ -z "$(ls "$T" | grep tmp)" ]
}

@test "no-clobber holds against a file that appears while a run writes" {
    # generate --batch holds its -o temporary open until its request stream
    # ends, so the file can appear in between, whatever the speed.
    mkfifo "$T/req"
    generate -m "$TINY16" --batch "$T/req" -o "$T/out.jsonl" 2>"$T/err" &
    pid=$! bg=$!
    exec 7>"$T/req"
    for _ in $(seq 600); do ls "$T" | grep -q 'out.jsonl.tmp' && break; sleep 0.1; done
    ls "$T" | grep -q 'out.jsonl.tmp'
    echo precious > "$T/out.jsonl"
    echo '{"id": "a", "prompt": "hi", "max_tokens": 2}' >&7
    exec 7>&-
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq 4 ]
    grep -q "another run wrote it meanwhile" "$T/err"
    [ "$(cat "$T/out.jsonl")" = precious ]
    [ -z "$(ls "$T" | grep tmp)" ]
}

@test "a killed run's temporary is removed by the next run of the same output; a live one is kept" {
    echo stale > "$T/out.gguf.tmp.llmkit-AbC123"
    echo live > "$T/out.gguf.tmp.llmkit-GhI789"
    echo other > "$T/other.gguf.tmp.llmkit-JkL012"
    # names of the user's that merely look alike, and a folder (this output is a file)
    echo mine > "$T/out.gguf.tmp.backup"
    mkdir "$T/out.gguf.tmp.llmkit-DeF456"
    # flock(1) holds the lock a live run would hold on its temporary
    flock "$T/out.gguf.tmp.llmkit-GhI789" convert --type f16 "$TINY" "$T/out.gguf"
    [ -f "$T/out.gguf" ]
    [ ! -e "$T/out.gguf.tmp.llmkit-AbC123" ]
    [ "$(cat "$T/out.gguf.tmp.llmkit-GhI789")" = live ]
    [ "$(cat "$T/other.gguf.tmp.llmkit-JkL012")" = other ]
    [ "$(cat "$T/out.gguf.tmp.backup")" = mine ]
    [ -d "$T/out.gguf.tmp.llmkit-DeF456" ]
}

# ulimit -v : AddressSanitizer reserves terabytes of address space for its
# shadow memory, so a sanitizer build cannot start under an address-space limit
no_ulimit_under_asan() {
    [ "${LLMKIT_SAN:-}" != address ] || skip "ulimit -v: AddressSanitizer cannot start under an address-space limit"
}

@test "out of memory while mapping an input is exit 5 naming the file, in every tool" {
    no_ulimit_under_asan
    # a GGUF grown by 8 GiB of holes cannot be mapped under a 2 GiB
    # address-space limit
    cp "$TINY" "$T/big.gguf"
    truncate -s 8G "$T/big.gguf"
    for cmd in "convert --info" "quantize --type Q8_0" "kvstat" "generate -p hi -m"; do
        out=
        [ "${cmd%% *}" = quantize ] && out="$T/o.gguf"
        run --separate-stderr bash -c "ulimit -v 2000000; $cmd '$T/big.gguf' $out"
        echo "$cmd: $status $stderr"
        [ "$status" -eq 5 ]
        [[ "$stderr" == *"'$T/big.gguf': out of memory mapping the file (8589934592 bytes)"* ]]
    done
    [ ! -e "$T/o.gguf" ]
}

@test "quantize rejects an endless input at its header (3), in bounded memory" {
    lim="ulimit -v 2000000;"
    [ "${LLMKIT_SAN:-}" != address ] || lim=    # (see no_ulimit_under_asan)
    run -3 --separate-stderr bash -c "$lim timeout 60 quantize --type Q8_0 /dev/zero '$T/o.gguf'"
    [[ "$stderr" == *"'/dev/zero': not a GGUF file (bad magic)"* ]]
    # a truncated stream is bad data too
    run -3 --separate-stderr bash -c "head -c 3000 '$TINY' | quantize --type Q8_0 - '$T/o.gguf'"
    [[ "$stderr" == *"end of file"* ]]
    # a whole stream quantizes as the file does
    quantize -q --type Q8_0 - "$T/a.gguf" < "$TINY"
    quantize -q --type Q8_0 "$TINY" "$T/b.gguf"
    cmp "$T/a.gguf" "$T/b.gguf"
    [ -z "$(ls "$T" | grep tmp)" ]
}

@test "quantize: a report that cannot be written leaves no model and no imatrix (4)" {
    [ -w /dev/full ] || skip "no /dev/full"
    run -4 --separate-stderr bash -c "quantize --json --type Q8_0 '$TINY' '$T/q.gguf' > /dev/full"
    [[ "$stderr" == *"stdout"*"No space left on device"* ]]
    [ ! -e "$T/q.gguf" ]
    printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 200) > "$T/cal.txt"
    run -4 --separate-stderr bash -c "quantize --json --type Q4_K_M --calib '$T/cal.txt' --calib-ctx 32 \
        --imatrix-out '$T/im.gguf' '$TINY' '$T/q.gguf' > /dev/full"
    [[ "$stderr" == *"stdout"*"No space left on device"* ]]
    [ ! -e "$T/q.gguf" ]
    [ ! -e "$T/im.gguf" ]
    [ -z "$(ls "$T" | grep tmp)" ]
}

@test "/dev/stdout and a process substitution are written in place" {
    kvstat --layers 2 --heads 4 --head-dim 8 > "$T/want.txt"
    kvstat --layers 2 --heads 4 --head-dim 8 -o /dev/stdout | cat > "$T/got.txt"
    cmp "$T/want.txt" "$T/got.txt"
    kvstat --layers 2 --heads 4 --head-dim 8 -o >(cat > "$T/sub.txt")
    for _ in $(seq 100); do [ -s "$T/sub.txt" ] && break; sleep 0.1; done
    cmp "$T/want.txt" "$T/sub.txt"
}

@test "every input of a run is protected from its outputs" {
    cp "$TINY" "$T/m.gguf"
    printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 200) > "$T/cal.txt"
    cp "$T/cal.txt" "$T/keep.txt"
    run -2 --separate-stderr quantize -f --type Q4_K_M --calib "$T/cal.txt" "$T/m.gguf" "$T/cal.txt"
    [[ "$stderr" == *"is also an input"* ]]
    run -2 --separate-stderr quantize -f --type Q4_K_M --calib "$T/cal.txt" --imatrix-out "$T/cal.txt" \
        "$T/m.gguf" "$T/q.gguf"
    [[ "$stderr" == *"is also an input"* ]]
    cmp "$T/cal.txt" "$T/keep.txt"
    run -2 --separate-stderr bash -c "quantize -f --type Q8_0 - '$T/m.gguf' < '$T/m.gguf'"
    [[ "$stderr" == *"is also an input"* ]]
    cmp "$T/m.gguf" "$TINY"
    run -2 --separate-stderr kvstat -f "$T/m.gguf" -o "$T/m.gguf"
    [[ "$stderr" == *"is also an input"* ]]
    cmp "$T/m.gguf" "$TINY"
    run -2 --separate-stderr generate -m "$T/m.gguf" --perplexity "$T/cal.txt" -o "$T/cal.txt" --force
    [[ "$stderr" == *"is also an input"* ]]
    cmp "$T/cal.txt" "$T/keep.txt"
}

# mkgguf OUT PYTHON : a GGUF built with tests/cli/lib/mkbad_gguf.py's G, changed by PYTHON
mkgguf() {
    python3 -c "import sys; sys.path.insert(0, sys.argv[1])
from mkbad_gguf import G, kv, s, T_STR
g = G()
$2
open(sys.argv[2], 'wb').write(g.render()[0])" "$TOP/tests/cli/lib" "$1"
}

@test "quantize: a pipe whose header is larger than the first buffer" {
    mkgguf "$T/big.gguf" "g.kvs.append(kv('x.padding', T_STR, s('a' * 20000000)))"
    run --separate-stderr quantize -q --type Q8_0 "$T/big.gguf" "$T/a.gguf"
    want=$status
    run --separate-stderr bash -c "cat '$T/big.gguf' | quantize -q --type Q8_0 - '$T/b.gguf'"
    [ "$status" -eq "$want" ]
    [ "$want" -ne 0 ] || cmp "$T/a.gguf" "$T/b.gguf"
}

@test "quantize: a pipe declaring more data than memory holds is refused (5) before reading it" {
    mkgguf "$T/huge.gguf" "g.tensors = [('a.weight', [1 << 20, 1 << 20], 0, 64)]"
    head -c 4096 "$T/huge.gguf" > "$T/head.gguf"
    run -5 --separate-stderr bash -c "{ cat '$T/head.gguf'; cat /dev/zero; } | quantize --type Q8_0 - '$T/o.gguf'"
    [[ "$stderr" == *"cannot fit in memory"* ]]
}

@test "quantize --eval refuses an output it cannot read back (2)" {
    mkchr "$T/null.gguf"
    echo "some text" > "$T/e.txt"
    run -2 --separate-stderr quantize --type Q8_0 --eval "$T/e.txt" "$TINY" "$T/null.gguf"
    [[ "$stderr" == *"--eval reads OUTPUT back"* ]]
}

@test "an output name too long for its temporary (NAME.tmp.llmkit-XXXXXX) fails at once (4), nothing left" {
    cd "$BATS_TEST_TMPDIR"
    local long ok
    long=$(printf 'a%.0s' {1..240}).gguf
    ok=$(printf 'a%.0s' {1..232}).gguf
    run -4 --separate-stderr convert --type f16 "$TINY" "$long"
    [[ "$stderr" == *"file name too long for its temporary"* ]]
    run -4 --separate-stderr quantize --type Q8_0 "$TINY" "$long"
    [[ "$stderr" == *"file name too long for its temporary"* ]]
    run -4 --separate-stderr draft-train -m "$TINY" --data "$SHARED/data/calibration-groups-merged.txt" \
        -o "$long" --epochs 1 --seq-len 32
    [[ "$stderr" == *"file name too long for its temporary"* ]]
    [ -z "$(ls | grep -e '\.gguf' -e tmp)" ] || { ls; return 1; }
    # the longest that fits is written
    run -0 convert --type f16 "$TINY" "$ok"
    [ -f "$ok" ]
}

@test "draft-train: an output name too long for its checkpoint's temporary (NAME.ckpt.tmp.llmkit-XXXXXX) fails at once (4), nothing left" {
    cd "$BATS_TEST_TMPDIR"
    local long ok
    head -c 12000 "$SHARED/data/calibration-groups-merged.txt" > text.txt
    # the output's own temporary fits; its checkpoint's, 5 bytes longer, not
    long=$(printf 'a%.0s' {1..232}).gguf
    ok=$(printf 'a%.0s' {1..227}).gguf
    run -4 --separate-stderr draft-train -m "$TINY" --data text.txt -o "$long" --epochs 1 \
        --seq-len 32 --checkpoint-every 1 --json
    [[ "$stderr" == *"checkpoint '$long.ckpt': file name too long for its temporary"* ]]
    [ -z "$output" ]        # no step trained
    [ -z "$(ls | grep -e '\.gguf' -e tmp)" ] || { ls; return 1; }
    # the longest whose checkpoint fits is trained and checkpointed
    run -0 draft-train -m "$TINY" --data text.txt -o "$ok" --epochs 2 --seq-len 32 \
        --checkpoint-every 1 -q
    [ -f "$ok" ]
}
