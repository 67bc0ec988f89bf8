#!/usr/bin/env bats
# quantize --method gptq|rtn: options, refusals and exit codes, nothing left
# behind, --resume giving the same bits, the GGUF output running in generate.
# (The grids themselves are checked against a numpy oracle in
# tests/unit/test_gptq.c.)

load common

FIX="$TOP/tests/fixtures"
TINY="$FIX/tiny-llama-f32.gguf"
CALIB="$SHARED/data/calibration-groups-merged.txt"
EVAL="$SHARED/data/wikitext-2-test.raw"

teardown() {
    unmount_full
}

# gq OUT ARGS... : GPTQ of the tiny model (grid_quant)
gq() {
    grid_quant gptq "$@"
}

@test "--help documents the grid methods" {
    run -0 --separate-stderr quantize --help
    assert_output --partial '--method M'
    assert_output --partial '--act-order'
    assert_output --partial '--resume'
}

@test "--damp lies strictly between 0 and 1: the message, --help and quantize(1) say so" {
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    local d
    for d in 0 -0 1 1.5 -0.1; do
        run -2 --separate-stderr quantize --method gptq --calib "$CALIB" --damp "$d" "$TINY" o.gguf
        [ "${stderr_lines[0]}" = "quantize: --damp: '$d' is not a number greater than 0 and less than 1" ]
    done
    run -0 --separate-stderr quantize --help
    assert_output --partial '0 < F < 1'
    # the --damp item of the man page
    run -0 awk '/^\.It Fl \\-damp/ { p = 1; next } /^\.It/ { p = 0 } p' "$TOP/man/quantize.1"
    assert_output --partial 'greater than 0 and less than 1, both excluded'
    refute_output --partial 'between 0 and 1'
    run ls -A; assert_output ""
}

@test "usage errors exit 2 and leave no output" {
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    run -2 --separate-stderr quantize --method bogus "$TINY" o.gguf
    [[ "$stderr" == *"'bogus' is not gptq, awq or rtn"* ]]
    run -2 --separate-stderr quantize --method rtn --type Q4_0 "$TINY" o.gguf
    [[ "$stderr" == *"exclude each other"* ]]
    run -2 --separate-stderr quantize --method gptq "$TINY" o.gguf
    [[ "$stderr" == *"needs --calib"* ]]
    run -2 --separate-stderr quantize --method rtn --bits 5 "$TINY" o.gguf
    [[ "$stderr" == *"--bits 5"* ]]
    run -2 --separate-stderr quantize --method rtn --bits 9 "$TINY" o.gguf
    run -2 --separate-stderr quantize --method rtn --group-size 100 "$TINY" o.gguf
    [[ "$stderr" == *"--group-size 100"* ]]
    run -2 --separate-stderr quantize --method rtn --group-size 0 "$TINY" o.gguf
    run -2 --separate-stderr quantize --method rtn --act-order "$TINY" o.gguf
    [[ "$stderr" == *"need --method gptq"* ]]
    run -2 --separate-stderr quantize --method rtn --calib "$CALIB" "$TINY" o.gguf
    run -2 --separate-stderr quantize --method rtn --sym --asym "$TINY" o.gguf
    run -2 --separate-stderr quantize --method gptq --calib "$CALIB" --damp 1.5 "$TINY" o.gguf
    run -2 --separate-stderr quantize --method gptq --calib "$CALIB" --damp x "$TINY" o.gguf
    run -2 --separate-stderr quantize --type Q4_0 --bits 4 "$TINY" o.gguf
    [[ "$stderr" == *"need --method"* ]]
    run -2 --separate-stderr quantize --method rtn --format bogus "$TINY" o.gguf
    run -2 --separate-stderr quantize --method rtn --format gptq --eval "$EVAL" "$TINY" o
    [[ "$stderr" == *"--eval needs --format gguf"* ]]
    run -2 --separate-stderr quantize --method rtn --format gptq "$TINY" -
    run -2 --separate-stderr quantize --method rtn --imatrix x.dat "$TINY" o.gguf
    run -2 --separate-stderr quantize --method rtn - o.gguf <"$TINY"
    run ls -A; assert_output ""
}

@test "calibration text too short for the chunks asked: exit 2, the counts named, nothing left" {
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    printf 'Only a few words of text here.\n' >short.txt
    run -2 --separate-stderr quantize --method gptq --calib short.txt --calib-ctx 64 "$TINY" o.gguf
    [[ "$stderr" == *"'short.txt': text too short"* ]]
    run -2 --separate-stderr quantize --method gptq --calib "$CALIB" --calib-ctx 512 \
        --calib-chunks 100000 "$TINY" o.gguf
    [[ "$stderr" == *"text too short"*"100000 chunks of 512"* ]]
    run -4 --separate-stderr quantize --method gptq --calib none.txt "$TINY" o.gguf
    [[ "$stderr" == *"'none.txt'"* ]]
    [ ! -e o.gguf ]
    run ls -A; assert_output "short.txt"
}

@test "a text too short for one chunk is exit 2 under a memory limit too: checked before the chunk's scratch" {
    [ "${LLMKIT_SAN:-}" != address ] || skip "ulimit -v under AddressSanitizer"
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    # 250 MB: a small run fits; the scratch for a chunk of 2^20 tokens does not
    (ulimit -v 250000 && gq o.gguf)
    rm o.gguf
    run -2 --separate-stderr bash -c 'ulimit -v 250000 && exec "$@"' sh quantize --method gptq \
        --calib "$CALIB" --calib-ctx 1048576 "$TINY" o.gguf
    [[ "$stderr" == *"text too short"*"1 chunks of 1048576 need 1048576"* ]]
    [ -z "$(ls -A)" ]
}

@test "bad models: missing 4, bad magic 3, a model without blocks 3; nothing left" {
    cd "$BATS_TEST_TMPDIR"
    run -4 --separate-stderr quantize --method rtn nope.gguf o.gguf
    printf 'GGUX0000000000000000000000000000' >bad.gguf
    run -3 --separate-stderr quantize --method rtn bad.gguf o.gguf
    cp "$TINY" z.gguf
    "$LLMKIT_CACHE/venv/bin/python" - z.gguf <<'EOF' || skip "no gguf-py venv"
import sys, gguf.scripts.gguf_set_metadata as s
sys.argv = ["gguf-set-metadata", "--force", sys.argv[1], "llama.block_count", "0"]
s.main()
EOF
    run -3 --separate-stderr quantize --method gptq --calib "$CALIB" z.gguf o.gguf
    [[ "$stderr" == *"block_count"* ]]
    [ ! -e o.gguf ]
    [ -z "$(ls | grep tmp)" ]
}

@test "a full disk is exit 4 naming the output once, for a GGUF file and a directory" {
    mount_full
    run -4 --separate-stderr quantize -q -t 1 --method rtn "$TINY" "$FULL/o.gguf"
    [ "$stderr" = "quantize: '$FULL/o.gguf': write failed: No space left on device" ]
    run -4 --separate-stderr quantize -q -t 1 --method rtn --format gptq "$TINY" "$FULL/gptq"
    [ "$stderr" = "quantize: '$FULL/gptq': 'config.json': write failed: No space left on device" ]
    [ "$(ls -A "$FULL")" = fill ]
}

@test "--resume on a full disk: exit 4 naming the checkpoint file; no empty checkpoint directory left" {
    mount_full
    run -4 --separate-stderr gq "$FULL/o.gguf" --resume
    [ "$stderr" = "quantize: '$FULL/o.gguf.ckpt/blk.0.grid': write failed: No space left on device" ]
    [ "$(ls -A "$FULL")" = fill ]
    # a directory that was there before the run stays
    mkdir "$FULL/o.gguf.ckpt"
    run -4 --separate-stderr gq "$FULL/o.gguf" --resume
    [ -d "$FULL/o.gguf.ckpt" ]
}

@test "an existing output is kept without -f" {
    cd "$BATS_TEST_TMPDIR"
    echo keep >o.gguf
    run -2 --separate-stderr quantize --method rtn "$TINY" o.gguf
    [ "$(cat o.gguf)" = keep ]
}

@test "-f replaces a checkpoint directory of an earlier run, never a folder with other files" {
    cd "$BATS_TEST_TMPDIR"
    quantize -q --method rtn --format gptq "$TINY" g
    run -2 --separate-stderr quantize -q --method rtn --format gptq "$TINY" g
    [[ "$stderr" == *"'g': already exists"* ]]
    echo '{}' > g/config.json
    run -0 quantize -q -f --method rtn --format gptq "$TINY" g
    [ "$(cat g/config.json)" != '{}' ] && [ -f g/quantize_config.json ]
    echo keep > g/notes.txt
    run -2 --separate-stderr quantize -q -f --method rtn --format awq "$TINY" g
    [[ "$stderr" == *"'g': holds 'notes.txt', which no checkpoint has"* ]]
    [ "$(cat g/notes.txt)" = keep ]
    [ "$(ls -a | grep -c -e tmp -e '\.old\.')" -eq 0 ]
}

@test "GPTQ and RTN GGUF outputs run in generate; provenance in the metadata" {
    cd "$BATS_TEST_TMPDIR"
    gq g.gguf --bits 4 --group-size 32 --sym
    gq a.gguf --bits 4 --group-size 32 --sym --act-order
    quantize -q --method rtn --bits 4 --group-size 32 --sym "$TINY" r.gguf
    run -0 generate -q -m a.gguf -p "Hello" -n 4 --temp 0
    run -0 generate -q -m g.gguf -p "Hello" -n 4 --temp 0
    run -0 generate -q -m r.gguf -p "Hello" -n 4 --temp 0
    run -0 "$LLMKIT_CACHE/venv/bin/python" -c '
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
kv = {f.name: f for f in r.fields.values()}
print(" ".join(sorted(k for k in kv if k.startswith("llmkit.quantize"))))
print(sorted({t.tensor_type.name for t in r.tensors if ".attn_q." in t.name}))' g.gguf
    assert_output --partial 'method'
    assert_output --partial 'Q4_0'
    cmp -s g.gguf r.gguf && false
    true
}

@test "the output does not depend on the thread count; --json reports every linear" {
    cd "$BATS_TEST_TMPDIR"
    gq a.gguf -t 1 --group-size 32
    gq b.gguf -t 2 --group-size 32 --json >r.jsonl
    cmp a.gguf b.gguf
    [ "$(jq -r 'select(.type == "linear") | .name' r.jsonl | wc -l)" -eq 14 ]
    run -0 jq -r 'select(.type == "summary") | "\(.method) \(.bits) \(.group_size) \(.calib_tokens) \(.damp) \(.linears)"' r.jsonl
    assert_output 'gptq 4 32 128 0.01 14'
    run -0 jq -s -e '[.[] | select(.type == "linear") | .damp >= 0.01 and .loss > 0 and .dead_columns == 0] | all' r.jsonl
}

@test "GPTQ is closer to the model than RTN on its own calibration text" {
    cd "$BATS_TEST_TMPDIR"
    gq g.gguf --bits 3 --group-size 32 --json --eval "$CALIB" --eval-ctx 64 --eval-chunks 4 >g.jsonl
    quantize -q --method rtn --bits 3 --group-size 32 --json --eval "$CALIB" --eval-ctx 64 \
        --eval-chunks 4 "$TINY" r.gguf >r.jsonl
    g=$(jq -r 'select(.type == "summary") | .kld_mean' g.jsonl)
    r=$(jq -r 'select(.type == "summary") | .kld_mean' r.jsonl)
    echo "gptq $g rtn $r"
    awk -v g="$g" -v r="$r" 'BEGIN { exit !(g < r) }'
}

@test "--resume: a run stopped after its blocks were checkpointed resumes to the same bits" {
    cd "$BATS_TEST_TMPDIR"
    gq want.gguf --group-size 32 --act-order
    # a run that fails after every block is checkpointed (its --eval text is
    # missing): the checkpoints stay, the output does not
    run -4 --separate-stderr quantize --method gptq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 \
        -t 2 --group-size 32 --act-order --resume --eval missing.txt "$TINY" o.gguf
    [ ! -e o.gguf ]
    [ -e o.gguf.ckpt/blk.0.grid ] && [ -e o.gguf.ckpt/blk.1.grid ]
    # every block taken from the checkpoints
    gq o.gguf --group-size 32 --act-order --resume -v 2>err || { cat err; false; }
    grep -q 'resumed 2 of 2 blocks' err
    cmp want.gguf o.gguf
    [ ! -e o.gguf.ckpt ]
    # only the first block: the second recomputed from the first's grids
    run -4 quantize --method gptq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 \
        -t 2 --group-size 32 --act-order --resume --eval missing.txt "$TINY" p.gguf
    rm p.gguf.ckpt/blk.1.grid
    gq p.gguf --group-size 32 --act-order --resume -v 2>err
    grep -q 'resumed 1 of 2 blocks' err
    cmp want.gguf p.gguf
}

@test "--resume refuses checkpoints of other options (2) and corrupt ones (3)" {
    cd "$BATS_TEST_TMPDIR"
    run -4 quantize --method gptq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 \
        --group-size 32 --resume --eval missing.txt "$TINY" o.gguf
    run -2 --separate-stderr quantize --method gptq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 \
        --group-size 64 --resume "$TINY" o.gguf
    [[ "$stderr" == *"checkpoint of another model, text or options"* ]]
    [ ! -e o.gguf ]
    head -c 300 o.gguf.ckpt/blk.0.grid >t && mv t o.gguf.ckpt/blk.0.grid
    run -3 --separate-stderr quantize --method gptq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 \
        --group-size 32 --resume "$TINY" o.gguf
    [[ "$stderr" == *"truncated"* ]]
    [ ! -e o.gguf ]
}

@test "--resume: every checkpoint file is sealed; a changed byte, or no seal (an earlier version), is exit 3 naming it" {
    cd "$BATS_TEST_TMPDIR"
    run -4 quantize --method gptq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 \
        --group-size 32 --resume --eval missing.txt "$TINY" o.gguf
    cp -r o.gguf.ckpt keep.ckpt
    # bytes inside the grid values' valid range (every check but the seal passes)
    printf '\1\2\3\4\5\6\7\10' | dd of=o.gguf.ckpt/blk.1.grid bs=1 seek=20000 conv=notrunc 2>/dev/null
    run -3 --separate-stderr gq o.gguf --group-size 32 --resume
    [[ "$stderr" == *"'o.gguf.ckpt/blk.1.grid': checksum mismatch: the checkpoint is corrupt"* ]]
    [ ! -e o.gguf ]
    # removed, its block is recomputed: the output of an uninterrupted run
    rm o.gguf.ckpt/blk.1.grid
    gq o.gguf --group-size 32 --resume -v 2>err
    grep -q 'resumed 1 of 2 blocks' err
    gq want.gguf --group-size 32
    cmp want.gguf o.gguf
    # a checkpoint of the earlier format (magic LLMKGRD1, no seal)
    rm o.gguf
    mv keep.ckpt o.gguf.ckpt
    printf 'LLMKGRD1' | dd of=o.gguf.ckpt/blk.0.grid bs=1 conv=notrunc 2>/dev/null
    run -3 --separate-stderr quantize --method gptq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 \
        --group-size 32 --resume "$TINY" o.gguf
    [[ "$stderr" == *"'o.gguf.ckpt/blk.0.grid': a checkpoint of an earlier llmkit, without a checksum"* ]]
    [ ! -e o.gguf ]
}

@test "SmolLM2: GPTQ 4-bit g128 (576-wide rows: a partial last group) runs in generate" {
    local smol
    model_f32 smol SmolLM2-135M-Instruct.Q4_1.gguf SmolLM2-135M-Instruct.F32.gguf
    cd "$BATS_TEST_TMPDIR"
    quantize -q --method gptq --calib "$CALIB" --calib-ctx 64 --calib-chunks 2 --bits 4 --group-size 128 \
        --sym "$smol" g.gguf
    run -0 --separate-stderr generate -q -m g.gguf -p "The capital of France is" -n 4 --temp 0
    [ -n "$output" ]
}

@test "--format gptq / gptq_v2: the directory converts back and generates as the GGUF output does" {
    cd "$BATS_TEST_TMPDIR"
    gq g.gguf --group-size 32 --sym
    gq d --group-size 32 --sym --format gptq
    [ -f d/config.json ] && [ -f d/model.safetensors ]
    run -0 jq -r '.quantization_config | "\(.quant_method) \(.bits) \(.group_size) \(.sym) \(.desc_act)"' d/config.json
    assert_output 'gptq 4 32 true false'
    convert -q d back.gguf
    want=$(generate -q -m g.gguf -p "Hello there" -n 8 --temp 0)
    got=$(generate -q -m back.gguf -p "Hello there" -n 8 --temp 0)
    [ "$want" = "$got" ]
    quantize -q --method rtn --format gptq_v2 "$TINY" v2
    run -0 jq -r '.quantization_config.checkpoint_format' v2/config.json
    assert_output 'gptq_v2'
}
