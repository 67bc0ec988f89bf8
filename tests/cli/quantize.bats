#!/usr/bin/env bats
# quantize: options, exit codes, atomic output, pipes, and tensor data
# identical to llama-quantize's (goldens from scripts/mkgolden-quantize).

load common

FIX="$TOP/tests/fixtures"
GOLD="$TOP/tests/golden/quantize"
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA=gemma-3-270m.Q4_K_M.gguf
CALIB="$SHARED/data/calibration-groups-merged.txt"
EVAL="$SHARED/data/wikitext-2-test.raw"
PY="${LLMKIT_CACHE}/venv/bin/python"

# listing : our --json tensor records as "name type sha256[:16]" lines
listing() {
    jq -r 'select(.type == "tensor") | "\(.name) \(.ggml_type) \(.sha256[0:16])"'
}

# case_opts CASE : our options for a golden case name
case_opts() {
    case $1 in
    *-imatrix) echo "--type ${1%-imatrix}" ;;
    pure-*) echo "--pure --type ${1#pure-}" ;;
    tt-*) echo "--tensor-type attn_v=q8_0 --tensor-type ffn_(up|gate)=q5_k --type ${1#tt-}" ;;
    keep-output-*) echo "--keep-output --type ${1#keep-output-}" ;;
    output-type-*) echo "--output-type q8_0 --type ${1#output-type-}" ;;
    embd-type-*) echo "--embd-type q4_0 --type ${1#embd-type-}" ;;
    *) echo "--type $1" ;;
    esac
}

# check_case MODEL_GGUF IMATRIX CASE : prints our listing for the case
run_case() {
    local m=$1 imx=$2 c=$3 extra=()
    [[ $c == *-imatrix ]] && extra=(--imatrix "$imx")
    # shellcheck disable=SC2046
    quantize -q -f -t 2 --json "${extra[@]}" $(case_opts "$c") "$m" "$BATS_TEST_TMPDIR/c.gguf" | listing
}

need_py() {
    if ! "$PY" -c 'import gguf, numpy' 2>/dev/null; then
        [ "${CI:-}" != true ] || { echo "no venv at $PY (scripts/pyenv)"; return 1; }
        skip "no gguf-py venv (run scripts/pyenv)"
    fi
}

# rewrite_imatrix SRC DST IN_SUM N_NAMES : the GGUF imatrix SRC written
# again by gguf-py to DST; with IN_SUM "in_sum", a NAME.in_sum beside each
# NAME.in_sum2 (llama-imatrix's newer files); with N_NAMES > 0, that many
# made-up dataset names in place of SRC's
rewrite_imatrix() {
    "$PY" - "$@" <<'PY'
import sys, gguf, numpy as np
r = gguf.GGUFReader(sys.argv[1])
in_sum, n_names = sys.argv[3] == "in_sum", int(sys.argv[4])
w = gguf.GGUFWriter(sys.argv[2], "imatrix")
w.add_type("imatrix")
w.add_array("imatrix.datasets",
            ["calibration text %05d, %s" % (i, "x" * (i % 50)) for i in range(n_names)] if n_names
            else [str(x) for x in r.fields["imatrix.datasets"].contents()])
for k in ("imatrix.chunk_count", "imatrix.chunk_size"):
    w.add_uint32(k, int(r.fields[k].contents()))
for t in r.tensors:
    a = np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
    w.add_tensor(t.name, a)
    if in_sum and t.name.endswith(".in_sum2"):
        w.add_tensor(t.name[:-len("in_sum2")] + "in_sum", np.sqrt(a))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
}

# feed FIFO CMD... : runs CMD in the background, its output into FIFO.  A
# quantize that fails before it opens the FIFO leaves the writer blocked in
# open(2), one that stops reading leaves it to SIGPIPE: teardown kills and
# reaps whatever is left, so no test leaves a process behind.
FEEDS=()
feed() {
    local fifo=$1
    shift
    "$@" >"$fifo" 2>/dev/null 3>&- &
    FEEDS+=($!)
}

teardown() {
    local p
    for p in "${FEEDS[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}

# ---- usage and errors ----

@test "--help prints the usage and every file type on stdout, exit 0" {
    run -0 --separate-stderr quantize --help
    assert_output --partial 'usage: quantize'
    assert_output --partial 'Q4_K_M'
    assert_output --partial 'IQ4_NL'
    [ -z "$stderr" ]
}

@test "usage errors exit 2 with the usage line on stderr" {
    run -2 --separate-stderr quantize --bogus a b
    [[ "$stderr" == *"usage: quantize"* ]]
    run -2 --separate-stderr quantize "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/o.gguf"
    [[ "$stderr" == *"missing --type"* ]]
    run -2 --separate-stderr quantize --type Q9_K "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/o.gguf"
    [[ "$stderr" == *"unknown file type 'Q9_K'"* ]]
    run -2 --separate-stderr quantize --type Q4_0 --tensor-type attn_v "$FIX/tiny-llama-f32.gguf" x.gguf
    [[ "$stderr" == *"PATTERN=TYPE"* ]]
    run -2 --separate-stderr quantize --type Q4_0 --tensor-type attn_v=q7_0 "$FIX/tiny-llama-f32.gguf" x.gguf
    run -2 --separate-stderr quantize --type Q4_0 --tensor-type '(=q8_0' "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/o.gguf"
    [[ "$stderr" == *"pattern"* ]]
    run -2 --separate-stderr quantize --type Q4_0 "$FIX/tiny-llama-f32.gguf"
    run -2 --separate-stderr quantize --type Q4_0 --imatrix a --calib b "$FIX/tiny-llama-f32.gguf" o.gguf
    run -2 --separate-stderr quantize --type Q4_0 --eval "$EVAL" "$FIX/tiny-llama-f32.gguf" -
    [ ! -e "$BATS_TEST_TMPDIR/o.gguf" ]
}

@test "bad input: missing file 4, bad magic 3, truncated 3, and no output left behind" {
    cd "$BATS_TEST_TMPDIR"
    run -4 --separate-stderr quantize --type Q4_0 nope.gguf o.gguf
    [[ "$stderr" == *"'nope.gguf'"* ]]
    printf 'GGUX0000000000000000000000000000' >bad.gguf
    run -3 --separate-stderr quantize --type Q4_0 bad.gguf o.gguf
    head -c 5000 "$FIX/tiny-llama-f32.gguf" >trunc.gguf
    run -3 --separate-stderr quantize --type Q4_0 trunc.gguf o.gguf
    run -3 --separate-stderr quantize --type Q4_0 - o.gguf <trunc.gguf
    [ ! -e o.gguf ]
    [ -z "$(ls | grep tmp)" ]
}

@test "an existing output is kept without -f (exit 2) and replaced with -f" {
    cd "$BATS_TEST_TMPDIR"
    echo keep >o.gguf
    run -2 --separate-stderr quantize --type Q8_0 "$FIX/tiny-llama-f32.gguf" o.gguf
    [ "$(cat o.gguf)" = keep ]
    run -0 quantize -q -f --type Q8_0 "$FIX/tiny-llama-f32.gguf" o.gguf
    [ "$(head -c 4 o.gguf)" = GGUF ]
}

@test "a bad imatrix file is bad input (3) and a missing one an I/O error (4)" {
    cd "$BATS_TEST_TMPDIR"
    printf '\x01\x00\x00\x00\xff\xff\x00\x00' >bad.dat
    run -3 --separate-stderr quantize --type Q4_0 --imatrix bad.dat "$FIX/tiny-llama-f32.gguf" o.gguf
    run -4 --separate-stderr quantize --type Q4_0 --imatrix none.dat "$FIX/tiny-llama-f32.gguf" o.gguf
    # a NaN in any entry, used or not, is refused as llama-quantize refuses it
    run -3 --separate-stderr quantize --type Q4_0 --imatrix "$TOP/tests/fuzz/corpus/imatrix/dat-nan.dat" \
        "$FIX/tiny-llama-f32.gguf" o.gguf
    [[ "$stderr" == *"non-finite"* ]]
    [ ! -e o.gguf ]
}

@test "bad weights name the model, bad imatrix entries the imatrix file (3)" {
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama-f32.gguf off
    # a NaN in blk.0.attn_q.weight
    cp "$m" nan.gguf
    off=$(convert --info --json nan.gguf |
          jq -r 'select(.name == "blk.0.attn_q.weight") | .file_offset')
    printf '\x00\x00\xc0\x7f' | dd of=nan.gguf bs=1 seek=$((off + 40)) conv=notrunc 2>/dev/null
    run -3 --separate-stderr quantize --type Q8_0 nan.gguf o.gguf
    [ "$stderr" = "quantize: 'nan.gguf': tensor 'blk.0.attn_q.weight': non-finite weights (NaN or infinity)" ]
    run -3 --separate-stderr quantize --type Q8_0 - o.gguf < nan.gguf
    [ "$stderr" = "quantize: '-': tensor 'blk.0.attn_q.weight': non-finite weights (NaN or infinity)" ]
    # an entry one value short (legacy .dat: 1 entry, name, ncall 1, 63 values)
    python3 -c '
import struct, sys
n = b"blk.0.attn_q.weight"
sys.stdout.buffer.write(struct.pack("<ii", 1, len(n)) + n + struct.pack("<ii", 1, 63) + b"\0\0\x80\x3f" * 63)' > short.dat
    run -3 --separate-stderr quantize --type Q4_0 --imatrix short.dat "$m" o.gguf
    [ "$stderr" = "quantize: 'short.dat': entry 'blk.0.attn_q.weight' has 63 values, the tensor's rows in '$m' have 64" ]
    # a NaN in an entry
    run -3 --separate-stderr quantize --type Q4_0 --imatrix "$TOP/tests/fuzz/corpus/imatrix/dat-nan.dat" "$m" o.gguf
    [[ "$stderr" == "quantize: '$TOP/tests/fuzz/corpus/imatrix/dat-nan.dat': imatrix entry '"*"' contains a non-finite value" ]]
    [ ! -e o.gguf ]
}

@test "--imatrix and --calib from a FIFO or a pipe are read once, as a file is" {
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama256-f32.gguf im=$GOLD/tiny-llama256-f32.imatrix.gguf
    local cal=(--calib-ctx 64 --calib-chunks 2)
    head -c 20000 "$CALIB" > calib.txt
    mkfifo fifo
    # (a writer's timeout only keeps a quantize that opens the FIFO twice,
    # and waits for a second writer, from hanging the test)
    quantize -q --json --type Q4_K_M --imatrix "$im" "$m" a.gguf > a.json
    timeout 60 cp "$im" fifo &
    timeout 60 quantize -q --json --type Q4_K_M --imatrix fifo "$m" b.gguf > b.json
    wait
    quantize -q --json --type Q4_K_M --imatrix - "$m" c.gguf < "$im" > c.json
    diff <(listing < a.json) <(listing < b.json)
    diff <(listing < a.json) <(listing < c.json)
    # provenance: the hash of the bytes read, for a stream too
    for f in b c; do
        convert --info --json $f.gguf |
            jq -r 'select(.key == "llmkit.quantize.imatrix_sha256") | .value' > $f.sha
        [ "$(cat $f.sha)" = "$(sha256sum < "$im" | cut -c1-64)" ]
    done
    quantize -q --json --type Q4_K_M --calib calib.txt "${cal[@]}" "$m" d.gguf > d.json
    timeout 60 cp calib.txt fifo &
    timeout 60 quantize -q --json --type Q4_K_M --calib fifo "${cal[@]}" "$m" e.gguf > e.json
    wait
    diff <(listing < d.json) <(listing < e.json)
    convert --info --json e.gguf |
        jq -r 'select(.key == "llmkit.quantize.calib_sha256") | .value' > e.sha
    [ "$(cat e.sha)" = "$(sha256sum < calib.txt | cut -c1-64)" ]
}

@test "an imatrix stream is checked at its first bytes: /dev/zero fails at once (3)" {
    cd "$BATS_TEST_TMPDIR"
    local lim="ulimit -v 2000000;"
    [ "${LLMKIT_SAN:-}" != address ] || lim=    # ASan cannot start under an address-space limit
    # (it was read whole, 4 GiB, before it was refused)
    run -3 --separate-stderr bash -c "$lim timeout 60 quantize --type Q8_0 --imatrix /dev/zero \
        '$FIX/tiny-llama-f32.gguf' o.gguf"
    [ "$stderr" = "quantize: '/dev/zero': not an imatrix file (neither GGUF nor a legacy .dat with entries)" ]
    # a GGUF header with more tensors than an imatrix file can hold, then zeros
    run -3 --separate-stderr bash -c "$lim (printf 'GGUF\x03\0\0\0\0\0\0\0\0\x01\0\0\x01\0\0\0\0\0\0\0'
        exec cat /dev/zero) | timeout 60 quantize --type Q8_0 --imatrix - '$FIX/tiny-llama-f32.gguf' o.gguf"
    [[ "$stderr" == "quantize: '-': corrupt GGUF header: 1099511627776 tensors and 1 metadata records cannot fit"* ]]
    [ ! -e o.gguf ]
}

@test "a GGUF imatrix with llama-imatrix's newer NAME.in_sum tensors reads from a pipe as from a file" {
    need_py
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama-f32.gguf
    # the golden's entries (NAME.in_sum2, NAME.counts) with NAME.in_sum added:
    # three tensors an entry, as llama-imatrix writes them now
    rewrite_imatrix "$GOLD/tiny-llama-f32.imatrix.gguf" im.gguf in_sum 0
    [ "$("$PY" -c 'import gguf, sys; print(len(gguf.GGUFReader(sys.argv[1]).tensors))' im.gguf)" = 42 ]
    quantize -q --type Q4_K_M --imatrix "$GOLD/tiny-llama-f32.imatrix.gguf" "$m" gold.gguf
    run -0 --separate-stderr bash -c "cat im.gguf | quantize -q --type Q4_K_M --imatrix - '$m' pipe.gguf"
    quantize -q --type Q4_K_M --imatrix im.gguf "$m" file.gguf
    # the same weights all three ways (in_sum is not used; the metadata names the file)
    "$PY" -c 'import gguf, sys, numpy as np
a, b, c = (gguf.GGUFReader(f).tensors for f in sys.argv[1:])
assert all(np.array_equal(x.data, y.data) and np.array_equal(x.data, z.data) for x, y, z in zip(a, b, c))' \
        gold.gguf pipe.gguf file.gguf
}

@test "a GGUF imatrix stream whose metadata spans several reads is checked record by record as it arrives" {
    need_py
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama-f32.gguf
    # 6000 dataset names: about 290 KB of metadata, so that records are cut
    # at the ends of the stream's first reads (64 KiB, then doubling)
    rewrite_imatrix "$GOLD/tiny-llama-f32.imatrix.gguf" big.gguf - 6000
    quantize -q --type Q4_K_M --imatrix - "$m" file.gguf < big.gguf
    cat big.gguf | quantize -q --type Q4_K_M --imatrix - "$m" pipe.gguf
    cmp file.gguf pipe.gguf
}

@test "an imatrix is bounded by the model: too many entries or values fail (3) before an endless stream is read on" {
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama-f32.gguf lim="ulimit -v 2000000;" q
    [ "${LLMKIT_SAN:-}" != address ] || lim=    # ASan cannot start under an address-space limit
    # (each stream was read up to 4 GiB before it was refused: the timeout and
    # the memory limit only make a regression fail instead of hang or swap;
    # the tiny model has 20 tensors, its widest row 128 values)
    q="timeout 20 quantize --type Q8_0 --imatrix - '$m' o.gguf"
    local name='\x13\0\0\0blk.0.attn_q.weight'
    # legacy: 5 entries, then zeros (a name of length 0)
    run -3 --separate-stderr bash -c "$lim { printf '\x05\0\0\0'; exec cat /dev/zero; } | $q"
    [ "$stderr" = "quantize: '-': entry 1: bad name length" ]
    # legacy: more entries than the model has tensors
    run -3 --separate-stderr bash -c "$lim { printf '\xe8\x03\0\0'; exec cat /dev/zero; } | $q"
    [ "$stderr" = "quantize: '-': 1000 entries, but the model has only 20 tensors" ]
    # legacy: an entry with more values than any row
    run -3 --separate-stderr bash -c "$lim { printf '\x01\0\0\0$name\x01\0\0\0\xff\xff\xff\x0f'
        exec cat /dev/zero; } | $q"
    [ "$stderr" = "quantize: '-': entry 'blk.0.attn_q.weight' has 268435455 values, more than any tensor's row of the model (128)" ]
    # legacy: one believable entry, then no end
    run -3 --separate-stderr bash -c "$lim { printf '\x01\0\0\0$name\x01\0\0\0\x40\0\0\0'
        exec cat /dev/zero; } | $q"
    [[ "$stderr" == "quantize: '-': larger than "*" bytes (not an imatrix file of the model)" ]]
    # GGUF: more tensors than four per tensor of the model; a believable count, then no end
    run -3 --separate-stderr bash -c "$lim { printf 'GGUF\x03\0\0\0\xff\0\0\0\0\0\0\0\x04\0\0\0\0\0\0\0'
        exec yes; } | $q"
    [ "$stderr" = "quantize: '-': 255 tensors, but an imatrix of the model has at most 80 (4 per tensor of the model)" ]
    # (a believable count: each record is checked as it arrives, and the first
    # that no imatrix of the model has fails there, not at the size bound)
    run -3 --separate-stderr bash -c "$lim { printf 'GGUF\x03\0\0\0\x04\0\0\0\0\0\0\0\x04\0\0\0\0\0\0\0'
        exec yes; } | $q"
    [ "$stderr" = "quantize: '-': metadata record 0: key at offset 24: length 754645927544294009 exceeds limit 65535" ]
    # GGUF: a string longer than the metadata an imatrix file has
    run -3 --separate-stderr bash -c "$lim { printf 'GGUF\x03\0\0\0\x04\0\0\0\0\0\0\0\x04\0\0\0\0\0\0\0'
        printf '\x10\0\0\0\0\0\0\0imatrix.datasets\x08\0\0\0\0\0\x10\0\0\0\0\0'; exec yes; } | $q"
    [ "$stderr" = "quantize: '-': key 'imatrix.datasets': value of 1048576 bytes at offset 60, more metadata than an imatrix file has (1048576 bytes)" ]
    # GGUF: a tensor with more values than any row of the model
    local ts='\x1b\0\0\0\0\0\0\0blk.0.attn_q.weight.in_sum2\x01\0\0\0\xa0\x86\x01\0\0\0\0\0'
    run -3 --separate-stderr bash -c "$lim { printf 'GGUF\x03\0\0\0\x02\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0$ts'
        exec cat /dev/zero; } | $q"
    [ "$stderr" = "quantize: '-': tensor 'blk.0.attn_q.weight.in_sum2' has more values than any tensor's row of the model (128)" ]
    # a file is held to the same bounds (an entry of 200 values, read whole)
    python3 -c '
import struct, sys
n = b"blk.0.attn_q.weight"
sys.stdout.buffer.write(struct.pack("<ii", 1, len(n)) + n + struct.pack("<ii", 1, 200) + b"\0\0\x80\x3f" * 200)' > wide.dat
    run -3 --separate-stderr quantize --type Q8_0 --imatrix wide.dat "$m" o.gguf
    [ "$stderr" = "quantize: 'wide.dat': entry 'blk.0.attn_q.weight' has 200 values, more than any tensor's row of the model (128)" ]
    run -3 --separate-stderr bash -c "cat wide.dat | $q"
    [ "$stderr" = "quantize: '-': entry 'blk.0.attn_q.weight' has 200 values, more than any tensor's row of the model (128)" ]
    [ ! -e o.gguf ]
}

@test "INPUT from a pipe or FIFO: the imatrix is held to the model's bounds as with a file (3), and read no further" {
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama-f32.gguf name='\x13\0\0\0blk.0.attn_q.weight'
    mkfifo in.fifo
    # INPUT's header is read before the imatrix (it was read after, so that
    # with INPUT a stream the imatrix had no bound but 4 GiB).  Each imatrix
    # below is followed by 64 MiB: w.rc, the status of head(1) that writes
    # them, is not 0 when quantize stopped reading before their end (it read
    # all 64 MiB before).
    local zeros='head -c 64M /dev/zero 2>/dev/null; echo $? >w.rc'
    # legacy: more entries than the model has tensors
    feed in.fifo cat "$m"
    run -3 --separate-stderr bash -c "{ printf '\xe8\x03\0\0'; $zeros; } |
        quantize --type Q8_0 --imatrix - in.fifo o.gguf"
    [ "$stderr" = "quantize: '-': 1000 entries, but the model has only 20 tensors" ]
    [ "$(cat w.rc)" != 0 ]
    # legacy: one believable entry, then no end: no further than the model's bound
    feed in.fifo cat "$m"
    run -3 --separate-stderr bash -c "{ printf '\x01\0\0\0$name\x01\0\0\0\x40\0\0\0'; $zeros; } |
        quantize --type Q8_0 --imatrix - in.fifo o.gguf"
    [[ "$stderr" == "quantize: '-': larger than "*" bytes (not an imatrix file of the model)" ]]
    [ "$(cat w.rc)" != 0 ]
    # GGUF: a believable header, then a first record that is no imatrix's
    feed in.fifo cat "$m"
    run -3 --separate-stderr bash -c "{ printf 'GGUF\x03\0\0\0\x04\0\0\0\0\0\0\0\x04\0\0\0\0\0\0\0'
        yes | head -c 64M 2>/dev/null; echo \${PIPESTATUS[1]} >w.rc; } | quantize --type Q8_0 --imatrix - in.fifo o.gguf"
    [ "$stderr" = "quantize: '-': metadata record 0: key at offset 24: length 754645927544294009 exceeds limit 65535" ]
    [ "$(cat w.rc)" != 0 ]
    # a whole legacy file with an entry wider than any row, INPUT a pipe
    python3 -c '
import struct, sys
n = b"blk.0.attn_q.weight"
sys.stdout.buffer.write(struct.pack("<ii", 1, len(n)) + n + struct.pack("<ii", 1, 200) + b"\0\0\x80\x3f" * 200)' > wide.dat
    run -3 --separate-stderr bash -c "cat '$m' | quantize --type Q8_0 --imatrix wide.dat - o.gguf"
    [ "$stderr" = "quantize: 'wide.dat': entry 'blk.0.attn_q.weight' has 200 values, more than any tensor's row of the model (128)" ]
    [ ! -e o.gguf ]
}

@test "INPUT from a pipe: an --imatrix FIFO whose writer never stops fails (3) at the model's bound" {
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama-f32.gguf lim="ulimit -v 2000000;" q
    [ "${LLMKIT_SAN:-}" != address ] || lim=    # ASan cannot start under an address-space limit
    # (the timeout and the memory limit only make a regression fail instead
    # of hang or swap: it read up to 4 GiB)
    q="$lim cat '$m' | timeout 60 quantize --type Q8_0 --imatrix im.fifo - o.gguf"
    mkfifo im.fifo
    # yes: a legacy count of 175704697 entries ("y\ny\n")
    feed im.fifo yes
    run -3 --separate-stderr bash -c "$q"
    [ "$stderr" = "quantize: 'im.fifo': 175704697 entries, but the model has only 20 tensors" ]
    feed im.fifo bash -c "printf 'GGUF\x03\0\0\0\x04\0\0\0\0\0\0\0\x04\0\0\0\0\0\0\0'; exec yes"
    run -3 --separate-stderr bash -c "$q"
    [ "$stderr" = "quantize: 'im.fifo': metadata record 0: key at offset 24: length 754645927544294009 exceeds limit 65535" ]
    feed im.fifo bash -c "printf '\x01\0\0\0\x13\0\0\0blk.0.attn_q.weight\x01\0\0\0\x40\0\0\0'; exec cat /dev/zero"
    run -3 --separate-stderr bash -c "$q"
    [[ "$stderr" == "quantize: 'im.fifo': larger than "*" bytes (not an imatrix file of the model)" ]]
    [ ! -e o.gguf ]
}

@test "a valid imatrix with INPUT from a pipe or FIFO gives the bytes it gives with INPUT a file" {
    cd "$BATS_TEST_TMPDIR"
    local m=$FIX/tiny-llama256-f32.gguf im=$GOLD/tiny-llama256-f32.imatrix.gguf
    mkfifo in.fifo im.fifo
    # (the same --imatrix name each time: the output records it)
    quantize -q --type Q4_K_M --imatrix - "$m" file.gguf < "$im"
    feed in.fifo cat "$m"
    quantize -q --type Q4_K_M --imatrix - in.fifo fifo.gguf < "$im"
    cmp file.gguf fifo.gguf
    quantize -q --type Q4_K_M --imatrix "$im" "$m" file2.gguf
    quantize -q --type Q4_K_M --imatrix "$im" - pipe.gguf < "$m"
    cmp file2.gguf pipe.gguf
    # both streams, the imatrix a FIFO (GGUF), then a legacy .dat
    feed im.fifo cat "$im"
    cat "$m" | quantize -q --type Q4_K_M --imatrix im.fifo - a.gguf
    feed im.fifo cat "$im"
    quantize -q --type Q4_K_M --imatrix im.fifo "$m" b.gguf
    cmp a.gguf b.gguf
    python3 -c '
import struct, sys
n = b"blk.0.attn_q.weight"
sys.stdout.buffer.write(struct.pack("<ii", 1, len(n)) + n + struct.pack("<ii", 1, 256) +
                        struct.pack("<256f", *[1.0 + i / 64 for i in range(256)]) + struct.pack("<ii", 2, 0))' > one.dat
    feed im.fifo cat one.dat
    cat "$m" | quantize -q --type Q4_K_M --imatrix im.fifo - c.gguf
    feed im.fifo cat one.dat
    quantize -q --type Q4_K_M --imatrix im.fifo "$m" d.gguf
    cmp c.gguf d.gguf
    if cmp -s c.gguf a.gguf; then echo "the .dat entry changed nothing"; return 1; fi
}

@test "an INPUT read twice (--calib, --eval, --method) must be a file, not a pipe or FIFO (2)" {
    cd "$BATS_TEST_TMPDIR"
    head -c 20000 "$CALIB" > calib.txt
    mkfifo fifo         # no writer: a quantize that opens it waits (the timeout ends it)
    local want="--calib and --eval read INPUT twice: it must be a file, not '-', a pipe or a device"
    run -2 --separate-stderr timeout 60 quantize --type Q4_K_M --calib calib.txt fifo o.gguf
    [[ "$stderr" == "quantize: $want"* ]]
    run -2 --separate-stderr timeout 60 quantize --type Q4_K_M --eval calib.txt fifo o.gguf
    [[ "$stderr" == "quantize: $want"* ]]
    run -2 --separate-stderr timeout 60 quantize --type Q4_K_M --calib calib.txt - o.gguf < /dev/null
    [[ "$stderr" == "quantize: $want"* ]]
    run -2 --separate-stderr timeout 60 quantize --method rtn fifo o.gguf
    [[ "$stderr" == "quantize: --method reads INPUT twice: it must be a file, not '-', a pipe or a device"* ]]
    run -2 --separate-stderr timeout 60 quantize --type Q8_0 --imatrix - - o.gguf < /dev/null
    [[ "$stderr" == "quantize: --imatrix and INPUT cannot both read standard input"* ]]
    [ ! -e o.gguf ]
}

@test "binary output to a terminal is refused without -f" {
    command -v script >/dev/null || skip "script(1) not installed"
    run script -qec "$LLMKIT_BIN/quantize --type Q8_0 $FIX/tiny-llama-f32.gguf -" /dev/null
    [ "$status" -eq 2 ]
    assert_output --partial 'refusing to write binary output to a terminal'
}

@test "a write error (disk full) is an I/O error" {
    [ -w /dev/full ] || skip "no /dev/full"
    run -4 --separate-stderr bash -c "quantize --type Q8_0 '$FIX/tiny-llama-f32.gguf' - > /dev/full"
    [[ "$stderr" == *"No space left on device"* ]]
}

@test "SIGINT leaves no partial output or temporary file" {
    # No race: stderr is a FIFO whose pipe is full and never read, and
    # --progress makes quantize write a bar there after it created its
    # temporary and before it renames it (the final bar is drawn before the
    # commit), so it cannot finish (blocked writing) whenever SIGINT arrives.
    # A piped input would not do: quantize may read a stream whole before it
    # opens its output.  -q keeps every other message off that pipe.
    local fifo=$BATS_TEST_TMPDIR/err e pid rc=0
    mkdir "$BATS_TEST_TMPDIR/o"
    mkfifo "$fifo"
    exec {e}<>"$fifo"           # a reader that never reads
    # Fill the pipe: one byte per non-blocking write until the pipe refuses.
    dd if=/dev/zero of="$fifo" bs=1 count=16M oflag=nonblock 2>/dev/null || true
    quantize -q --progress -t 1 --type Q4_K_S "$FIX/tiny-llama256-f32.gguf" "$BATS_TEST_TMPDIR/o/q.gguf" \
        2>"$fifo" {e}>&- 3>&- &
    pid=$!
    wait_for_tmp "$BATS_TEST_TMPDIR/o" "$pid"
    kill -INT "$pid"
    wait "$pid" || rc=$?
    exec {e}>&-
    [ "$rc" -eq 130 ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/o")" ]
}

# ---- behaviour ----

@test "pipes: stdin to stdout gives the same bytes as files" {
    cd "$BATS_TEST_TMPDIR"
    quantize -q --type Q4_K_M "$FIX/tiny-llama256-f32.gguf" a.gguf
    convert "$FIX/tiny-llama256-f32.gguf" - | quantize -q --type Q4_K_M - - >b.gguf
    cmp a.gguf b.gguf
    run -0 convert --info b.gguf
    assert_output --regexp 'blk.3.attn_v.weight +Q6_K'    # use_more_bits(3, 4)
    assert_output --regexp 'blk.0.attn_v.weight +Q4_K'
}

@test "the bytes do not depend on the thread count" {
    cd "$BATS_TEST_TMPDIR"
    quantize -q -t 1 --type Q3_K_M "$FIX/tiny-llama256-f32.gguf" a.gguf
    quantize -q -t 3 --type Q3_K_M "$FIX/tiny-llama256-f32.gguf" b.gguf
    cmp a.gguf b.gguf
}

@test "metadata: input keys copied, file type and provenance set, tokenizer kept" {
    cd "$BATS_TEST_TMPDIR"
    quantize -q --type Q4_K_M "$FIX/tiny-llama256-f32.gguf" o.gguf
    run -0 convert --info --json o.gguf
    assert_output --partial '"key":"general.file_type","value_type":"u32","value":15'
    assert_output --partial '"key":"general.quantization_version","value_type":"u32","value":2'
    assert_output --partial '"key":"llmkit.quantize.type","value_type":"str","value":"Q4_K_M"'
    assert_output --partial '"key":"tokenizer.ggml.merges"'
    # the quantized model runs
    run -0 generate -m o.gguf -n 4 --temp 0 -p 'the'
}

@test "--json sha256 is the sha256 of the tensor bytes in the file" {
    need_py
    cd "$BATS_TEST_TMPDIR"
    quantize -q --json --type Q5_K_M "$FIX/tiny-llama256-f32.gguf" o.gguf | listing >ours
    "$PY" - o.gguf >file <<'EOF'
import hashlib, sys
from gguf import GGUFReader
for t in GGUFReader(sys.argv[1]).tensors:
    print(t.name, t.tensor_type.name, hashlib.sha256(t.data.tobytes()).hexdigest()[:16])
EOF
    diff ours file
}

@test "a quantized input is dequantized first, with a warning" {
    cd "$BATS_TEST_TMPDIR"
    quantize -q --type Q8_0 "$FIX/tiny-llama256-f32.gguf" q8.gguf
    run -0 --separate-stderr quantize --type Q4_0 q8.gguf q4.gguf
    [[ "$stderr" == *"quality is lost twice"* ]]
    run -0 convert --info q4.gguf
    assert_output --regexp 'blk.0.ffn_up.weight +Q4_0'
}

# ---- bit-exactness with llama-quantize (tests/golden/quantize) ----

golden_fixture() {
    local fx=$1 bad=0 c
    for g in "$GOLD/$fx"/*.tensors; do
        c=$(basename "$g" .tensors)
        run_case "$FIX/$fx.gguf" "$GOLD/$fx.imatrix.gguf" "$c" >"$BATS_TEST_TMPDIR/ours"
        if ! diff -q "$g" "$BATS_TEST_TMPDIR/ours" >/dev/null; then
            echo "case $c differs from llama-quantize:"
            diff "$g" "$BATS_TEST_TMPDIR/ours" | head -5
            bad=1
        fi
    done
    return $bad
}

@test "golden: tiny-llama-f32 (dim 64, fallbacks) as llama-quantize, every file type +- imatrix" {
    golden_fixture tiny-llama-f32
}

@test "golden: tiny-llama256-f32 as llama-quantize, every file type +- imatrix, pure types, overrides" {
    golden_fixture tiny-llama256-f32
}

# Real models: all 36 cases are in the goldens; `make check` runs the
# subset below (the full list with LLMKIT_SLOW=1): ~1-6 s per case for
# SmolLM2 at scalar speed.
REAL_CASES="Q2_K Q3_K_M Q4_0 Q4_K_M Q5_K_S Q6_K Q8_0 Q4_K_M-imatrix Q4_0-imatrix IQ4_NL-imatrix"

golden_real() {
    local name=$1 f32=$2 bad=0 c want got cases
    cases=$REAL_CASES
    [ -n "${LLMKIT_SLOW:-}" ] && cases=$(cut -d' ' -f1 "$GOLD/$name.digests")
    for c in $cases; do
        want=$(awk -v c="$c" '$1 == c { print $2 }' "$GOLD/$name.digests")
        got=$(run_case "$f32" "$GOLD/$name.imatrix.gguf" "$c" | sha256sum | cut -c1-64)
        if [ "$want" != "$got" ]; then
            echo "case $c differs from llama-quantize"
            bad=1
        fi
    done
    return $bad
}

@test "golden: SmolLM2 (576-wide rows) dequantized to f32, as llama-quantize" {
    not_under_sanitizer
    need_model f "$SMOL"
    convert -q --type f32 "$f" "$BATS_TEST_TMPDIR/s32.gguf"
    golden_real smollm2 "$BATS_TEST_TMPDIR/s32.gguf"
}

@test "golden: gemma-3-270m dequantized to f32, as llama-quantize" {
    not_under_sanitizer
    need_model f "$GEMMA"
    convert -q --type f32 "$f" "$BATS_TEST_TMPDIR/g32.gguf"
    REAL_CASES="Q4_K_M Q4_K_M-imatrix" golden_real gemma3 "$BATS_TEST_TMPDIR/g32.gguf"
}

# ---- importance matrix ----

# imatrix_close A B TOL : every tensor of B is in A; counts and the inputs of
# layer 0's q/k/v (nothing computed before them but a norm) are identical; the
# other sums are within TOL in relative L2 norm per entry.  Attention rounds
# as llama-imatrix's (its tiled flash attention: model.h, llamacpp_ubatch),
# and so do the f32 weights' batched matmuls (llamafile tinyBLAS's order:
# kernels ops->mm_rows_mirror): with the avx2 kernels both matrices below are
# bit-identical to llama-imatrix's (was: SmolLM2 worst 1.3e-4); the scalar
# reference sums in its own order (SmolLM2: median 7e-6, worst 1.4e-4).
imatrix_close() {
    "$PY" - "$@" <<'EOF'
import sys
import numpy as np
from gguf import GGUFReader
def load(p):
    return {t.name: np.array(t.data, dtype=np.float64).ravel() for t in GGUFReader(p).tensors}
a, b = load(sys.argv[1]), load(sys.argv[2])
tol, bad, worst = float(sys.argv[3]), 0, 0.0
for n, v in sorted(b.items()):
    if n not in a:
        print('missing', n); bad += 1; continue
    w = a[n]
    exact = n.endswith('.counts') or any(n.startswith('blk.0.attn_' + x + '.') for x in 'qkv')
    err = np.linalg.norm(w - v) / max(np.linalg.norm(v), 1e-30)
    worst = max(worst, err)
    if (exact and not np.array_equal(w, v)) or err > tol:
        print('%s: relative L2 difference %.3g' % (n, err)); bad += 1
print('%d tensors compared, worst %.3g, %d differ' % (len(b), worst, bad))
sys.exit(1 if bad else 0)
EOF
}

@test "--calib collects llama-imatrix's matrix (fixture, 2 chunks of 64)" {
    need_py
    cd "$BATS_TEST_TMPDIR"
    quantize -q --type Q4_K_M --calib "$CALIB" --calib-ctx 64 --calib-chunks 2 --imatrix-out ours.gguf \
        "$FIX/tiny-llama256-f32.gguf" o.gguf
    run -0 imatrix_close ours.gguf "$GOLD/tiny-llama256-f32.imatrix.gguf" 5e-5
    assert_output --partial '56 tensors compared'
}

@test "--calib: a text too short for two chunks is exit 2 under a memory limit too: checked before the KV pool" {
    [ "${LLMKIT_SAN:-}" != address ] || skip "ulimit -v under AddressSanitizer"
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    run -2 --separate-stderr bash -c 'ulimit -v 250000 && exec "$@"' sh quantize --type q4_0 \
        --calib "$CALIB" --calib-ctx 1048576 "$FIX/tiny-llama-f32.gguf" o.gguf
    [[ "$stderr" == *"calibration with a context of 1048576 needs at least 2097152 tokens"* ]]
    [ -z "$(ls -A)" ]
}

@test "--calib on SmolLM2 matches llama-imatrix (2 chunks of 128)" {
    not_under_sanitizer
    need_py
    need_model f "$SMOL"
    cd "$BATS_TEST_TMPDIR"
    convert -q --type f32 "$f" s32.gguf
    # the issue's 1e-4 with llama.cpp's arithmetic (avx2), else 5e-4
    local kern=ref tol=5e-4
    grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo &&
        kern=avx2 tol=1e-4
    quantize -q --type Q8_0 --kernel "$kern" --calib "$CALIB" --calib-ctx 128 --calib-chunks 2 \
        --imatrix-out ours.gguf s32.gguf o.gguf
    run -0 imatrix_close ours.gguf "$GOLD/smollm2.imatrix.gguf" "$tol"
    assert_output --partial '56 tensors compared'
}

@test "imatrix files: GGUF and legacy .dat written and read back, same quantization" {
    cd "$BATS_TEST_TMPDIR"
    m="$FIX/tiny-llama256-f32.gguf"
    quantize -q --type Q4_K_M --calib "$CALIB" --calib-ctx 64 --calib-chunks 2 --imatrix-out i.gguf "$m" a.gguf
    quantize -q --json --type Q4_K_M --calib "$CALIB" --calib-ctx 64 --calib-chunks 2 --imatrix-out i.dat \
        --imatrix-format dat "$m" b.gguf | listing >lb
    quantize -q --json --type Q4_K_M --imatrix i.gguf "$m" a2.gguf | listing >la
    diff la lb
    quantize -q --type Q4_K_M --imatrix i.gguf "$m" c.gguf
    quantize -q --type Q4_K_M --imatrix i.dat "$m" d.gguf
    quantize -q --json --type Q4_K_M --imatrix i.gguf "$m" e.gguf | listing >le
    quantize -q --json --type Q4_K_M --imatrix i.dat "$m" f.gguf | listing >lf
    diff le lf      # chunk size 64: ncall = 2, so the legacy means may round differently
    quantize -q --json --type Q4_K_M "$m" g.gguf | listing >lg
    if diff -q le lg >/dev/null; then echo "the imatrix changed no k-quant"; return 1; fi
    run -0 --separate-stderr quantize --type Q4_K_M --imatrix i.gguf --exclude-weights attn "$m" h.gguf
    run -0 convert --info --json c.gguf
    assert_output --partial '"key":"quantize.imatrix.entries_count","value_type":"u32","value":28'
    assert_output --partial '"key":"llmkit.quantize.imatrix_sha256"'
    # the last two input-derived keys come after the copied ones, as llama-quantize appends them
    run -0 bash -c "convert --info --json c.gguf | jq -r 'select(.type == \"kv\") | .key' | grep -v '^llmkit' | tail -6 | tr '\n' ' '"
    assert_output 'general.quantization_version general.file_type quantize.imatrix.file quantize.imatrix.dataset quantize.imatrix.entries_count quantize.imatrix.chunks_count '
}

# ---- quality report ----

@test "--eval: an unchanged model has KL 0 and full top-1 agreement; Q2_K does not" {
    cd "$BATS_TEST_TMPDIR"
    m="$FIX/tiny-llama256-f32.gguf"
    run -0 --separate-stderr quantize --json --type F32 --eval "$EVAL" --eval-ctx 32 --eval-chunks 2 "$m" f.gguf
    s=$(echo "$output" | jq -c 'select(.type == "summary")')
    [ "$(echo "$s" | jq '.kld_mean')" = 0 ]
    [ "$(echo "$s" | jq '.top1_agreement')" = 1 ]
    [ "$(echo "$s" | jq '.ppl_base == .ppl_quant')" = true ]
    [ "$(echo "$s" | jq '.eval_scored')" = 30 ]
    run -0 --separate-stderr quantize --json --type Q2_K --eval "$EVAL" --eval-ctx 32 --eval-chunks 2 "$m" q.gguf
    s=$(echo "$output" | jq -c 'select(.type == "summary")')
    [ "$(echo "$s" | jq '.kld_mean > 0 and .kld_p99 >= .kld_median')" = true ]
    [ "$(echo "$s" | jq '.bpw < 4')" = true ]
    run -0 --separate-stderr quantize -f --type Q2_K --eval "$EVAL" --eval-ctx 32 --eval-chunks 2 "$m" q.gguf
    assert_output --partial 'KL divergence mean'
    assert_output --partial 'perplexity'
}

@test "--eval-only: scores an existing GGUF as --eval did after quantizing it, and writes nothing" {
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    m="$FIX/tiny-llama256-f32.gguf"
    e=(--eval "$EVAL" --eval-ctx 32 --eval-chunks 2)
    run -0 --separate-stderr quantize --json --type Q2_K "${e[@]}" "$m" q.gguf
    echo "$output" | jq -c 'select(.type == "summary") | [.ppl_base, .ppl_quant, .kld_mean, .kld_p99,
        .top1_agreement, .eval_scored, .bpw]' >want
    cp q.gguf before.gguf
    run -0 --separate-stderr quantize --json --eval-only "${e[@]}" "$m" q.gguf
    [ "$(echo "$output" | wc -l)" = 1 ]
    [ "$(echo "$output" | jq '.eval_only')" = true ]
    echo "$output" | jq -c '[.ppl_base, .ppl_quant, .kld_mean, .kld_p99, .top1_agreement, .eval_scored,
        .bpw]' >got
    diff want got
    cmp q.gguf before.gguf
    [ -z "$(ls -A | grep -v -x -e before.gguf -e got -e q.gguf -e want)" ]
    # against itself: nothing lost
    run -0 --separate-stderr quantize --json --eval-only "${e[@]}" "$m" "$m"
    [ "$(echo "$output" | jq '.kld_mean == 0 and .top1_agreement == 1')" = true ]
    run -0 --separate-stderr quantize --eval-only "${e[@]}" "$m" q.gguf
    assert_output --partial 'KL divergence mean'
    # usage: no --eval, a quantization option, -f; a missing or bad OUTPUT
    run -2 --separate-stderr quantize --eval-only "$m" q.gguf
    [[ "$stderr" == *"--eval-only needs --eval"* ]]
    for o in "--type Q4_0" "--method rtn" "--calib $EVAL" "-f" "--pure"; do
        run -2 --separate-stderr quantize --eval-only "${e[@]}" $o "$m" q.gguf
        [[ "$stderr" == *"--eval-only takes only"* ]]
    done
    run ! --separate-stderr quantize --eval-only "${e[@]}" "$m" missing.gguf
    [[ "$stderr" == *"missing.gguf"* ]]
    [ ! -e missing.gguf ]
    printf 'GGUX' >bad.gguf
    run -3 --separate-stderr quantize --eval-only "${e[@]}" "$m" bad.gguf
    [[ "$stderr" == *"bad.gguf"* ]]
}
