#!/usr/bin/env bats
# convert: EAGLE heads to and from the published HF layouts (config.json +
# model.safetensors): EAGLE-1 in the EAGLE authors' layout, EAGLE-3 in theirs
# and in vLLM's speculators layout (--layout speculators): export, import
# against --base, bit-identical round trips, --info, and refusals (pickles,
# wrong base, missing or foreign tensors, broken d2t/t2d) with nothing left
# behind.  The heads are tests/golden/eagle1/head and tests/golden/eagle3/head
# (trained on the tiny fixture, exported by convert; scripts/mkgolden-eagle1,
# scripts/mkgolden-eagle3).

load common

FIX="$TOP/tests/fixtures/tiny-llama-f32.gguf"
HEAD="$TOP/tests/golden/eagle1/head"
HEAD3="$TOP/tests/golden/eagle3/head"

setup() {
    [ -f "$FIX" ] || skip "fixtures missing (make fixtures)"
    cd "$BATS_TEST_TMPDIR"
}

# st_edit SRC DST OP... : a copy of safetensors SRC without / with extra
# tensors: drop:NAME, add:NAME (an F32 [1] tensor), nometa (no __metadata__),
# f16 (every F32 tensor in F16), poke:NAME:I:V (element I of an I64 or BOOL
# tensor set to V)
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
    for op in ops:
        if op.startswith('poke:' + k + ':'):
            i, val = (int(x) for x in op.split(':')[2:])
            size, fmt = (8, '<q') if v['dtype'] == 'I64' else (1, '<B')
            blob = blob[:i * size] + struct.pack(fmt, val) + blob[(i + 1) * size:]
    if 'f16' in ops and v['dtype'] == 'F32':
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
    for h in "$HEAD" "$HEAD3"; do
        rm -rf bin
        mkdir bin
        cp "$h/config.json" bin/
        printf 'PK\003\004 not read' > bin/pytorch_model.bin
        run -3 --separate-stderr convert --base "$FIX" bin h.gguf
        [[ $stderr == *"pytorch_model.bin"*"pickled"* ]]
        [ ! -e h.gguf ]
    done
}

@test "the wrong base is refused (3): other shape, other weights; nothing written" {
    for h in "$HEAD" "$HEAD3"; do
        run -3 --separate-stderr convert --base "$TOP/tests/fixtures/tiny-llama256-f32.gguf" "$h" h.gguf
        [[ $stderr == *"does not fit the base"* ]]
    done
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

@test "EAGLE-3 names and an EAGLE-1 config do not mix (3)" {
    headcopy e3
    st_edit "$HEAD/model.safetensors" e3/model.safetensors add:d2t
    run -3 --separate-stderr convert --base "$FIX" e3 h.gguf
    [[ $stderr == *"tensor 'd2t': an EAGLE-3 tensor, but config.json has no draft_vocab_size"* ]]
    # draft_vocab_size makes it an EAGLE-3 config: EAGLE-1's names are foreign
    jq '.draft_vocab_size = 100' "$HEAD/config.json" > e3/config.json
    cp "$HEAD/model.safetensors" e3/
    run -3 --separate-stderr convert --base "$FIX" e3 h.gguf
    [[ $stderr == *"not part of an EAGLE-3 head (eagle layout)"* ]]
    [ ! -e h.gguf ]
    # a GGUF head of another version
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
    [[ $stderr == *"eagle.version 3: only version 1 is supported"* ]]
    [ ! -e out ]
}

@test "EAGLE-3: both layouts, their names and configs, bit-identical round trips, --info" {
    run -0 --separate-stderr convert --base "$FIX" "$HEAD3" h.gguf
    # speculators' layout gives the golden's bytes back
    run -0 --separate-stderr convert --layout speculators h.gguf sp
    cmp sp/model.safetensors "$HEAD3/model.safetensors"
    cmp sp/config.json "$HEAD3/config.json"
    [ "$(jq -r '.speculators_model_type, .architectures[0], .draft_vocab_size, .norm_before_residual, .transformer_layer_config.num_hidden_layers, .transformer_layer_config.model_type, .speculators_config.algorithm, .speculators_config.proposal_methods[0].proposal_type, .speculators_config.verifier.name_or_path, (.eagle_aux_hidden_state_layer_ids | map(tostring) | join(","))' sp/config.json | tr '\n' ' ')" \
      = "eagle3 Eagle3Speculator 50 false 1 llama eagle3 greedy null 1,1,0 " ]
    [ "$(st_names sp/model.safetensors)" = "d2t fc.weight layers.0.hidden_norm.weight layers.0.input_layernorm.weight layers.0.mlp.down_proj.weight layers.0.mlp.gate_proj.weight layers.0.mlp.up_proj.weight layers.0.post_attention_layernorm.weight layers.0.self_attn.k_proj.weight layers.0.self_attn.o_proj.weight layers.0.self_attn.q_proj.weight layers.0.self_attn.v_proj.weight lm_head.weight norm.weight t2d" ]
    # the EAGLE authors' layout (the default)
    run -0 --separate-stderr convert h.gguf eh
    [ "$(jq -r '.architectures[0], .draft_vocab_size, .num_hidden_layers, .model_type, has("bias"), has("speculators_model_type")' eh/config.json | tr '\n' ' ')" \
      = "LlamaForCausalLMEagle3 50 1 llama false false " ]
    [ "$(st_names eh/model.safetensors)" = "d2t fc.weight lm_head.weight midlayer.hidden_norm.weight midlayer.input_layernorm.weight midlayer.mlp.down_proj.weight midlayer.mlp.gate_proj.weight midlayer.mlp.up_proj.weight midlayer.post_attention_layernorm.weight midlayer.self_attn.k_proj.weight midlayer.self_attn.o_proj.weight midlayer.self_attn.q_proj.weight midlayer.self_attn.v_proj.weight norm.weight t2d" ]
    python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; h=json.loads(b[8:8+n]); assert (h["d2t"]["dtype"], h["d2t"]["shape"], h["t2d"]["dtype"], h["t2d"]["shape"], h["fc.weight"]["shape"], h["midlayer.self_attn.q_proj.weight"]["shape"], h["lm_head.weight"]["shape"]) == ("I64", [50], "BOOL", [281], [64, 192], [64, 128], [50, 64]), h' \
        eh/model.safetensors
    run -0 --separate-stderr convert --base "$FIX" eh h2.gguf
    cmp h.gguf h2.gguf
    run -0 --separate-stderr convert --base "$FIX" sp h3.gguf
    cmp h.gguf h3.gguf
    run -0 --separate-stderr generate -m "$FIX" --draft-head h2.gguf -p "a" -n 4 --temp 0
    # --verifier names the target for speculators' own loader
    run -0 --separate-stderr convert --layout speculators --verifier org/base-model h.gguf spv
    [ "$(jq -r .speculators_config.verifier.name_or_path spv/config.json)" = org/base-model ]
    # --info describes either layout
    run -0 --separate-stderr convert --info eh
    [[ $output == *"EAGLE-3 head (eagle layout)"*"hidden_size 64"* ]]
    run -0 --separate-stderr convert --info --json sp
    [[ $output == *'"architecture":"EAGLE-3 head (speculators layout)"'* ]]
    # in f16: the weights, not the maps
    run -0 --separate-stderr convert --type f16 h.gguf e16
    python3 -c 'import json,struct,sys; b=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",b[:8])[0]; h=json.loads(b[8:8+n]); assert {v["dtype"] for k, v in h.items() if k not in ("__metadata__", "d2t", "t2d")} == {"F16"} and h["d2t"]["dtype"] == "I64", h' \
        e16/model.safetensors
    run -0 --separate-stderr convert --base "$FIX" e16 h16.gguf
    run -0 --separate-stderr generate -m "$FIX" --draft-head h16.gguf -p "a" -n 4 --temp 0
}

@test "EAGLE-3 over the whole vocabulary: no d2t/t2d, round trip byte for byte" {
    head -c 12000 "$SHARED/data/calibration-groups-merged.txt" > text.txt
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o e3.gguf --epochs 1 \
        --seq-len 32 -q --arch eagle3 --ttt-steps 2 --draft-vocab 0
    for l in eagle speculators; do
        run -0 --separate-stderr convert --layout $l e3.gguf $l
        [[ "$(st_names $l/model.safetensors)" != *d2t* ]]
        [[ "$(st_names $l/model.safetensors)" != *t2d* ]]
        run -0 --separate-stderr convert --base "$FIX" $l back-$l.gguf
        cmp e3.gguf back-$l.gguf
    done
    [ "$(jq -r .draft_vocab_size eagle/config.json)" = 281 ]
}

@test "EAGLE-3 refusals (3): broken d2t/t2d, missing or foreign tensors, other layers or options; nothing written" {
    # (pickles and the wrong base: with EAGLE-1's above)
    mkdir b
    cp "$HEAD3/config.json" b/
    # a published head without llmkit metadata, in f16, is read
    st_edit "$HEAD3/model.safetensors" b/model.safetensors nometa f16
    run -0 --separate-stderr convert --base "$FIX" b ok.gguf
    grep -q tiny-llama ok.gguf
    try() {     # try EXPECTED-MESSAGE st_edit-OPS...
        local want=$1
        shift
        st_edit "$HEAD3/model.safetensors" b/model.safetensors "$@"
        run -3 --separate-stderr convert --base "$FIX" b h.gguf
        [[ $stderr == *"$want"* ]] || { echo "$stderr"; return 1; }
        [ ! -e h.gguf ]
    }
    try "tensor 'd2t': draft id 3 maps outside the vocabulary" poke:d2t:3:100000
    try "tensor 'd2t': target ids not ascending at draft id 1" poke:d2t:1:-1
    try "tensor 't2d': token 0 is marked but d2t says otherwise" poke:t2d:0:1
    try "tensor 't2d' missing ('d2t' and 't2d' go together)" drop:t2d
    try "tensors 'd2t' and 't2d' missing (draft_vocab_size 50 of 281 tokens)" drop:t2d drop:d2t
    try "tensor 'layers.0.hidden_norm.weight' missing" drop:layers.0.hidden_norm.weight
    try "tensor 'midlayer.hidden_norm.weight': not part of an EAGLE-3 head (speculators layout)" \
        add:midlayer.hidden_norm.weight
    cp "$HEAD3/model.safetensors" b/
    cfg() {     # cfg EXPECTED-MESSAGE JQ-FILTER
        jq "$2" "$HEAD3/config.json" > b/config.json
        run -3 --separate-stderr convert --base "$FIX" b h.gguf
        [[ $stderr == *"$1"* ]] || { echo "$stderr"; return 1; }
        [ ! -e h.gguf ]
    }
    cfg "'norm_before_residual' is set: only the EAGLE authors' layer is supported" \
        '.norm_before_residual = true'
    cfg "target_hidden_size 128 is not hidden_size 64" '.target_hidden_size = 128'
    cfg "feature layer 5 (config.json eagle_aux_hidden_state_layer_ids) is not below the base's 2 layers" \
        '.eagle_aux_hidden_state_layer_ids = [1, 1, 5]'
    cfg "'draft_vocab_size' is not 1 to the vocabulary's 281" '.draft_vocab_size = 300'
    cfg "'speculators_model_type' is not \"eagle3\"" '.speculators_model_type = "mtp"'
}

@test "--layout and --verifier: usage errors (2)" {
    run -0 --separate-stderr convert --base "$FIX" "$HEAD" h1.gguf
    run -2 --separate-stderr convert --layout speculators h1.gguf out
    [[ $stderr == *"--layout speculators: 'h1.gguf' is an EAGLE-1 head (speculators has EAGLE-3 heads only)"* ]]
    run -2 --separate-stderr convert --layout bogus h1.gguf out
    [[ $stderr == *"--layout: unknown layout 'bogus' (eagle, speculators)"* ]]
    run -2 --separate-stderr convert --layout eagle --base "$FIX" "$HEAD3" h.gguf
    [[ $stderr == *"--layout goes with an EAGLE head GGUF converted to an HF directory"* ]]
    run -2 --separate-stderr convert --layout eagle "$FIX" model-hf
    [[ $stderr == *"--layout goes with an EAGLE head GGUF"* ]]
    run -2 --separate-stderr convert --verifier x h1.gguf out
    [[ $stderr == *"--verifier goes with --layout speculators"* ]]
    run -2 --separate-stderr convert --info --layout eagle "$HEAD3"
    [[ $stderr == *"--layout goes with a conversion, not --info"* ]]
    run -0 --separate-stderr convert --base "$FIX" "$HEAD3" h3.gguf
    run -2 --separate-stderr convert --layout speculators --verifier $'org/\xff' h3.gguf out
    [[ $stderr == *"--verifier: the name is not UTF-8 text"* ]]
    [ ! -e out ] && [ ! -e h.gguf ] && [ ! -e model-hf ]
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
