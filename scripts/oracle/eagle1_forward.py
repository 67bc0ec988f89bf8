# eagle1_forward.py - the EAGLE-1 head oracle: the EAGLE authors' own draft
# model class (eagle-llm, eagle/model/cnets.py Model: fc on
# concat(embedding, feature), one llama layer without input_layernorm) loads
# an HF head directory written by `convert HEAD.gguf DIR` and runs it, in
# float64 on CPU, on given tokens and features.  Run by scripts/mkgolden-eagle1
# in the venv of scripts/pyenv-oracle with eagle-llm on PYTHONPATH.
#
#   python eagle1_forward.py HEAD_DIR IN.json OUT.json
#       IN: {"tokens": [n ids: token i+1 of the sequence, the head's shifted
#            input], "features": [n][d] (feature i), "embedding": [n][d] (the
#            base's embedding rows of those tokens)}
#       OUT: {"oracle": "...", "expected": [n][d] the head's output (the
#            predicted next features), "torch_f32_vs_f64": max relative
#            difference of the same run in float32}
import json
import os
import sys

import torch
from safetensors.torch import load_file

from eagle.model.cnets import LlamaRotaryEmbedding, Model
from eagle.model.configs import EConfig


def run(head, cfg, bias, theta, tokens, feats, embd, dtype):
    torch.set_default_dtype(dtype)
    m = Model(cfg, bias=bias)
    # eagle-llm 1.2.1's cnets.py builds its rotary embedding with the default
    # base 10000 whatever rope_theta says; the EAGLE repository's later
    # cnets1.py (the EAGLE-1 model EaModel loads) passes config.rope_theta.
    # Do as the later code does, with the package's own class (theta from
    # config.json: newer transformers move it out of the config's attributes).
    if cfg.rope_scaling is None and theta != 10000.0:
        for layer in m.layers:
            at = layer.self_attn
            at.rotary_emb = LlamaRotaryEmbedding(at.head_dim, at.max_position_embeddings, base=theta)
    sd = load_file(os.path.join(head, "model.safetensors"))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # the only parameter the checkpoint does not hold is the frozen embedding
    assert [k for k in missing if k != "embed_tokens.weight"] == [], missing
    assert unexpected == [], unexpected
    w = torch.zeros(cfg.vocab_size, cfg.hidden_size, dtype=dtype)
    for t, row in zip(tokens, embd):
        w[t] = torch.tensor(row, dtype=dtype)
    m.embed_tokens.weight.data = w
    m = m.to(dtype).eval()
    with torch.no_grad():
        out = m(torch.tensor([feats], dtype=dtype), torch.tensor([tokens], dtype=torch.long))
    return out[0]


def main():
    head, inp, outp = sys.argv[1:4]
    spec = json.load(open(inp))
    cj = json.load(open(os.path.join(head, "config.json")))
    cfg = EConfig.from_pretrained(head)
    # newer transformers turn "rope_scaling": null into {"rope_type":
    # "default", ...}, which cnets.py (written for the older spelling,
    # rope_scaling["type"]) takes for a scaling: give it back its None
    rs = cfg.rope_scaling
    if isinstance(rs, dict) and "type" not in rs and rs.get("rope_type") == "default":
        cfg.rope_scaling = None
    bias = cj.get("bias", True)
    args = (head, cfg, bias, float(cj.get("rope_theta", 10000.0)), spec["tokens"], spec["features"], spec["embedding"])
    ref = run(*args, torch.float64)
    f32 = run(*args, torch.float32).double()
    rel = float((f32 - ref).abs().max() / ref.abs().max())
    json.dump({"oracle": "eagle-llm eagle.model.cnets.Model, torch %s, float64" % torch.__version__,
               "torch_f32_vs_f64": rel, "expected": ref.tolist()}, open(outp, "w"))


if __name__ == "__main__":
    main()
