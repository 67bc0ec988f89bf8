#!/usr/bin/env bats
# convert: EAGLE-1 heads to and from the published HF layout (config.json +
# model.safetensors): export, import against --base, bit-identical round
# trips, and refusals (pickles, wrong base, missing tensors, EAGLE-3) with
# nothing left behind.  The head is tests/golden/eagle1/head (a head trained
# on the tiny fixture, exported by convert; scripts/mkgolden-eagle1).

load common

FIX="$TOP/tests/fixtures/tiny-llama-f32.gguf"
HEAD="$TOP/tests/golden/eagle1/head"

setup() {
    [ -f "$FIX" ] || skip "fixtures missing (make fixtures)"
    cd "$BATS_TEST_TMPDIR"
}

# st_edit SRC DST OP... : a copy of safetensors SRC without / with extra
# tensors: drop:NAME, add:NAME (an F32 [1] tensor), nometa (no __metadata__),
# f16 (every tensor in F16)
st_edit() {
    python3 - "$@" <<'EOF'
import json, struct, sys
src, dst, ops = sys.argv[1], sys.argv[2], sys.argv[3:]
b = open(src, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
data = b[8 + n:]
meta = h.pop('__metadata__', None)
out, blobs, off = {}, [], 0
for k, v in sorted(h.items(), key=lambda kv: kv[1]['data_offsets'][0]):
    if 'drop:' + k in ops:
        continue
    blob = data[v['data_offsets'][0]:v['data_offsets'][1]]
    if 'f16' in ops:
        x = struct.unpack('<%df' % (len(blob) // 4), blob)
        blob = struct.pack('<%de' % len(x), *x)
        v = dict(v, dtype='F16')
    out[k] = dict(v, data_offsets=[off, off + len(blob)])
    blobs.append(blob)
    off += len(blob)
for op in ops:
    if op.startswith('add:'):
        out[op[4:]] = {'dtype': 'F32', 'shape': [1], 'data_offsets': [off, off + 4]}
        blobs.append(struct.pack('<f', 1.0))
        off += 4
if meta is not None and 'nometa' not in ops:
    out = dict({'__metadata__': meta}, **out)
hb = json.dumps(out).encode()
hb += b' ' * (-len(hb) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(hb)) + hb + b''.join(blobs))
EOF
}

# st_names FILE : the tensor names of a safetensors file, sorted
st_names() {
    python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; print(" ".join(sorted(k for k in json.loads(b[8:8+n]) if k != "__metadata__")))' "$1"
}

# headcopy DIR : a writable copy of the golden head directory
headcopy() {
    mkdir -p "$1"
    cp "$HEAD/config.json" "$HEAD/model.safetensors" "$1/"
}

@test "import needs --base; --base with anything else is a usage error" {
    run -2 --separate-stderr convert "$HEAD" h.gguf
    [[ $stderr == *"is an EAGLE head: give the model it drafts for with --base"* ]]
    [ ! -e h.gguf ]
    run -2 --separate-stderr convert --base "$FIX" "$FIX" copy.gguf
    [[ $stderr == *"--base goes with an EAGLE head"* ]]
    run -2 --separate-stderr convert --base "$FIX" --info "$HEAD"
    [[ $stderr == *'--base goes with a conversion, not --info'* ]]
    [ ! -e copy.gguf ]
}

@test "import, export: the published names and config, bit-identical round trips" {
    run -0 --separate-stderr convert --base "$FIX" "$HEAD" h.gguf
    run -0 --separate-stderr convert h.gguf out
    [ -f out/config.json ] && [ -f out/model.safetensors ]
    [ "$(jq -r '.num_hidden_layers, .bias, .architectures[0], .num_key_value_heads' out/config.json | tr '\n' ' ')" \
      = "1 true LlamaForCausalLM 2 " ]
    [ "$(st_names out/model.safetensors)" = "fc.bias fc.weight layers.0.mlp.down_proj.weight layers.0.mlp.gate_proj.weight layers.0.mlp.up_proj.weight layers.0.post_attention_layernorm.weight layers.0.self_attn.k_proj.weight layers.0.self_attn.o_proj.weight layers.0.self_attn.q_proj.weight layers.0.self_attn.v_proj.weight" ]
    cmp out/model.safetensors "$HEAD/model.safetensors"
    cmp out/config.json "$HEAD/config.json"
    run -0 --separate-stderr convert --base "$FIX" out h2.gguf
    cmp h.gguf h2.gguf
    # the head generate loads: the base it was trained for is accepted
    run -0 --separate-stderr generate -m "$FIX" --draft-head h2.gguf -p "a" -n 4 --temp 0
    # in f16 (as heads are published), and back
    run -0 --separate-stderr convert --type f16 h.gguf out16
    [ "$(jq -r .torch_dtype out16/config.json)" = float16 ]
    python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; h=json.loads(b[8:8+n]); assert {v["dtype"] for k, v in h.items() if k != "__metadata__"} == {"F16"}' \
        out16/model.safetensors
    run -0 --separate-stderr convert --base "$FIX" out16 h16.gguf
    run -0 --separate-stderr generate -m "$FIX" --draft-head h16.gguf -p "a" -n 4 --temp 0
    # options that do not apply to heads are refused
    run -2 --separate-stderr convert --base "$FIX" --type f16 out h3.gguf
    [[ $stderr == *"--type: EAGLE head GGUFs are f32"* ]]
    run -2 --separate-stderr convert --shard-size 1K h.gguf out1
    [[ $stderr == *"--shard-size: an EAGLE head is written as one file"* ]]
    [ ! -e h3.gguf ] && [ ! -e out1 ]
    # an existing output needs -f
    run -2 --separate-stderr convert h.gguf out
    [[ $stderr == *"'out': already exists"* ]]
    run -0 --separate-stderr convert -f h.gguf out
}

@test "a published head (no llmkit metadata, fp16, bias false) takes the base's identity" {
    headcopy pub
    st_edit "$HEAD/model.safetensors" pub/model.safetensors nometa drop:fc.bias f16
    jq '.bias = false' "$HEAD/config.json" > pub/config.json
    run -0 --separate-stderr convert --base "$FIX" pub h.gguf
    grep -q tiny-llama h.gguf
    run -0 --separate-stderr generate -m "$FIX" --draft-head h.gguf -p "a" -n 4 --temp 0
    # exported again without the (zero) FC bias, as vLLM's EAGLE-1 model wants
    run -0 --separate-stderr convert h.gguf out
    [ "$(jq -r .bias out/config.json)" = false ]
    [[ "$(st_names out/model.safetensors)" != *fc.bias* ]]
    run -0 --separate-stderr convert --base "$FIX" out h3.gguf
    cmp h.gguf h3.gguf
    # "bias": false with an fc.bias is contradictory
    st_edit "$HEAD/model.safetensors" pub/model.safetensors nometa
    run -3 --separate-stderr convert --base "$FIX" pub h2.gguf
    [[ $stderr == *"fc.bias"* ]]
    [ ! -e h2.gguf ]
}

@test "a pickled pytorch_model.bin is refused (3), nothing written" {
    mkdir bin
    cp "$HEAD/config.json" bin/
    printf 'PK\003\004 not read' > bin/pytorch_model.bin
    run -3 --separate-stderr convert --base "$FIX" bin h.gguf
    [[ $stderr == *"pytorch_model.bin"*"pickled"* ]]
    [ ! -e h.gguf ]
}

@test "the wrong base is refused (3): other shape, other weights; nothing written" {
    run -3 --separate-stderr convert --base "$TOP/tests/fixtures/tiny-llama256-f32.gguf" "$HEAD" h.gguf
    [[ $stderr == *"does not fit the base"* ]]
    run -3 --separate-stderr convert --base "$TOP/tests/fixtures/tiny-llama-f16.gguf" "$HEAD" h.gguf
    [[ $stderr == *"exported for another model"* ]]
    [ ! -e h.gguf ]
}

@test "missing or foreign tensors are refused (3), nothing written" {
    headcopy m
    st_edit "$HEAD/model.safetensors" m/model.safetensors drop:layers.0.self_attn.q_proj.weight
    run -3 --separate-stderr convert --base "$FIX" m h.gguf
    [[ $stderr == *"tensor 'layers.0.self_attn.q_proj.weight' missing"* ]]
    st_edit "$HEAD/model.safetensors" m/model.safetensors add:layers.0.input_layernorm.weight
    run -3 --separate-stderr convert --base "$FIX" m h.gguf
    [[ $stderr == *"not part of an EAGLE-1 head"* ]]
    [ ! -e h.gguf ]
}

@test "EAGLE-3 heads are refused both ways (3)" {
    headcopy e3
    st_edit "$HEAD/model.safetensors" e3/model.safetensors add:d2t
    run -3 --separate-stderr convert --base "$FIX" e3 h.gguf
    [[ $stderr == *"EAGLE-3"* ]]
    jq '.draft_vocab_size = 100' "$HEAD/config.json" > e3/config.json
    cp "$HEAD/model.safetensors" e3/
    run -3 --separate-stderr convert --base "$FIX" e3 h.gguf
    [[ $stderr == *"EAGLE-3"* ]]
    [ ! -e h.gguf ]
    # a GGUF head of version 3
    run -0 --separate-stderr convert --base "$FIX" "$HEAD" h1.gguf
    python3 - h1.gguf h3.gguf <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
i = b.find(b'eagle.version') + len('eagle.version')
assert struct.unpack('<I', b[i:i + 4])[0] == 4      # GGUF_TYPE_UINT32
b[i + 4:i + 8] = struct.pack('<I', 3)
open(sys.argv[2], 'wb').write(b)
EOF
    run -3 --separate-stderr convert h3.gguf out
    [[ $stderr == *"EAGLE-3"* ]]
    [ ! -e out ]
    # a head of draft-train --arch eagle3
    head -c 12000 "$SHARED/data/calibration-groups-merged.txt" > text.txt
    run -0 draft-train -m "$FIX" --data text.txt -o e3.gguf --epochs 1 --seq-len 32 -q \
        --arch eagle3 --ttt-steps 2 --draft-vocab 50
    run -3 --separate-stderr convert e3.gguf out
    [[ $stderr == *"EAGLE-3 heads are not supported in the HF layout"* ]]
    [ ! -e out ]
}

@test "a head with a draft vocabulary keeps it through HF (metadata), byte for byte" {
    head -c 12000 "$SHARED/data/calibration-groups-merged.txt" > text.txt
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o dv.gguf --epochs 1 \
        --seq-len 32 --draft-vocab 40 -q
    run -0 --separate-stderr convert dv.gguf dv
    python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; m=json.loads(b[8:8+n])["__metadata__"]; ids=[int(x) for x in m["llmkit.eagle.draft_vocab"].split(",")]; assert len(ids) == 40 and ids == sorted(set(ids)), ids' \
        dv/model.safetensors
    run -0 --separate-stderr convert --base "$FIX" dv dv2.gguf
    cmp dv.gguf dv2.gguf
}

@test "draft-train --no-fc-bias: a head exported without fc.bias (\"bias\": false), as vLLM's EAGLE-1 model loads it" {
    head -c 12000 "$SHARED/data/calibration-groups-merged.txt" > text.txt
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o nb.gguf --epochs 1 \
        --seq-len 32 --draft-vocab 40 -q --no-fc-bias
    run -0 --separate-stderr convert nb.gguf nb
    [ "$(jq -r .bias nb/config.json)" = false ]
    [[ "$(st_names nb/model.safetensors)" != *fc.bias* ]]
    # the same run with a bias trains one (so the option is what removed it)
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o b.gguf --epochs 1 \
        --seq-len 32 --draft-vocab 40 -q
    run -0 --separate-stderr convert b.gguf b
    [ "$(jq -r .bias b/config.json)" = true ]
    [[ "$(st_names b/model.safetensors)" == *fc.bias* ]]
    # it round-trips and drafts losslessly
    run -0 --separate-stderr convert --base "$FIX" nb nb2.gguf
    cmp nb.gguf nb2.gguf
    run -0 --separate-stderr generate -m "$FIX" --draft-head nb2.gguf -p "Hello" -n 16 --temp 0 \
        --ignore-eos --spec-compare
    # EAGLE-3 heads have no FC bias to drop
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o e.gguf --epochs 1 \
        --arch eagle3 --no-fc-bias
    [[ $stderr == *"--no-fc-bias"* ]]
}
