#!/usr/bin/env bats
# kvstat on hostile input: strings from model files, configs, traces and file
# names never reach the terminal as control characters (table, CSV, --compare,
# warnings, errors); JSON keeps them exact.  Also: an MLA model from flags
# needs no heads, the report and the plot are committed together, and a
# failing stdout is named as such.

load common

G="$TOP/tests/golden/kvstat"

# The hostile name: a terminal title, a bell, a screen clear, CR LF and a fake
# CSV row, an 8-bit CSI (U+009B) and a right-to-left override (U+202E).
NAME_PY='b"evil\x1b]0;pwned\x07\x1b[2J\r\nmodel,fake,1\xc2\x9b\xe2\x80\xae"'
# ... as escape.h writes it
NAME_ESC='evil\x1b]0;pwned\x07\x1b[2J\r\nmodel,fake,1\u009b\u202e'

# mkgguf OUT ARCH NAME_PY_BYTES [KEY=u32:V ...] : a GGUF v3 header, no tensors
mkgguf() {
    python3 - "$@" <<'EOF'
import ast, struct, sys
def s(b):
    return struct.pack("<Q", len(b)) + b
out, arch, name = sys.argv[1], ast.literal_eval(sys.argv[2]), ast.literal_eval(sys.argv[3])
kvs = [s(b"general.architecture") + struct.pack("<i", 8) + s(arch),
       s(b"general.name") + struct.pack("<i", 8) + s(name)]
for a in sys.argv[4:]:
    k, v = a.split("=", 1)
    kvs.append(s(k.encode()) + struct.pack("<iI", 4, int(v.split(":", 1)[1])))
open(out, "wb").write(b"GGUF" + struct.pack("<Iqq", 3, 0, len(kvs)) + b"".join(kvs))
EOF
}

mkevil() {
    mkgguf "$1" 'b"llama"' "$NAME_PY" llama.block_count=u32:2 llama.attention.head_count=u32:4 \
        llama.embedding_length=u32:64
}

# A 6-step trace (the numbers do not matter here).
mktrace() {
    python3 - > "$1" <<'EOF'
import json
for st in range(6):
    print(json.dumps({"schema": "kvtrace/1", "step": st, "time_ms": 10 * st, "running": 2,
        "waiting": 1, "blocks_used": 4, "blocks_free": 6, "blocks_total": 10, "block_size": 16,
        "tokens_stored": 50, "waste": 0.2, "preemptions": 0, "prefix_hits": 0, "phase": "decode"}))
EOF
}

teardown() {
    unmount_full
}

# ---- escaping ----

@test "a hostile general.name is escaped in the table and --compare, exact in JSON" {
    mkevil "$BATS_TEST_TMPDIR/evil.gguf"
    kvstat "$BATS_TEST_TMPDIR/evil.gguf" > "$BATS_TEST_TMPDIR/out"
    clean "$BATS_TEST_TMPDIR/out"
    run -0 cat "$BATS_TEST_TMPDIR/out"
    assert_line "name             $NAME_ESC"
    # one line per field, as for a plain name: no fake line
    mkgguf "$BATS_TEST_TMPDIR/plain.gguf" 'b"llama"' 'b"plain"' llama.block_count=u32:2 \
        llama.attention.head_count=u32:4 llama.embedding_length=u32:64
    [ "${#lines[@]}" -eq "$(kvstat "$BATS_TEST_TMPDIR/plain.gguf" | wc -l)" ]

    kvstat --compare "$BATS_TEST_TMPDIR/evil.gguf" > "$BATS_TEST_TMPDIR/cmp"
    clean "$BATS_TEST_TMPDIR/cmp"
    # the variant table: a header and MHA, GQA-2, MQA, MLA rows, each naming the model
    [ "$(grep -c -F "$NAME_ESC" "$BATS_TEST_TMPDIR/cmp")" -eq 5 ]

    kvstat --json --compare "$BATS_TEST_TMPDIR/evil.gguf" > "$BATS_TEST_TMPDIR/j"
    python3 - "$BATS_TEST_TMPDIR/j" "$NAME_PY" <<'EOF'
import ast, json, sys
want = ast.literal_eval(sys.argv[2]).decode()
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["name"] for r in recs if r["type"] == "model"] == [want], recs[0]
assert all(r["model"] == want for r in recs if r["type"] == "variant")
EOF
}

@test "CSV: a hostile name is one escaped, quoted field (RFC 4180), no fake rows" {
    mkevil "$BATS_TEST_TMPDIR/evil.gguf"
    kvstat --csv "$BATS_TEST_TMPDIR/evil.gguf" > "$BATS_TEST_TMPDIR/csv"
    clean "$BATS_TEST_TMPDIR/csv"
    [ "$(wc -l < "$BATS_TEST_TMPDIR/csv")" -eq 2 ]
    python3 - "$BATS_TEST_TMPDIR/csv" "$NAME_ESC" <<'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
assert len(rows) == 2, rows
assert len(rows[0]) == len(rows[1]), rows
rec = dict(zip(rows[0], rows[1]))
assert rec["type"] == "model" and rec["name"] == sys.argv[2], rec["name"]
EOF
    # the same for the --compare section: 1 model + blank + header + 4 variants
    kvstat --csv --compare "$BATS_TEST_TMPDIR/evil.gguf" > "$BATS_TEST_TMPDIR/csv2"
    clean "$BATS_TEST_TMPDIR/csv2"
    [ "$(wc -l < "$BATS_TEST_TMPDIR/csv2")" -eq 8 ]
}

@test "file names and strings from inputs are escaped in warnings and errors" {
    local f="$BATS_TEST_TMPDIR/"$'c\e[2J\n.json'
    cp "$G/llama-2-7b.json" "$f"
    run -0 --separate-stderr kvstat --mem 24G "$f"
    [ "$stderr" = "kvstat: warning: '$BATS_TEST_TMPDIR/c\\x1b[2J\\n.json': weights unknown (no --weights); all of --mem counted as KV cache" ]
    [[ "$output" == *"input            $BATS_TEST_TMPDIR/c\\x1b[2J\\n.json"* ]]

    # an architecture name quoted in an error
    mkgguf "$BATS_TEST_TMPDIR/arch.gguf" 'b"ll\x1b[2Jama"' 'b"x"'
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/arch.gguf"
    [ "$stderr" = "kvstat: '$BATS_TEST_TMPDIR/arch.gguf': no ll\\x1b[2Jama.block_count" ]

    # a trace's phase quoted in an error
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    printf '{"schema":"kvtrace/1","step":6,"time_ms":70,"running":2,"waiting":1,"blocks_used":4,"blocks_free":6,"blocks_total":10,"block_size":16,"tokens_stored":50,"waste":0.2,"preemptions":0,"prefix_hits":0,"phase":"\\u001b]0;x\\u0007"}\n' \
        >> "$BATS_TEST_TMPDIR/t.jsonl"
    run -3 --separate-stderr kvstat --trace "$BATS_TEST_TMPDIR/t.jsonl"
    [ "$stderr" = "kvstat: '$BATS_TEST_TMPDIR/t.jsonl': line 7: unknown phase '\\x1b]0;x\\x07'" ]

    # a missing file with a hostile name
    run -4 --separate-stderr kvstat "$BATS_TEST_TMPDIR/"$'no\e[2J'
    [ "$stderr" = "kvstat: '$BATS_TEST_TMPDIR/no\\x1b[2J': cannot open: No such file or directory" ]
}

# ---- MLA from flags ----

@test "an MLA model from flags needs only --layers, --kv-lora-rank and --rope-dim" {
    # DeepSeek-V2: 60 layers x (512 + 64) x 2 bytes = 69120 bytes per token
    run -0 --separate-stderr kvstat --json --layers 60 --kv-lora-rank 512 --rope-dim 64
    python3 - "$output" <<'EOF'
import json, sys
m = [json.loads(l) for l in sys.argv[1].splitlines() if json.loads(l)["type"] == "model"][0]
assert m["attention"] == "MLA" and m["bytes_per_token"] == 69120, m
assert m["n_heads"] is None and m["head_dim_k"] is None and m["head_dim_v"] is None, m
assert m["kv_lora_rank"] == 512 and m["rope_dim"] == 64, m
EOF
    run -0 kvstat --layers 60 --kv-lora-rank 512 --rope-dim 64
    assert_line --regexp '^bytes_per_token +67.5 KiB$'
    refute_line --regexp '^n_heads'
    # the rope key may be left out (0)
    run -0 --separate-stderr kvstat --json --layers 60 --kv-lora-rank 512
    [[ "$output" == *'"bytes_per_token":61440'* ]]
    # heads and head size still make the same cache, and are needed for --compare
    run -0 --separate-stderr kvstat --json --layers 60 --heads 128 --head-dim 128 --kv-lora-rank 512 --rope-dim 64
    [[ "$output" == *'"bytes_per_token":69120'* ]]
    run -2 --separate-stderr kvstat --compare --layers 60 --kv-lora-rank 512 --rope-dim 64
    [ "$stderr" = "kvstat: --compare needs --heads and --head-dim for the MHA, GQA and MQA rows" ]
    run -0 --separate-stderr kvstat --compare --json --layers 60 --heads 128 --head-dim 128 \
        --kv-lora-rank 512 --rope-dim 64
    [[ "$output" == *'"variant":"MLA-512+64"'* ]]
    # without MLA the heads are still required
    run -2 --separate-stderr kvstat --layers 60 --rope-dim 64
    run -2 --separate-stderr kvstat --layers 60
    [[ "$stderr" == *"needs --layers, --heads and --head-dim"* ]]
}

# ---- outputs ----

@test "-o and --svg commit together: either failing leaves neither, in both orders" {
    mount_full
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    mkdir "$BATS_TEST_TMPDIR/good"
    # the plot cannot be written
    run -4 --separate-stderr kvstat --trace "$BATS_TEST_TMPDIR/t.jsonl" --svg "$FULL/p.svg" \
        -o "$BATS_TEST_TMPDIR/good/r.txt"
    [ "$stderr" = "kvstat: '$FULL/p.svg': write failed: No space left on device" ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/good")" ]
    [ "$(ls -A "$FULL")" = fill ]
    # the report cannot be written: the plot, written first, goes too
    run -4 --separate-stderr kvstat --trace "$BATS_TEST_TMPDIR/t.jsonl" --svg "$BATS_TEST_TMPDIR/good/p.svg" \
        -o "$FULL/r.txt"
    [ "$stderr" = "kvstat: '$FULL/r.txt': write failed: No space left on device" ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/good")" ]
    [ "$(ls -A "$FULL")" = fill ]
    run -4 --separate-stderr kvstat --json --trace "$BATS_TEST_TMPDIR/t.jsonl" \
        --svg "$BATS_TEST_TMPDIR/good/p.svg" -o "$FULL/r.jsonl"
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/good")" ]
    # and with room for both, both are there
    run -0 kvstat --trace "$BATS_TEST_TMPDIR/t.jsonl" --svg "$BATS_TEST_TMPDIR/good/p.svg" \
        -o "$BATS_TEST_TMPDIR/good/r.txt"
    [ "$(ls "$BATS_TEST_TMPDIR/good" | paste -sd ' ')" = "p.svg r.txt" ]
}

@test "a full stdout is named: table, --json, --csv and the plot (exit 4)" {
    [ -c /dev/full ] || skip "no /dev/full"
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    for fmt in "" --json --csv; do
        run -4 --separate-stderr bash -c "kvstat $fmt '$G/llama-2-7b.json' > /dev/full"
        [ "$stderr" = "kvstat: stdout: write failed: No space left on device" ] || { echo "$fmt: $stderr"; false; }
    done
    run -4 --separate-stderr bash -c "kvstat --trace '$BATS_TEST_TMPDIR/t.jsonl' --svg - > /dev/full"
    [ "$stderr" = "kvstat: stdout: write failed: No space left on device" ]
}
