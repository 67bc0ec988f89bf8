# gptq_into_gguf.py - a GPTQ checkpoint directory (GPTQModel's "gptq" v1
# format, 4 bits) dequantized into a copy of the f32 GGUF it was made from,
# so that quantize --eval-only can score it against that base
# (scripts/quality-table).  Independent of llmkit's convert.
#
#   python gptq_into_gguf.py BASE.f32.gguf GPTQ_DIR OUT.gguf
#
# Each quantized linear (qweight, qzeros, scales, g_idx) becomes
#   W[o][i] = scales[g][o] * (q[i][o] - (z[g][o] + 1)),  g = g_idx[i]
# (v1 stores zero - 1), rows permuted as llama.cpp's convert permutes q/k
# for llama, and is written over the base's F32 tensor of the same name and
# shape in place; every other tensor stays the base's.  The relative error
# of each tensor against the base's is checked (a wrong name map or
# permutation would be ~1.4) and the largest printed.
import json
import os
import shutil
import sys

import numpy as np
from gguf import GGUFReader
from safetensors import safe_open

if len(sys.argv) != 4:
    sys.exit("usage: gptq_into_gguf.py BASE.f32.gguf GPTQ_DIR OUT.gguf")
base, qdir, out = sys.argv[1:4]
cfg = json.load(open(os.path.join(qdir, "quantize_config.json")))
if cfg.get("bits") != 4 or cfg.get("checkpoint_format", cfg.get("format")) != "gptq":
    sys.exit("gptq_into_gguf: '%s': only 4-bit gptq v1 checkpoints" % qdir)
hf = json.load(open(os.path.join(qdir, "config.json")))
st = {}                      # the GPTQ tensors only (the rest may be bfloat16)
for f in sorted(os.listdir(qdir)):
    if f.endswith(".safetensors"):
        with safe_open(os.path.join(qdir, f), framework="pt") as sf:
            for k in sf.keys():
                if k.rsplit(".", 1)[-1] in ("qweight", "qzeros", "scales", "g_idx"):
                    st[k] = sf.get_tensor(k).float().numpy() if k.endswith(".scales") \
                        else sf.get_tensor(k).numpy()

names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down"}


def unpack_rows(p):          # int32 [r][c] -> 4-bit [r * 8][c] (packed along rows)
    s = np.arange(8, dtype=np.uint32) * 4
    return ((p.astype(np.uint32)[:, None, :] >> s[None, :, None]) & 15).reshape(-1, p.shape[1])


def unpack_cols(p):          # int32 [r][c] -> 4-bit [r][c * 8] (packed along columns)
    s = np.arange(8, dtype=np.uint32) * 4
    return ((p.astype(np.uint32)[:, :, None] >> s[None, None, :]) & 15).reshape(p.shape[0], -1)


def permute(w, n_head):      # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


r = GGUFReader(base)
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
tensors = {t.name: t for t in r.tensors}
shutil.copyfile(base, out + ".tmp")
worst = (0.0, "")
with open(out + ".tmp", "r+b") as fp:
    n = 0
    for k in st:
        if not k.endswith(".qweight"):
            continue
        pre = k[:-len(".qweight")]                      # model.layers.N.self_attn.q_proj
        parts = pre.split(".")
        layer, mod = int(parts[2]), ".".join(parts[3:5])
        q = unpack_rows(st[k]).astype(np.float32)        # [in][out]
        z = unpack_cols(st[pre + ".qzeros"]).astype(np.float32) + 1   # [groups][out]
        s = st[pre + ".scales"].astype(np.float32)       # [groups][out]
        g = st[pre + ".g_idx"].astype(np.int64)          # [in]
        w = (s[g] * (q - z[g])).T.copy()                 # [out][in]
        if arch == "llama" and mod in ("self_attn.q_proj", "self_attn.k_proj"):
            nh = hf["num_attention_heads"] if mod.endswith("q_proj") else hf["num_key_value_heads"]
            w = permute(w, nh)
        name = "blk.%d.%s.weight" % (layer, names[mod])
        t = tensors.get(name)
        if t is None or t.tensor_type.name != "F32" or tuple(t.data.shape) != w.shape:
            sys.exit("gptq_into_gguf: '%s': no F32 tensor '%s' of shape %s" % (base, name, w.shape))
        ref = np.asarray(t.data, dtype=np.float32)
        e = float(np.linalg.norm(w - ref) / max(np.linalg.norm(ref), 1e-30))
        if e > 0.5:
            sys.exit("gptq_into_gguf: '%s': relative error %.3f against the base: wrong layout" % (name, e))
        worst = max(worst, (e, name))
        fp.seek(t.data_offset)
        fp.write(np.ascontiguousarray(w, dtype="<f4").tobytes())
        n += 1
    fp.flush()
    os.fsync(fp.fileno())
os.rename(out + ".tmp", out)
print("gptq_into_gguf: %d linears of %s into %s (largest relative error %.4f, %s)"
      % (n, qdir, out, worst[0], worst[1]), file=sys.stderr)
