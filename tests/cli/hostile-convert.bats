#!/usr/bin/env bats
# convert on hostile input: names and strings from model files, config.json,
# safetensors headers and file names are escaped in --info text, warnings
# and errors (JSON keeps them exact); write errors name the output they are
# about: stdout, the output file, or the output directory (and the file in it).

load common

FIX="$TOP/tests/fixtures"

# mkevil OUT [NDIMS] : a GGUF with a hostile general.name, a hostile key
# (with a hostile value) and one F32 tensor [4] with a hostile name
# (NDIMS 5 makes the tensor record invalid).
mkevil() {
    python3 - "$1" "${2:-1}" <<'EOF'
import struct, sys
def s(b):
    return struct.pack("<Q", len(b)) + b
out, nd = sys.argv[1], int(sys.argv[2])
kvs = [s(b"general.architecture") + struct.pack("<i", 8) + s(b"llama"),
       s(b"general.name") + struct.pack("<i", 8) + s(b"evil\x1b]0;pwned\x07\x1b[2J\nfake\xe2\x80\xae"),
       s(b"evil.\x1b[2Jkey") + struct.pack("<i", 8) + s(b"v\r\x9b")]
ti = s(b"t\x1b]0;x\x07\n.weight") + struct.pack("<I", nd) + struct.pack("<q", 4) * nd + \
     struct.pack("<iQ", 0, 0)
hdr = b"GGUF" + struct.pack("<Iqq", 3, 1, len(kvs)) + b"".join(kvs) + ti
hdr += b"\0" * (-len(hdr) % 32)
open(out, "wb").write(hdr + struct.pack("<4f", 1, 2, 3, 4))
EOF
}

# patch FILE OLD NEW : replaces the bytes OLD (a Python bytes literal) with NEW
# of the same length, once
patch() {
    python3 - "$@" <<'EOF'
import ast, sys
p, old, new = sys.argv[1], ast.literal_eval(sys.argv[2]), ast.literal_eval(sys.argv[3])
assert len(old) == len(new)
b = open(p, "rb").read()
assert b.count(old) == 1, old
open(p, "wb").write(b.replace(old, new))
EOF
}

teardown() {
    unmount_full
}

# ---- escaping ----

@test "--info: hostile keys, values, tensor names and file names are escaped; JSON is exact" {
    local f="$BATS_TEST_TMPDIR/"$'h\e[2J.gguf'
    mkevil "$f"
    convert --info "$f" > "$BATS_TEST_TMPDIR/out"
    clean "$BATS_TEST_TMPDIR/out"
    run -0 cat "$BATS_TEST_TMPDIR/out"
    [[ "${lines[0]}" == "$BATS_TEST_TMPDIR/h\\x1b[2J.gguf: GGUF v3, 3 metadata keys, 1 tensors,"* ]]
    assert_line --regexp '^  general.name +str +"evil\\x1b]0;pwned\\x07\\x1b\[2J\\nfake\\u202e"$'
    assert_line --regexp '^  evil.\\x1b\[2Jkey +str +"v\\r\\x9b"$'
    assert_line --regexp '^  0 +t\\x1b]0;x\\x07\\n.weight +F32 +4 '
    # header, "metadata:", 3 keys, "tensors:", column names, 1 tensor, totals: no fake line
    [ "${#lines[@]}" -eq 9 ]

    convert --info --json "$f" > "$BATS_TEST_TMPDIR/j"
    python3 - "$BATS_TEST_TMPDIR/j" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
kv = {r["key"]: r.get("value") for r in recs if r["type"] == "kv"}
assert kv["general.name"] == "evil\x1b]0;pwned\x07\x1b[2J\nfake\u202e", kv
assert "evil.\x1b[2Jkey" in kv and kv["evil.\x1b[2Jkey"] is None, kv   # not UTF-8: null
assert [r["name"] for r in recs if r["type"] == "tensor"] == ["t\x1b]0;x\x07\n.weight"]
EOF
}

@test "--info of an HF directory: hostile torch_dtype, tensor names and paths are escaped" {
    local d="$BATS_TEST_TMPDIR/"$'hf\e[2J'
    convert "$FIX/tiny-llama-f32.gguf" "$d"
    python3 - "$d" <<'EOF'
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/config.json"))
c["torch_dtype"] = "\x1b[2Jf32\u202e"
json.dump(c, open(d + "/config.json", "w"))
p = d + "/model.safetensors"
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h["evil\x1b]0;x\x07\nname"] = h.pop("model.norm.weight")
hb = json.dumps(h).encode()
open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
EOF
    convert --info "$d" > "$BATS_TEST_TMPDIR/out"
    clean "$BATS_TEST_TMPDIR/out"
    run -0 cat "$BATS_TEST_TMPDIR/out"
    [[ "${lines[0]}" == "$BATS_TEST_TMPDIR/hf\\x1b[2J: Hugging Face checkpoint, LlamaForCausalLM "* ]]
    [[ "${lines[1]}" == *", torch_dtype \\x1b[2Jf32\\u202e" ]]
    assert_line --regexp '^  [0-9]+ +evil\\x1b]0;x\\x07\\nname +F32 +64 +model.safetensors +256$'
}

@test "warnings and errors quoting names from the input are escaped" {
    # a tensor name in a parse error
    mkevil "$BATS_TEST_TMPDIR/bad.gguf" 5
    run -3 --separate-stderr convert --info "$BATS_TEST_TMPDIR/bad.gguf"
    [ "$stderr" = "convert: '$BATS_TEST_TMPDIR/bad.gguf': tensor 't\\x1b]0;x\\x07\\n.weight' has 5 dimensions (at most 4)" ]
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/bad.gguf" "$BATS_TEST_TMPDIR/o.gguf"
    [[ "$stderr" == *"tensor 't\\x1b]0;x\\x07\\n.weight' has 5 dimensions (at most 4)" ]]
    # a pre-tokenizer name in a warning
    cp "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/pre.gguf"
    patch "$BATS_TEST_TMPDIR/pre.gguf" 'b"\x06\0\0\0\0\0\0\0smollm"' 'b"\x06\0\0\0\0\0\0\0sm\x1b[2J"'
    run -0 --separate-stderr convert "$BATS_TEST_TMPDIR/pre.gguf" "$BATS_TEST_TMPDIR/pre-hf"
    [ "$stderr" = "convert: warning: no HF pre-tokenizer for 'sm\\x1b[2J': tokenizer.json gets GPT-2's" ]
    # file names
    run -4 --separate-stderr convert --info "$BATS_TEST_TMPDIR/"$'no\e[2J\n.gguf'
    [ "$stderr" = "convert: '$BATS_TEST_TMPDIR/no\\x1b[2J\\n.gguf': cannot open: No such file or directory" ]
    run -2 --separate-stderr convert --type $'q\e[2J' "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/x.gguf"
    [ "${stderr_lines[0]}" = "convert: --type: 'q\\x1b[2J' is not f32, f16 or bf16 (use quantize for other types)" ]
}

# ---- write errors name the output ----

@test "--info to a full stdout names stdout, not the input (exit 4)" {
    [ -c /dev/full ] || skip "no /dev/full"
    for json in --json ""; do
        run -4 --separate-stderr bash -c "convert --info $json '$FIX/tiny-llama-f32.gguf' > /dev/full"
        [ "$stderr" = "convert: stdout: write failed: No space left on device" ] || { echo "'$json': $stderr"; false; }
    done
    run -4 --separate-stderr bash -c "convert '$FIX/tiny-llama-f32.gguf' - > /dev/full"
    [ "$stderr" = "convert: stdout: write failed: No space left on device" ]
}

@test "a write error in an HF output directory names it, and leaves nothing" {
    mount_full
    # the first file (config.json) cannot be written
    run -4 --separate-stderr convert "$FIX/tiny-llama-f32.gguf" "$FULL/out-hf"
    [ "$stderr" = "convert: '$FULL/out-hf': 'config.json': write failed: No space left on device" ]
    [ "$(ls -A "$FULL")" = fill ]
    # the JSON files fit, the tensors do not
    rm "$FULL/fill"
    dd if=/dev/zero of="$FULL/fill" bs=1k count=16 2>/dev/null
    run -4 --separate-stderr convert "$FIX/tiny-llama-f32.gguf" "$FULL/out-hf"
    [ "$stderr" = "convert: '$FULL/out-hf': 'model.safetensors': write failed: No space left on device" ]
    [ "$(ls -A "$FULL")" = fill ]
    # a GGUF output names the file
    run -4 --separate-stderr convert "$FIX/tiny-llama-f32.gguf" "$FULL/out.gguf"
    [[ "$stderr" == "convert: '$FULL/out.gguf': "*"No space left on device" ]]
    [ "$(ls -A "$FULL")" = fill ]
}

# ---- out of memory is exit 5 and names the input ----

# mkhuge OUT : a GGUF header without its data: one F32 tensor 'x' of
# 550,000,000 elements (2.2 GB), which cannot be held under ulimit -v 1000000
mkhuge() {
    python3 - "$1" <<'EOF2'
import struct, sys
def s(b):
    return struct.pack("<Q", len(b)) + b
kv = s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
ti = s(b"x") + struct.pack("<IQIQ", 1, 550000000, 0, 0)
hdr = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv + ti
open(sys.argv[1], "wb").write(hdr + b"\0" * (-len(hdr) % 32))
EOF2
}

@test "a tensor too large for memory on a pipe is exit 5 naming '-'" {
    [ "${LLMKIT_SAN:-}" != address ] || skip "ulimit -v under AddressSanitizer"
    cd "$BATS_TEST_TMPDIR"
    mkhuge huge.gguf
    for ty in "" "--type f16"; do
        # its data would follow: zeros without end, of which nothing is read
        run -5 --separate-stderr bash -c "ulimit -v 1000000
            (cat huge.gguf; exec cat /dev/zero) | timeout 120 convert $ty - o.gguf"
        [ "$stderr" = "convert: '-': tensor 'x': out of memory for its 2200000000 bytes" ] ||
            { echo "'$ty': $stderr"; false; }
        [ -z "$(ls | grep '^o\.gguf')" ]
    done
}
