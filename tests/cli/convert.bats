#!/usr/bin/env bats
# convert: options, GGUF copies and retyping, --info, pipes, atomic output.

load common

FIX="$TOP/tests/fixtures"
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA=gemma-3-270m.Q4_K_M.gguf

@test "--help prints usage on stdout and exits 0" {
    run -0 --separate-stderr convert --help
    assert_line --index 0 --partial 'usage: convert'
    assert_output --partial '--type TYPE'
    [ -z "$stderr" ]
}

@test "--version" {
    run -0 convert --version
    assert_output --regexp '^convert \(llmkit\) [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "an unknown option is a usage error (2) with the usage line on stderr" {
    run -2 --separate-stderr convert --bogus
    assert_output ''
    [[ "$stderr" == *"unrecognized option"* ]]
    [[ "$stderr" == *"usage: convert"* ]]
}

@test "missing operands and bad option values are usage errors" {
    run -2 --separate-stderr convert "$FIX/tiny-llama-f32.gguf"
    [[ "$stderr" == *"missing output"* ]]
    run -2 --separate-stderr convert --type q4_0 "$FIX/tiny-llama-f32.gguf" x.gguf
    [[ "$stderr" == *"not f32, f16 or bf16"* ]]
    run -2 --separate-stderr convert --to llama2c "$FIX/tiny-llama-f32.gguf" x.gguf
    run -2 --separate-stderr convert --shard-size 12Q "$FIX/tiny-llama-f32.gguf" x
    [[ "$stderr" == *"--shard-size: invalid number"* ]]
    run -2 --separate-stderr convert --json "$FIX/tiny-llama-f32.gguf" x.gguf
}

@test "a missing input is an I/O error (4) naming the file" {
    run -4 --separate-stderr convert "$BATS_TEST_TMPDIR/nope.gguf" "$BATS_TEST_TMPDIR/out.gguf"
    [[ "$stderr" == "convert: '$BATS_TEST_TMPDIR/nope.gguf': cannot open: No such file or directory" ]]
    [ ! -e "$BATS_TEST_TMPDIR/out.gguf" ]
}

@test "GGUF copy is byte-identical, from a file and through pipes" {
    run -0 convert "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/a.gguf"
    cmp "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/a.gguf"
    convert - - < "$FIX/tiny-llama-f16.gguf" | cat > "$BATS_TEST_TMPDIR/b.gguf"
    cmp "$FIX/tiny-llama-f16.gguf" "$BATS_TEST_TMPDIR/b.gguf"
}

@test "an existing output is kept unless -f" {
    echo keep > "$BATS_TEST_TMPDIR/out.gguf"
    run -2 --separate-stderr convert "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/out.gguf"
    [[ "$stderr" == *"already exists (use -f to overwrite)"* ]]
    [ "$(cat "$BATS_TEST_TMPDIR/out.gguf")" = keep ]
    run -0 convert -f "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/out.gguf"
    cmp "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/out.gguf"
}

@test "--type f16 then --type f32 keeps f16-representable weights exactly" {
    run -0 convert --type f16 "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/h.gguf"
    run -0 convert --info --json "$BATS_TEST_TMPDIR/h.gguf"
    assert_output --partial '"name":"blk.0.attn_q.weight","ggml_type":"F16"'
    assert_output --partial '"name":"blk.0.attn_norm.weight","ggml_type":"F32"'
    assert_output --partial '"key":"general.file_type","value_type":"u32","value":1'
    run -0 convert --type f32 "$BATS_TEST_TMPDIR/h.gguf" "$BATS_TEST_TMPDIR/f.gguf"
    run -0 convert --type f16 "$BATS_TEST_TMPDIR/f.gguf" "$BATS_TEST_TMPDIR/h2.gguf"
    cmp "$BATS_TEST_TMPDIR/h.gguf" "$BATS_TEST_TMPDIR/h2.gguf"
    run -0 convert --type bf16 "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/b.gguf"
    run -0 convert --info "$BATS_TEST_TMPDIR/b.gguf"
    assert_output --regexp 'blk\.0\.ffn_up\.weight +BF16'
}

@test "--info text shows metadata, tensors and totals" {
    run -0 convert --info "$FIX/tiny-llama-f32.gguf"
    assert_line --index 0 --regexp 'GGUF v3, [0-9]+ metadata keys, 20 tensors, alignment 32'
    assert_output --regexp 'tokenizer.ggml.tokens +array +\[str x 280\] "<\|endoftext\|>"'
    assert_output --regexp 'token_embd.weight +F32 +64 x 280 +0 +71680'
    assert_line --regexp '^totals: 20 tensors, [0-9]+ parameters, [0-9]+ bytes of tensor data, 32.0000 bits per weight$'
}

@test "--info --json is valid JSON Lines with a summary" {
    convert --info --json "$FIX/tiny-llama-f32.gguf" > "$BATS_TEST_TMPDIR/i.jsonl"
    python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert all(o["schema"] == "convert-info/1" for o in lines)
assert lines[-1]["type"] == "summary" and lines[-1]["n_tensors"] == 20
' "$BATS_TEST_TMPDIR/i.jsonl"
}

@test "--info agrees with the gguf Python package's reader" {
    py="${LLMKIT_CACHE}/venv/bin/python"
    if [ ! -x "$py" ]; then
        [ "${CI:-}" != true ] || { echo "no venv at $py (scripts/pyenv)"; return 1; }
        skip "no gguf-py venv (run scripts/pyenv)"
    fi
    for f in "$FIX/tiny-llama-f32.gguf" "$FIX/tiny-spm-f32.gguf"; do
        convert --info --json "$f" > "$BATS_TEST_TMPDIR/i.jsonl"
        "$py" "$TOP/tests/cli/lib/info_vs_gguf_py.py" "$f" "$BATS_TEST_TMPDIR/i.jsonl"
    done
    for m in "$SMOL" "$GEMMA"; do
        f=$(need_model "$m")
        convert --info --json "$f" > "$BATS_TEST_TMPDIR/i.jsonl"
        "$py" "$TOP/tests/cli/lib/info_vs_gguf_py.py" "$f" "$BATS_TEST_TMPDIR/i.jsonl"
    done
}

@test "both real models round-trip byte for byte (file and pipe)" {
    for m in "$SMOL" "$GEMMA"; do
        f=$(need_model "$m")
        convert "$f" "$BATS_TEST_TMPDIR/rt.gguf"
        cmp "$f" "$BATS_TEST_TMPDIR/rt.gguf"
        rm "$BATS_TEST_TMPDIR/rt.gguf"
        convert - - < "$f" | cmp - "$f"
    done
}

@test "a quantized input is dequantized with a warning" {
    f=$(need_model "$SMOL")
    run -0 --separate-stderr convert --type f32 "$f" "$BATS_TEST_TMPDIR/s32.gguf"
    [[ "$stderr" == *"warning: dequantizing quantized tensors"* ]]
    run -0 convert --info "$BATS_TEST_TMPDIR/s32.gguf"
    assert_output --regexp 'token_embd.weight +F32 +576 x 49152'
}

@test "binary output to a terminal is refused without -f" {
    command -v script >/dev/null || skip "script(1) not installed"
    run script -qec "$LLMKIT_BIN/convert $FIX/tiny-llama-f32.gguf -" /dev/null
    [ "$status" -eq 2 ]
    assert_output --partial 'refusing to write binary output to a terminal'
}

@test "SIGINT leaves no partial output or temporary file" {
    f=$(need_model "$GEMMA")
    mkdir "$BATS_TEST_TMPDIR/o"
    convert --type f32 "$f" "$BATS_TEST_TMPDIR/o/big.gguf" 2>/dev/null &
    pid=$!
    # Wait until the temporary exists, then interrupt.
    for _ in $(seq 100); do ls "$BATS_TEST_TMPDIR/o" | grep -q tmp && break; sleep 0.05; done
    kill -INT "$pid"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq 130 ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/o")" ]
}

@test "a write error (disk full) is an I/O error and leaves nothing" {
    [ -w /dev/full ] || skip "no /dev/full"
    run -4 --separate-stderr bash -c "convert '$FIX/tiny-llama-f32.gguf' - > /dev/full"
    [[ "$stderr" == *"No space left on device"* ]]
}
