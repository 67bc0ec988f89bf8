#!/usr/bin/env bats
# quantize --method awq: options, refusals and exit codes, nothing left
# behind, the GGUF output (grids and rescaled norms) running in generate, the
# AWQ GEMM directory.  (The scales, clipping and grids themselves are checked
# against a numpy oracle in tests/unit/test_awq.c.)

load common

FIX="$TOP/tests/fixtures"
TINY="$FIX/tiny-llama-f32.gguf"
CALIB="$SHARED/data/calibration-groups-merged.txt"

# aq OUT ARGS... : AWQ of the tiny model (grid_quant)
aq() {
    grid_quant awq "$@"
}

@test "--help names awq" {
    run -0 --separate-stderr quantize --help
    assert_output --partial 'gptq, awq or rtn'
}

@test "usage errors exit 2 and leave no output" {
    # (in a directory of its own: run --separate-stderr keeps files in the test's)
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    run -2 --separate-stderr quantize --method awq "$TINY" o.gguf
    [[ "$stderr" == *"--method awq needs --calib"* ]]
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --sym "$TINY" o.gguf
    [[ "$stderr" == *"zero point"* ]]
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --mse "$TINY" o.gguf
    [[ "$stderr" == *"--mse"* ]]
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --resume "$TINY" o.gguf
    [[ "$stderr" == *"need --method gptq"* ]]
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --act-order "$TINY" o.gguf
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --damp 0.1 "$TINY" o.gguf
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --bits 5 "$TINY" o.gguf
    [[ "$stderr" == *"--bits 5"* ]]
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --group-size 0 "$TINY" o.gguf
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" - o.gguf <"$TINY"
    [ -z "$(ls -A)" ]
}

@test "calibration text too short, missing, a bad model: exit codes, nothing left" {
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    printf 'Only a few words of text here.\n' >short.txt
    run -2 --separate-stderr quantize --method awq --calib short.txt --calib-ctx 64 "$TINY" o.gguf
    [[ "$stderr" == *"'short.txt': text too short"* ]]
    run -4 --separate-stderr quantize --method awq --calib none.txt "$TINY" o.gguf
    [[ "$stderr" == *"'none.txt'"* ]]
    printf 'GGUX0000000000000000000000000000' >bad.gguf
    run -3 --separate-stderr quantize --method awq --calib "$CALIB" bad.gguf o.gguf
    run -4 --separate-stderr quantize --method awq --calib "$CALIB" nope.gguf o.gguf
    [ ! -e o.gguf ]
    [ -z "$(ls | grep -v -e short.txt -e bad.gguf)" ]
}

@test "a text too short for one chunk is exit 2 under a memory limit too: checked before the chunk's scratch" {
    [ "${LLMKIT_SAN:-}" != address ] || skip "ulimit -v under AddressSanitizer"
    mkdir "$BATS_TEST_TMPDIR/w" && cd "$BATS_TEST_TMPDIR/w"
    run -2 --separate-stderr bash -c 'ulimit -v 250000 && exec "$@"' sh quantize --method awq \
        --calib "$CALIB" --calib-ctx 1048576 "$TINY" o.gguf
    [[ "$stderr" == *"text too short"*"1 chunks of 1048576 need 1048576"* ]]
    [ -z "$(ls -A)" ]
}

@test "AWQ GGUF output: grids, rescaled norms, provenance; runs in generate; -v says what was skipped" {
    cd "$BATS_TEST_TMPDIR"
    quantize -v --method awq --calib "$CALIB" --calib-ctx 32 --calib-chunks 4 -t 2 --group-size 32 \
        "$TINY" a.gguf 2>err
    # the fixture has 2 KV heads for 4 query heads: v -> o is not a scale group
    grep -q 'attn_v -> attn_output not scaled in 2 of 2 layers' err
    run -0 generate -q -m a.gguf -p "Hello" -n 4 --temp 0
    run -0 "$LLMKIT_CACHE/venv/bin/python" - a.gguf "$TINY" <<'EOF'
import sys, numpy as np, gguf
a, t = gguf.GGUFReader(sys.argv[1]), gguf.GGUFReader(sys.argv[2])
kv = {f.name: f for f in a.fields.values()}
f = kv["llmkit.quantize.method"]
print("method", bytes(f.parts[f.data[0]]).decode())
ta = {x.name: x for x in a.tensors}
tt = {x.name: x for x in t.tensors}
print("q", ta["blk.0.attn_q.weight"].tensor_type.name)
# the norms absorbed 1/s: F32, changed, finite
for n in ("blk.0.attn_norm.weight", "blk.1.ffn_norm.weight"):
    x, y = np.array(ta[n].data), np.array(tt[n].data)
    print(n, ta[n].tensor_type.name, bool(np.all(np.isfinite(x))), bool(np.any(x != y)))
EOF
    assert_output --partial 'method awq'
    assert_output --partial 'q Q4_1'
    assert_output --partial 'blk.0.attn_norm.weight F32 True True'
    assert_output --partial 'blk.1.ffn_norm.weight F32 True True'
}

@test "AWQ is not worse than RTN on its own calibration text; the run is the same on 1 and 2 threads" {
    cd "$BATS_TEST_TMPDIR"
    aq a.gguf --bits 3 --group-size 32 --json --eval "$CALIB" --eval-ctx 64 --eval-chunks 4 >a.jsonl
    quantize -q --method rtn --bits 3 --group-size 32 --json --eval "$CALIB" --eval-ctx 64 \
        --eval-chunks 4 "$TINY" r.gguf >r.jsonl
    a=$(jq -r 'select(.type == "summary") | .kld_mean' a.jsonl)
    r=$(jq -r 'select(.type == "summary") | .kld_mean' r.jsonl)
    echo "awq $a rtn $r"
    awk -v a="$a" -v r="$r" 'BEGIN { exit !(a <= r) }'
    run -0 jq -r 'select(.type == "summary") | "\(.method) \(.bits) \(.group_size) \(.calib_tokens) \(.linears)"' a.jsonl
    assert_output 'awq 3 32 128 14'
    aq b.gguf --bits 3 --group-size 32 -t 1
    aq c.gguf --bits 3 --group-size 32 -t 2
    cmp b.gguf c.gguf
}

@test "--format awq: a GEMM directory that converts back and generates as the GGUF output does" {
    cd "$BATS_TEST_TMPDIR"
    aq g.gguf --group-size 32
    aq d --group-size 32 --format awq
    [ -f d/config.json ]
    run -0 jq -r '.quantization_config | "\(.quant_method) \(.bits) \(.group_size) \(.zero_point) \(.version)"' d/config.json
    assert_output 'awq 4 32 true gemm'
    convert -q d back.gguf
    want=$(generate -q -m g.gguf -p "Hello there" -n 8 --temp 0)
    got=$(generate -q -m back.gguf -p "Hello there" -n 8 --temp 0)
    [ "$want" = "$got" ]
    # a width the group does not divide: the GEMM layout cannot hold it (2), nothing left
    run -2 --separate-stderr quantize --method awq --calib "$CALIB" --calib-ctx 32 --calib-chunks 2 \
        --group-size 128 --format awq "$TINY" e
    [[ "$stderr" == *"in_features % group size"* ]]
    [ ! -e e ]
    # refused before calibrating: a calibration text far too short is not what it reports
    printf 'short\n' >short.txt
    run -2 --separate-stderr quantize --method awq --calib short.txt --group-size 128 \
        --format awq "$TINY" e
    [[ "$stderr" == *"'$TINY'"*"in_features % group size"* ]]
    [ ! -e e ]
}
