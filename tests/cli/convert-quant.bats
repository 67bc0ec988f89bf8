#!/usr/bin/env bats
# convert: GPTQ (v1 "gptq", "gptq_v2") and AWQ GEMM directories into GGUF,
# checked against the interop oracle's goldens (scripts/mkgolden-quant-hf:
# transformers + gptqmodel load the same directories bit-exactly like our
# dequantized reference), and bad directories.

load common

FIX="$TOP/tests/fixtures"
GOLD="$TOP/tests/golden/quant-hf"
: "${LLMKIT_MKQGRID:=$TOP/build/mkqgrid}"
GPTQMODEL_DIR="$LLMKIT_CACHE/hfq-gptqmodel-smollm2-4bit-g128"

setup() {
    [ -x "$LLMKIT_MKQGRID" ] || { echo "no $LLMKIT_MKQGRID (make build/mkqgrid)"; return 1; }
}

# pyenv_python : the light venv (numpy, safetensors), or skip (fail in CI)
pyenv_python() {
    PY="${LLMKIT_CACHE}/venv/bin/python"
    if ! "$PY" -c 'import numpy, safetensors' 2>/dev/null; then
        [ "${CI:-}" != true ] || { echo "no venv at $PY (scripts/pyenv)"; return 1; }
        skip "no Python venv with numpy and safetensors (run scripts/pyenv)"
    fi
}

# mkdir_case NAME DIR : the golden case NAME's directory, rebuilt with mkqgrid
mkdir_case() {
    local args
    args=$(jq -r --arg n "$1" '.cases[] | select(.name == $n) | .args' "$GOLD/tiny.json")
    [ -n "$args" ] || { echo "no case $1 in tiny.json"; return 1; }
    # shellcheck disable=SC2086
    "$LLMKIT_MKQGRID" $args "$FIX/tiny-llama-f32.gguf" "$2"
}

# tensors_sha DIR : the golden's fingerprint of DIR/model.safetensors' tensors
tensors_sha() {
    python3 "$TOP/scripts/oracle/tensor_sha.py" "$1/model.safetensors"
}

# close_logits GOT.f32 GOLDEN_JSON CASE TOL : our logits (raw f32) within TOL
# of transformers' in the golden (max |difference|, printed)
close_logits() {
    "$PY" - "$@" <<'EOF'
import json, sys
import numpy as np
got, gold, name, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
g = json.load(open(gold))
c = [c for c in g["cases"] if c["name"] == name][0]
ref = np.array([float(x) for x in c["logits"]], dtype=np.float64)
lg = np.fromfile(got, dtype="<f4").astype(np.float64)
if "logit_index" in c:      # a sample of the vocabulary
    lg = lg[np.array(c["logit_index"])] if lg.size > max(c["logit_index"]) else lg[:0]
d = float(np.abs(lg - ref).max()) if lg.shape == ref.shape else float("inf")
print("%s: max |ours - transformers| = %.3g (tolerance %g)" % (name, d, tol))
sys.exit(0 if d <= tol else 1)
EOF
}

ids() { jq -r '.ids | map(tostring) | join(",")' "$1"; }

@test "our GPTQ/AWQ directories: tensors as the oracle's, and convert gives transformers' logits" {
    pyenv_python
    local n=0 ids
    ids=$(ids "$GOLD/tiny.json")
    for name in $(jq -r '.cases[].name' "$GOLD/tiny.json"); do
        d="$BATS_TEST_TMPDIR/$name"
        mkdir_case "$name" "$d"
        want=$(jq -r --arg n "$name" '.cases[] | select(.name == $n) | .tensors_sha256' "$GOLD/tiny.json")
        got=$(tensors_sha "$d")
        [ "$got" = "$want" ] || { echo "$name: tensors $got, golden $want"; return 1; }
        # dequantized to f32: transformers' logits within f32 rounding
        run -0 convert --type f32 "$d" "$d-f32.gguf"
        "$LLMKIT_MKQGRID" --logits "$ids" "$d-f32.gguf" "$d-f32.lg"
        close_logits "$d-f32.lg" "$GOLD/tiny.json" "$name" 2e-6
        # lossless (grid types; activations quantized to Q8 by the Q4/Q8 dot products)
        run -0 convert "$d" "$d.gguf"
        "$LLMKIT_MKQGRID" --logits "$ids" "$d.gguf" "$d.lg"
        close_logits "$d.lg" "$GOLD/tiny.json" "$name" 0.05
        n=$((n + 1))
    done
    [ "$n" -ge 8 ]
}

@test "lossless convert puts each grid in the type that holds it, and says where none does" {
    mkdir_case v1-sym-g32 "$BATS_TEST_TMPDIR/sym"
    run -0 --separate-stderr convert -v "$BATS_TEST_TMPDIR/sym" "$BATS_TEST_TMPDIR/sym.gguf"
    [[ "$stderr" == *"14 grids held exactly"* ]]
    run -0 convert --info --json "$BATS_TEST_TMPDIR/sym.gguf"
    [ "$(echo "$output" | jq -r 'select(.name == "blk.0.attn_q.weight") | .ggml_type')" = Q4_0 ]
    [ "$(echo "$output" | jq -r 'select(.key == "llmkit.quantize.method") | .value')" = rtn ]
    convert "$BATS_TEST_TMPDIR/sym" - | cmp - "$BATS_TEST_TMPDIR/sym.gguf"
    mkdir_case awq-g64 "$BATS_TEST_TMPDIR/awq"
    run -0 convert --info --json "$BATS_TEST_TMPDIR/awq"
    run -0 convert "$BATS_TEST_TMPDIR/awq" "$BATS_TEST_TMPDIR/awq.gguf"
    run -0 convert --info --json "$BATS_TEST_TMPDIR/awq.gguf"
    [ "$(echo "$output" | jq -r 'select(.name == "blk.1.ffn_down.weight") | .ggml_type')" = Q4_1 ]
    mkdir_case v1-3bit-g32 "$BATS_TEST_TMPDIR/b3"
    run -0 --separate-stderr convert -v "$BATS_TEST_TMPDIR/b3" "$BATS_TEST_TMPDIR/b3.gguf"
    [[ "$stderr" == *"'blk.0.attn_q.weight': no GGUF type holds a 3-bit grid"*"written as Q5_0"* ]]
    run -0 generate -m "$BATS_TEST_TMPDIR/b3.gguf" -p "the cat" -n 4 --temp 0
}

@test "GPTQModel's GPTQ of SmolLM2 converts and gives transformers' logits" {
    [ -d "$GPTQMODEL_DIR" ] || skip "no $GPTQMODEL_DIR (scripts/mkgolden-quant-hf --gptqmodel makes it, ~400 s)"
    pyenv_python
    local g="$GOLD/gptqmodel-smollm2.json"
    want=$(jq -r '.tensors_sha256' "$g")
    got=$(tensors_sha "$GPTQMODEL_DIR")
    [ "$got" = "$want" ] || skip "$GPTQMODEL_DIR is another GPTQModel run than the golden's (tensors $got)"
    run -0 convert --type f32 "$GPTQMODEL_DIR" "$BATS_TEST_TMPDIR/g-f32.gguf"
    "$LLMKIT_MKQGRID" --logits "$(ids "$g")" "$BATS_TEST_TMPDIR/g-f32.gguf" "$BATS_TEST_TMPDIR/g.lg"
    close_logits "$BATS_TEST_TMPDIR/g.lg" "$g" gptqmodel-smollm2 "$(jq -r '.tolerance' "$g")"
    run -0 convert "$GPTQMODEL_DIR" "$BATS_TEST_TMPDIR/g.gguf"
    run -0 generate -m "$BATS_TEST_TMPDIR/g.gguf" --chat --temp 0 -n 16 -p "What is the capital of France?"
    assert_output --partial Paris
}

# mutate DIR PYTHON : runs PYTHON with t = the tensors of DIR/model.safetensors
# (numpy) and c = DIR/config.json, then writes both back
mutate() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
import numpy as np
from safetensors.numpy import load_file, save_file
d, code = sys.argv[1], sys.argv[2]
t = load_file(d + "/model.safetensors")
c = json.load(open(d + "/config.json"))
exec(code)
save_file(t, d + "/model.safetensors", metadata={"format": "pt"})
json.dump(c, open(d + "/config.json", "w"))
EOF
}

@test "bad GPTQ/AWQ directories exit 3 naming the file and tensor, and leave no output" {
    pyenv_python
    local b="$BATS_TEST_TMPDIR/bad" o="$BATS_TEST_TMPDIR/out.gguf"
    bad() {   # CASE PYTHON PATTERN
        rm -rf "$b"
        mkdir_case "$1" "$b"
        rm -f "$b/quantize_config.json"
        mutate "$b" "$2"
        run -3 --separate-stderr convert "$b" "$o"
        [[ "$stderr" == *"$3"* ]] || { echo "stderr: $stderr (wanted $3)"; return 1; }
        [ ! -e "$o" ] && [ -z "$(ls "$BATS_TEST_TMPDIR" | grep tmp)" ]
        run -3 --separate-stderr convert --type f16 "$b" "$o"
        [ ! -e "$o" ]
    }
    p=model.layers.0.self_attn.q_proj
    bad v1-sym-g32 "t['$p.scales'] = t['$p.scales'][:1]" \
        "model.safetensors': tensor '$p.scales': F16 [1, 64], expected [2, 64]"
    bad v1-sym-g32 "t['$p.qzeros'] = t['$p.qzeros'][:, :4].copy()" \
        "tensor '$p.qzeros': I32 [2, 4], expected [2, 8]"
    bad v1-sym-g32 "t['$p.g_idx'] = t['$p.g_idx'][:32].copy()" "tensor '$p.g_idx'"
    bad v1-sym-g32 "t['$p.g_idx'][3] = 7" "g_idx[3] = 7, 2 groups"
    bad v1-sym-g32 "t['$p.qweight'] = t['$p.qweight'].astype(np.float32)" \
        "tensor '$p.qweight': F32 of 2 dimensions"
    bad v1-sym-g32 "del t['$p.qzeros']" "no tensor '$p.qzeros'"
    bad awq-g32 "t['$p.qweight'] = t['$p.qweight'][:, :4].copy()" \
        "tensor '$p.qweight': holds a 64 x 32 linear (in x out), config.json says 64 x 64"
    bad awq-g32 "c['hidden_size'] = 128; c['num_attention_heads'] = 8; c['num_key_value_heads'] = 4" \
        "tensor 'model.layers.0.mlp.down_proj.qweight': holds a 128 x 64 linear (in x out), config.json says 128 x 128"
    bad v1-sym-g32 "c['quantization_config']['checkpoint_format'] = c['quantization_config']['format'] = 'marlin'" \
        "checkpoint format 'marlin' not supported"
    bad awq-g32 "c['quantization_config']['version'] = 'gemv'" "AWQ version 'gemv' not supported"
    bad v1-sym-g32 "c['quantization_config']['bits'] = 5" "5 bits not supported"
    bad v1-sym-g32 "c['quantization_config']['dynamic'] = {'-:.*down.*': {}}" "'dynamic' overrides not supported"
}
