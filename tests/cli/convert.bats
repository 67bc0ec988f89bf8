#!/usr/bin/env bats
# convert: options, GGUF copies and retyping, --info, pipes, atomic output.

load common

FIX="$TOP/tests/fixtures"
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA=gemma-3-270m.Q4_K_M.gguf

teardown() {
    unmount_full
}

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

@test "a named pipe, FIFO or /dev/stdin reads as '-' does; what needs a file says so" {
    local src=$FIX/tiny-llama-f32.gguf T=$BATS_TEST_TMPDIR
    convert --info "$src" | tail -n +2 > "$T/info.want"
    convert --type f16 "$src" "$T/want.gguf"
    # process substitution (/dev/fd/N) and /dev/stdin on a pipe
    run -0 --separate-stderr convert --info <(cat "$src")
    diff <(tail -n +2 <<<"$output") "$T/info.want"
    run -0 --separate-stderr bash -c "cat '$src' | convert --info /dev/stdin"
    diff <(tail -n +2 <<<"$output") "$T/info.want"
    convert --type f16 <(cat "$src") "$T/a.gguf"
    cmp "$T/a.gguf" "$T/want.gguf"
    cat "$src" | convert --type f16 /dev/stdin "$T/b.gguf"
    cmp "$T/b.gguf" "$T/want.gguf"
    # a FIFO: opened once (a second open would wait for a writer forever;
    # the writer's timeout only keeps a broken convert from hanging the test)
    mkfifo "$T/fifo"
    timeout 60 cp "$src" "$T/fifo" &
    timeout 60 convert --type f16 "$T/fifo" "$T/c.gguf"
    wait
    cmp "$T/c.gguf" "$T/want.gguf"
    timeout 60 cp "$src" "$T/fifo" &
    run -0 --separate-stderr timeout 60 convert --info "$T/fifo"
    wait
    diff <(tail -n +2 <<<"$output") "$T/info.want"
    # what a stream cannot be: say so (the FIFO is never opened)
    run -2 --separate-stderr timeout 60 convert --from llama2c "$T/fifo" "$T/d.gguf"
    [ "$stderr" = "convert: '$T/fifo': only GGUF can be read from a pipe or device, not --from llama2c" ]
    run -2 --separate-stderr timeout 60 convert --info --from llama2c "$T/fifo"
    [ "$stderr" = "convert: '$T/fifo': only GGUF can be read from a pipe or device, not --from llama2c" ]
    run -2 --separate-stderr timeout 60 convert "$T/fifo" "$T/hf"
    [[ "$stderr" == "convert: '$T/fifo': GGUF to HF needs a GGUF file, not a pipe or device"* ]]
    [ ! -e "$T/d.gguf" ] && [ ! -e "$T/hf" ]
}

@test "an existing output is kept unless -f" {
    echo keep > "$BATS_TEST_TMPDIR/out.gguf"
    run -2 --separate-stderr convert "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/out.gguf"
    [[ "$stderr" == *"already exists (use --force to overwrite)"* ]]
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
    assert_output --regexp 'tokenizer.ggml.tokens +array +\[str x 281\] "<\|endoftext\|>"'
    assert_output --regexp 'token_embd.weight +F32 +64 x 281 +0 +71936'
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
    for f in "$FIX/tiny-llama-f32.gguf" "$FIX/tiny-spm-f32.gguf" "$SHARED"/vocab/*.gguf; do
        convert --info --json "$f" > "$BATS_TEST_TMPDIR/i.jsonl"
        "$py" "$TOP/tests/cli/lib/info_vs_gguf_py.py" "$f" "$BATS_TEST_TMPDIR/i.jsonl"
    done
    for m in "$SMOL" "$GEMMA"; do
        need_model f "$m"
        convert --info --json "$f" > "$BATS_TEST_TMPDIR/i.jsonl"
        "$py" "$TOP/tests/cli/lib/info_vs_gguf_py.py" "$f" "$BATS_TEST_TMPDIR/i.jsonl"
    done
}

@test "llama.cpp's vocabulary-only GGUFs (no tensors, no header padding) copy byte for byte" {
    for f in "$SHARED"/vocab/*.gguf; do
        convert "$f" "$BATS_TEST_TMPDIR/v.gguf"
        cmp "$f" "$BATS_TEST_TMPDIR/v.gguf"
        rm "$BATS_TEST_TMPDIR/v.gguf"
    done
}

@test "both real models round-trip byte for byte (file and pipe)" {
    for m in "$SMOL" "$GEMMA"; do
        need_model f "$m"
        convert "$f" "$BATS_TEST_TMPDIR/rt.gguf"
        cmp "$f" "$BATS_TEST_TMPDIR/rt.gguf"
        rm "$BATS_TEST_TMPDIR/rt.gguf"
        convert - - < "$f" | cmp - "$f"
    done
}

@test "a quantized input is dequantized with a warning" {
    need_model f "$SMOL"
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
    # No race: the input is a FIFO fed the header and half of the tensor data
    # and held open, so convert has created its temporary (it streams a pipe:
    # output opened after the header) and cannot finish (blocked reading the
    # rest) whenever SIGINT arrives.
    local src=$FIX/tiny-llama-f32.gguf fifo=$BATS_TEST_TMPDIR/in n w pid feed rc=0
    n=$(convert --info --json "$src" | jq -r 'select(.type == "summary") | .data_offset + (.bytes / 2 | floor)')
    mkdir "$BATS_TEST_TMPDIR/o"
    mkfifo "$fifo"
    exec {w}<>"$fifo"           # a writer that stays open: no EOF
    convert --type f16 - "$BATS_TEST_TMPDIR/o/big.gguf" <"$fifo" 2>/dev/null {w}>&- 3>&- &
    pid=$!
    head -c "$n" "$src" >&"$w" 3>&- &
    feed=$!
    wait_for_tmp "$BATS_TEST_TMPDIR/o" "$pid"
    kill -INT "$pid"
    wait "$pid" || rc=$?
    kill "$feed" 2>/dev/null || true
    exec {w}>&-
    [ "$rc" -eq 130 ]
    [ -z "$(ls -A "$BATS_TEST_TMPDIR/o")" ]
}

@test "a write error (disk full) is an I/O error and leaves nothing" {
    [ -w /dev/full ] || skip "no /dev/full"
    run -4 --separate-stderr bash -c "convert '$FIX/tiny-llama-f32.gguf' - > /dev/full"
    [[ "$stderr" == *"No space left on device"* ]]
}

# ---- Hugging Face directories ----

# pyenv_python : the venv with gguf-py, safetensors and tokenizers, or skip
# (fail in CI).
pyenv_python() {
    PY="${LLMKIT_CACHE}/venv/bin/python"
    if ! "$PY" -c 'import gguf, safetensors, tokenizers' 2>/dev/null; then
        [ "${CI:-}" != true ] || { echo "no venv at $PY (scripts/pyenv)"; return 1; }
        skip "no Python venv with gguf, safetensors, tokenizers (run scripts/pyenv)"
    fi
}

@test "GGUF f16 -> HF -> GGUF gives identical tensors and metadata" {
    pyenv_python
    run -0 convert "$FIX/tiny-llama-f16.gguf" "$BATS_TEST_TMPDIR/hf"
    for f in config.json generation_config.json model.safetensors special_tokens_map.json \
             tokenizer.json tokenizer_config.json; do
        [ -f "$BATS_TEST_TMPDIR/hf/$f" ] || { echo "missing $f"; return 1; }
    done
    "$PY" "$TOP/tests/cli/lib/check_hf_dir.py" "$FIX/tiny-llama-f16.gguf" "$BATS_TEST_TMPDIR/hf"
    run -0 convert "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/back.gguf"
    "$PY" "$TOP/tests/cli/lib/gguf_equiv.py" "$FIX/tiny-llama-f16.gguf" "$BATS_TEST_TMPDIR/back.gguf"
}

@test "GGUF f32 -> HF -> GGUF --type f32, SentencePiece vocabulary included" {
    pyenv_python
    for m in tiny-llama-f32 tiny-spm-f32; do
        rm -rf "$BATS_TEST_TMPDIR/hf"
        convert "$FIX/$m.gguf" "$BATS_TEST_TMPDIR/hf"
        "$PY" "$TOP/tests/cli/lib/check_hf_dir.py" "$FIX/$m.gguf" "$BATS_TEST_TMPDIR/hf"
        convert -f --type f32 "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/back.gguf"
        "$PY" "$TOP/tests/cli/lib/gguf_equiv.py" "$FIX/$m.gguf" "$BATS_TEST_TMPDIR/back.gguf"
    done
    [ -f "$BATS_TEST_TMPDIR/hf/tokenizer.model" ]
}

@test "HF input without --type gets f16 (llama.cpp's auto) and bf16 stays bf16" {
    pyenv_python
    convert "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/hf"
    convert "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/a.gguf"
    run -0 convert --info "$BATS_TEST_TMPDIR/a.gguf"
    assert_output --regexp 'blk\.0\.attn_q\.weight +F16'
    assert_output --regexp 'blk\.0\.attn_norm\.weight +F32'
    convert --type bf16 "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/b.gguf"
    convert "$BATS_TEST_TMPDIR/b.gguf" "$BATS_TEST_TMPDIR/hfb"
    convert "$BATS_TEST_TMPDIR/hfb" "$BATS_TEST_TMPDIR/c.gguf"
    run -0 convert --info "$BATS_TEST_TMPDIR/c.gguf"
    assert_output --regexp 'blk\.0\.ffn_up\.weight +BF16'
    "$PY" "$TOP/tests/cli/lib/gguf_equiv.py" --data-only "$BATS_TEST_TMPDIR/b.gguf" "$BATS_TEST_TMPDIR/c.gguf"
}

@test "--shard-size splits the checkpoint and the index reads back" {
    pyenv_python
    convert --shard-size 100K "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/hf"
    [ -f "$BATS_TEST_TMPDIR/hf/model.safetensors.index.json" ]
    [ -f "$BATS_TEST_TMPDIR/hf/model-00001-of-00004.safetensors" ]
    [ ! -e "$BATS_TEST_TMPDIR/hf/model.safetensors" ]
    "$PY" "$TOP/tests/cli/lib/check_hf_dir.py" "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/hf"
    run -0 convert --info "$BATS_TEST_TMPDIR/hf"
    assert_output --partial 'Hugging Face checkpoint, LlamaForCausalLM (GGUF arch llama), 4 safetensors files'
    convert --type f32 "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/back.gguf"
    "$PY" "$TOP/tests/cli/lib/gguf_equiv.py" "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/back.gguf"
}

@test "SmolLM2: Q4_1 -> HF (dequantized) matches gguf-py; f16 GGUF -> HF -> GGUF is exact" {
    pyenv_python
    need_model f "$SMOL"
    run -0 --separate-stderr convert --shard-size 40M "$f" "$BATS_TEST_TMPDIR/hf"
    [[ "$stderr" == *"dequantizing quantized tensors to f32"* ]]
    "$PY" "$TOP/tests/cli/lib/check_hf_dir.py" "$f" "$BATS_TEST_TMPDIR/hf"
    convert --type f16 "$f" "$BATS_TEST_TMPDIR/s16.gguf" 2>/dev/null
    convert "$BATS_TEST_TMPDIR/s16.gguf" "$BATS_TEST_TMPDIR/hf16"
    convert "$BATS_TEST_TMPDIR/hf16" "$BATS_TEST_TMPDIR/back.gguf"
    "$PY" "$TOP/tests/cli/lib/gguf_equiv.py" "$BATS_TEST_TMPDIR/s16.gguf" "$BATS_TEST_TMPDIR/back.gguf"
}

@test "an existing output directory is kept unless -f; -f replaces only a checkpoint's files" {
    T=$BATS_TEST_TMPDIR
    mkdir "$T/hf"
    touch "$T/hf/keep"
    run -2 --separate-stderr convert "$FIX/tiny-llama-f32.gguf" "$T/hf"
    [[ "$stderr" == *"already exists"* ]]
    [ -f "$T/hf/keep" ]
    # a file no checkpoint has, a folder, this run's input: refused (2), all kept
    run -2 --separate-stderr convert -f "$FIX/tiny-llama-f32.gguf" "$T/hf"
    [[ "$stderr" == *"'$T/hf': holds 'keep', which no checkpoint has: refusing"* ]]
    [ -f "$T/hf/keep" ]
    rm "$T/hf/keep"
    mkdir "$T/hf/sub"
    run -2 --separate-stderr convert -f "$FIX/tiny-llama-f32.gguf" "$T/hf"
    [[ "$stderr" == *"holds the folder 'sub'"* ]]
    [ -d "$T/hf/sub" ]
    rmdir "$T/hf/sub"
    cp "$FIX/tiny-llama-f32.gguf" "$T/hf/in.gguf"
    run -2 --separate-stderr convert -f "$T/hf/in.gguf" "$T/hf"
    [[ "$stderr" == *"holds 'in.gguf', an input of this run"* ]]
    cmp "$T/hf/in.gguf" "$FIX/tiny-llama-f32.gguf"
    rm "$T/hf/in.gguf"
    # an earlier checkpoint (a shard the new one lacks among its files): replaced whole
    echo '{}' > "$T/hf/config.json"
    touch "$T/hf/model-00002-of-00002.safetensors" "$T/hf/README.md"
    run -0 convert -f "$FIX/tiny-llama-f32.gguf" "$T/hf"
    [ ! -e "$T/hf/model-00002-of-00002.safetensors" ] && [ ! -e "$T/hf/README.md" ]
    [ -f "$T/hf/model.safetensors" ] && [ "$(cat "$T/hf/config.json")" != '{}' ]
    [ "$(ls -a "$T" | grep -c -e tmp -e '\.old\.')" -eq 0 ]
}

# mkhf DIR : a converted tiny HF directory to corrupt.
mkhf() { convert "$FIX/tiny-llama-f32.gguf" "$1" >/dev/null 2>&1; }

# old_emptied OUT : OUT.old.* exists and its files are gone
old_emptied() {
    local d
    for d in "$1".old.*; do
        [ -d "$d" ] && [ -z "$(ls -A "$d")" ] && return 0
    done
    return 1
}

@test "-f replacing an HF directory: a SIGTERM mid-replacement leaves the new output at OUT, no OUT.old.*" {
    command -v strace >/dev/null || skip "no strace"
    strace -o /dev/null -e inject=getpid:retval=1 true 2>/dev/null || skip "strace cannot inject here"
    local o="$BATS_TEST_TMPDIR/hf" pid c rc
    # strace holds the syscall 3 s: the original moved aside, then the old
    # directory emptied; SIGTERM lands there (the old build: the original
    # only at OUT.old.X, then a half-removed OUT.old.X)
    for inject in "-P $o -e trace=rename -e inject=rename:delay_exit=3000000:when=1" \
                  "-e trace=rmdir -e inject=rmdir:delay_enter=3000000:when=1"; do
        rm -rf "$o"
        convert "$FIX/tiny-llama-f32.gguf" "$o"
        echo original > "$o/README.md"
        strace -f -o /dev/null $inject "$LLMKIT_BIN/convert" -f "$FIX/tiny-spm-f32.gguf" "$o" &
        pid=$!
        case $inject in
        *rename*) wait_until 20 "the original moved aside" compgen -G "$o.old.*" ;;
        *) wait_until 20 "the old directory emptied" old_emptied "$o" ;;
        esac
        c=$(pgrep -P "$pid")
        kill -TERM "$c"
        rc=0
        wait "$pid" || rc=$?
        [ "$rc" = 143 ]
        [ -f "$o/tokenizer.model" ] && [ ! -e "$o/README.md" ]
        [ -z "$(compgen -G "$o.*")" ]
    done
}

@test "HF tensors whose shapes config.json does not imply exit 3 naming the file and tensor" {
    local T=$BATS_TEST_TMPDIR name shape want
    mkhf "$T/hf"
    # NAME, the shape given (same bytes), the shape config.json implies
    # (hidden 64, 4 heads of 16, 2 KV heads, FFN 128, vocabulary 281)
    while read -r name shape want; do
        rm -rf "$T/c"
        cp -r "$T/hf" "$T/c"
        sft_shape "$T/c" "$name" ${shape//,/ }
        run -3 --separate-stderr convert "$T/c" "$T/o.gguf"
        [ "$stderr" = "convert: '$T/c/model.safetensors': tensor '$name' has shape [${shape//,/, }], config.json implies [${want//,/, }]" ] ||
            { echo "$name: $stderr"; false; }
        [ ! -e "$T/o.gguf" ]
    done <<'CASES'
model.embed_tokens.weight 64,281 281,64
model.layers.1.self_attn.k_proj.weight 64,32 32,64
model.layers.0.self_attn.q_proj.weight 32,128 64,64
model.layers.0.self_attn.v_proj.weight 16,128 32,64
model.layers.1.self_attn.o_proj.weight 64,32,2 64,64
model.layers.0.mlp.down_proj.weight 128,64 64,128
model.layers.1.mlp.gate_proj.weight 64,128 128,64
model.layers.0.mlp.up_proj.weight 256,32 128,64
model.layers.0.input_layernorm.weight 1,64 64
model.norm.weight 32,2 64
CASES
    # without vocab_size the embedding's rows are free, its columns are not
    rm -rf "$T/c"
    cp -r "$T/hf" "$T/c"
    jq 'del(.vocab_size)' "$T/hf/config.json" > "$T/c/config.json"
    run -0 convert "$T/c" "$T/o.gguf"
    rm "$T/o.gguf"
    sft_shape "$T/c" model.embed_tokens.weight 64 281
    run -3 --separate-stderr convert "$T/c" "$T/o.gguf"
    [ "$stderr" = "convert: '$T/c/model.safetensors': tensor 'model.embed_tokens.weight' has shape [64, 281], config.json implies [vocab, 64]" ]
    [ ! -e "$T/o.gguf" ]
}

@test "an HF directory whose config.json is a FIFO is refused (4), not read twice" {
    local T=$BATS_TEST_TMPDIR
    mkhf "$T/hf"
    mv "$T/hf/config.json" "$T/config.json"
    mkfifo "$T/hf/config.json"
    # a writer, so that a convert that reads it twice waits for a second one
    # (the timeouts only keep that from hanging the test)
    timeout 60 cp "$T/config.json" "$T/hf/config.json" &
    run -4 --separate-stderr timeout 60 convert "$T/hf" "$T/o.gguf"
    [ "$stderr" = "convert: '$T/hf': 'config.json': is a FIFO, not a regular file" ]
    run -4 --separate-stderr timeout 60 convert --info "$T/hf"
    [ "$stderr" = "convert: '$T/hf': 'config.json': is a FIFO, not a regular file" ]
    # the refusals never opened it: let the writer finish
    cat "$T/hf/config.json" > /dev/null
    wait
    [ ! -e "$T/o.gguf" ]
}

@test "a shard named by the index that is a FIFO is refused (4) at once, not waited on" {
    local T=$BATS_TEST_TMPDIR s=model-00002-of-00004.safetensors
    convert --shard-size 100K "$FIX/tiny-llama-f32.gguf" "$T/hf"
    rm "$T/hf/$s"
    mkfifo "$T/hf/$s"
    # no writer: opening it plainly would wait for ever (timeout: a hang fails)
    run -4 --separate-stderr timeout 20 convert "$T/hf" "$T/o.gguf"
    [ "$stderr" = "convert: '$T/hf': '$s': is a FIFO, not a regular file" ]
    run -4 --separate-stderr timeout 20 convert --info "$T/hf"
    [ "$stderr" = "convert: '$T/hf': '$s': is a FIFO, not a regular file" ]
    [ ! -e "$T/o.gguf" ]
}

@test "bad HF inputs exit 3 with a message and leave no output" {
    out="$BATS_TEST_TMPDIR/out.gguf"
    mkdir "$BATS_TEST_TMPDIR/empty"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/empty" "$out"
    [[ "$stderr" == *"no config.json"* ]]

    mkhf "$BATS_TEST_TMPDIR/a"
    sed -i 's/LlamaForCausalLM/GPTNeoXForCausalLM/' "$BATS_TEST_TMPDIR/a/config.json"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/a" "$out"
    [[ "$stderr" == *"unsupported architecture"* ]]

    mkhf "$BATS_TEST_TMPDIR/b"
    sed -i 's/"num_attention_heads": 4/"num_attention_heads": "four"/' "$BATS_TEST_TMPDIR/b/config.json"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/b" "$out"
    [[ "$stderr" == *"num_attention_heads"* ]]

    mkhf "$BATS_TEST_TMPDIR/c"
    echo '{"broken": ' > "$BATS_TEST_TMPDIR/c/tokenizer.json"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/c" "$out"
    [[ "$stderr" == *"tokenizer.json"* ]]

    mkhf "$BATS_TEST_TMPDIR/d"
    truncate -s -100 "$BATS_TEST_TMPDIR/d/model.safetensors"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/d" "$out"
    [[ "$stderr" == *"model.safetensors"* ]]

    mkhf "$BATS_TEST_TMPDIR/e"
    printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$BATS_TEST_TMPDIR/e/model.safetensors" conv=notrunc 2>/dev/null
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/e" "$out"

    [ ! -e "$out" ]
    [ "$(ls "$BATS_TEST_TMPDIR" | grep -c tmp)" -eq 0 ]
}

@test "GGUF -> HF refuses a pipe and architectures it cannot map" {
    run -2 --separate-stderr convert - "$BATS_TEST_TMPDIR/hf" < "$FIX/tiny-llama-f32.gguf"
    [[ "$stderr" == *"not a pipe"* ]]
    # the tiny llama relabelled "mamba" (same length), which no HF class holds
    python3 -c '
import sys
b = open(sys.argv[1], "rb").read()
k = b"general.architecture\x08\x00\x00\x00\x05" + b"\x00" * 7
assert b.count(k + b"llama") == 1
open(sys.argv[2], "wb").write(b.replace(k + b"llama", k + b"mamba"))' "$FIX/tiny-llama-f32.gguf" "$BATS_TEST_TMPDIR/m.gguf"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/m.gguf" "$BATS_TEST_TMPDIR/hf"
    [[ "$stderr" == *"mamba"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/hf" ]
}

# Rewrites bytes of the tiny llama's vocabulary in place: token 3's text, token 4's text
# (made token 3's), the chat template's first byte or merge 0's first byte.
badvocab() {
    python3 - "$FIX/tiny-llama-f32.gguf" "$2" "$1" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
def arr(key):
    i = b.index(key) + len(key) + 16
    return i
def nth(i, n):
    for _ in range(n):
        i += 8 + struct.unpack_from('<Q', b, i)[0]
    return i + 8
what = sys.argv[3]
if what == 'token':
    b[nth(arr(b'tokenizer.ggml.tokens'), 3)] = 0xff
elif what == 'dup':
    t3 = nth(arr(b'tokenizer.ggml.tokens'), 3)
    t4 = nth(arr(b'tokenizer.ggml.tokens'), 4)
    b[t4:t4 + 2] = b[t3:t3 + 2]
elif what == 'merge':
    b[nth(arr(b'tokenizer.ggml.merges'), 0)] = 0xff
else:
    k = b'tokenizer.chat_template'
    b[b.index(k) + len(k) + 4 + 8] = 0xff
open(sys.argv[2], 'wb').write(b)
PY
}

@test "GGUF -> HF: a vocabulary that is not valid UTF-8 or repeats a token is bad data (3)" {
    for what in token dup merge template; do
        badvocab $what "$BATS_TEST_TMPDIR/$what.gguf"
        run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/$what.gguf" "$BATS_TEST_TMPDIR/hf-$what"
        [[ "$stderr" == *"'$BATS_TEST_TMPDIR/$what.gguf': "* ]]
        case $what in
        token) [[ "$stderr" == *"token 3 is not valid UTF-8 text"* ]] ;;
        dup) [[ "$stderr" == *"tokens 3 and 4 have the same text"* ]] ;;
        merge) [[ "$stderr" == *"merge 0 is not valid UTF-8 text"* ]] ;;
        template) [[ "$stderr" == *"chat template is not valid UTF-8"* ]] ;;
        esac
        [ ! -e "$BATS_TEST_TMPDIR/hf-$what" ]
    done
}

# nan_scale DIR : a GPTQ directory of the tiny llama with one fp16 scale of
# layer 0's q_proj NaN
nan_scale() {
    quantize --method rtn --bits 4 --group-size 32 --format gptq "$FIX/tiny-llama-f32.gguf" "$1" \
        >/dev/null 2>&1
    python3 - "$1/model.safetensors" model.layers.0.self_attn.q_proj.scales <<'PY'
import json, struct, sys
p, name = sys.argv[1], sys.argv[2]
b = bytearray(open(p, 'rb').read())
n, = struct.unpack_from('<Q', b, 0)
o = 8 + n + json.loads(b[8:8 + n])[name]['data_offsets'][0] + 2 * 5
b[o:o + 2] = b'\x00\x7e'
open(p, 'wb').write(b)
PY
}

@test "GPTQ: a NaN scale is bad data (3) naming the tensor, whatever --type" {
    local gq="$BATS_TEST_TMPDIR/gq" o="$BATS_TEST_TMPDIR/o.gguf"
    nan_scale "$gq"
    for t in "" "--type f16" "--type bf16" "--type f32"; do
        run -3 --separate-stderr convert $t "$gq" "$o"
        [[ "$stderr" == *"'$gq': tensor 'blk.0.attn_q.weight': row 10: dequantized weight not finite"* ]]
        [ ! -e "$o" ]
        [ -z "$(ls "$BATS_TEST_TMPDIR" | grep tmp)" ]
    done
}

@test "an existing GGUF output is refused before any work and named once, GPTQ and EAGLE inputs too" {
    local gq="$BATS_TEST_TMPDIR/gq" o="$BATS_TEST_TMPDIR/exist.gguf"
    quantize --method rtn --bits 4 --group-size 32 --format gptq "$FIX/tiny-llama-f32.gguf" "$gq" \
        >/dev/null 2>&1
    echo keep > "$o"
    for args in "$gq" "--type f16 $gq" \
                "--base $FIX/tiny-llama-f32.gguf $TOP/tests/golden/eagle1/head"; do
        run -2 --separate-stderr convert $args "$o"
        [ "$stderr" = "convert: '$o': already exists (use --force to overwrite)" ]
        [ "$(cat "$o")" = keep ]
        [ -z "$(ls "$BATS_TEST_TMPDIR" | grep tmp)" ]
    done
    run -0 convert -f "$gq" "$o"
    run -0 convert --info "$o"
}

@test "GPTQ import: a write error in the staging f16 copy names that file (4)" {
    local gq="$BATS_TEST_TMPDIR/gq"
    quantize --method rtn --bits 4 --group-size 32 --format gptq "$FIX/tiny-llama-f32.gguf" "$gq" \
        >/dev/null 2>&1
    mount_full
    run -4 --separate-stderr convert "$gq" "$FULL/o.gguf"
    [[ "$stderr" == "convert: '$FULL/o.gguf.f16src.tmp.llmkit-"*"': "*"No space left on device" ]]
    [ -z "$(ls -A "$FULL" | grep -v '^fill$')" ]
}

# ---- llama2.c ----

@test "llama2.c checkpoint -> GGUF: weights and vocabulary carried over" {
    pyenv_python
    run -0 convert --info "$FIX/tiny-l2c.bin"
    assert_line --index 0 --partial 'llama2.c checkpoint (legacy v0): dim 64, hidden_dim 128, n_layers 2'
    run -0 convert "$FIX/tiny-l2c.bin" "$BATS_TEST_TMPDIR/l.gguf"
    "$PY" - "$FIX/tiny-l2c.bin" "$BATS_TEST_TMPDIR/l.gguf" "$FIX/tiny-spm-f32.gguf" <<'PY'
import struct, sys
import numpy as np
from gguf import GGUFReader
raw = open(sys.argv[1], 'rb').read()
dim, hidden, nl, nh, nkv, vocab, seq = struct.unpack('<7i', raw[:28])
f = np.frombuffer(raw[28:], dtype=np.float32)
hs = dim // nh; kv = nkv * hs; v = abs(vocab)
r = GGUFReader(sys.argv[2])
t = {x.name: np.asarray(x.data).reshape(-1) for x in r.tensors}
o = 0
def take(n):
    global o
    a = f[o:o + n]; o += n; return a
assert np.array_equal(take(v * dim), t['token_embd.weight'])
for kind, n in [('attn_norm', dim), ('attn_q', dim * dim), ('attn_k', kv * dim), ('attn_v', kv * dim),
                ('attn_output', dim * dim), ('ffn_norm', dim), ('ffn_gate', hidden * dim),
                ('ffn_down', dim * hidden), ('ffn_up', hidden * dim)]:
    for l in range(nl):
        assert np.array_equal(take(n), t['blk.%d.%s.weight' % (l, kind)]), (kind, l)
assert np.array_equal(take(dim), t['output_norm.weight'])
o += seq * hs  # freq_cis
assert np.array_equal(take(v * dim), t['output.weight'])
assert o == len(f)
# The vocabulary is the SPM fixture's, spaces turned back into U+2581.
ref = GGUFReader(sys.argv[3]).fields
got = r.fields
for k in ['tokenizer.ggml.tokens', 'tokenizer.ggml.scores', 'tokenizer.ggml.token_type']:
    assert got[k].contents() == ref[k].contents(), k
assert got['llama.attention.head_count_kv'].contents() == nkv
print('llama2c weights and vocabulary match')
PY
}

@test "llama2.c: missing or wrong tokenizer, truncated checkpoint" {
    cp "$FIX/tiny-l2c.bin" "$BATS_TEST_TMPDIR/m.bin"
    run -4 --separate-stderr convert "$BATS_TEST_TMPDIR/m.bin" "$BATS_TEST_TMPDIR/o.gguf"
    [[ "$stderr" == *"tokenizer.bin"* ]]
    head -c 1000 "$FIX/tokenizer.bin" > "$BATS_TEST_TMPDIR/tokenizer.bin"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/m.bin" "$BATS_TEST_TMPDIR/o.gguf"
    [[ "$stderr" == *"tokenizer.bin"* ]]
    run -0 convert --tokenizer "$FIX/tokenizer.bin" "$BATS_TEST_TMPDIR/m.bin" "$BATS_TEST_TMPDIR/o.gguf"
    truncate -s -4 "$BATS_TEST_TMPDIR/m.bin"
    run -3 --separate-stderr convert -f --tokenizer "$FIX/tokenizer.bin" --from llama2c "$BATS_TEST_TMPDIR/m.bin" "$BATS_TEST_TMPDIR/o2.gguf"
    [[ "$stderr" == *"m.bin"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/o2.gguf" ]
}
