# eagle3_forward.py - the EAGLE-3 head oracle: vLLM's speculators library
# (0.9.0, speculators.models.eagle3 Eagle3DraftModel, the class
# SpeculatorModel's registry picks for the config) is built from the
# config.json of an HF head directory written by `convert --layout
# speculators HEAD.gguf DIR`, loads its model.safetensors (every tensor
# known, nothing missing but the frozen embedding and the verifier's
# training-only norm and LM head) and runs its own forward, the
# training-time-test unroll, in float64 on CPU with eager attention, on given
# tokens and features.  The draft logits of every step are taken from its
# lm_head through a forward hook (forward returns only their argmax).  Run
# by scripts/mkgolden-eagle3 in the venv of scripts/pyenv-oracle with
# speculators on PYTHONPATH.
#
# When config.json names a verifier (convert --verifier), the model is loaded
# the way speculators loads heads, SpeculatorModel.from_pretrained, which
# also reads the verifier's config and its embedding (an HF directory
# convert wrote from the base GGUF).  Otherwise (the fixture's golden: the
# loader wants three distinct feature layers, and the 2-layer fixture's are
# 1, 1, 0) the embedding rows of the tokens come from the input.
#
# speculators imports openai and hs_connectors at package import, for its
# data-generation and training pipelines only; neither is installed (nor
# needed by the model): they are stubbed here as empty modules.
#
#   python eagle3_forward.py HEAD_DIR IN.json OUT.json
#       IN: {"tokens": [n ids: token i+1 of the sequence], "features": [n][3d]
#            (the target's features at position i), "embedding": {id: row}
#            (the base's embedding rows of the tokens), "steps": S}
#       OUT: {"oracle": "...", "logits": [S][n][draft_vocab] (step s, row i:
#            the draft logits of token i + s + 1, rows i >= n - s padded by
#            speculators and not compared), "torch_f32_vs_f64": max relative
#            difference of the same run in float32}
import importlib.machinery
import json
import os
import sys
import types


def stub_attr(module, attr):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return type(attr, (), {"__module__": module})


def stub(name):
    m = types.ModuleType(name)
    m.__path__ = []
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)
    m.__getattr__ = lambda attr, n=name: stub_attr(n, attr)
    sys.modules[name] = m


for n in ("openai", "openai.types", "openai.types.chat", "openai.types.completion",
          "hs_connectors"):
    stub(n)

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from speculators import SpeculatorModel, SpeculatorModelConfig  # noqa: E402


def load(head, spec, dtype):
    cfg = SpeculatorModelConfig.from_pretrained(head)
    assert type(cfg).__name__ == "Eagle3SpeculatorConfig", type(cfg)
    # flex attention is for GPUs: the eager path with speculators' dense masks
    cfg.transformer_layer_config._attn_implementation = "eager"
    if cfg.speculators_config.verifier.name_or_path:
        # the whole loader: weights, and the embedding from the verifier
        m = SpeculatorModel.from_pretrained(head, config=cfg)
        assert type(m).__name__ == "Eagle3DraftModel", type(m)
        # speculators loads the verifier's embedding only where the model's
        # is still its NaN sentinel; transformers 5.24 (speculators 0.9.0
        # asks for <= 5.19) fills missing weights with zeros first: load it
        # again with speculators' own loader
        if not m.embed_tokens.weight.isnan().any() and not m.embed_tokens.weight.any():
            m._load_verifier_weights(overwrite_embed_tokens=True)
        return m.to(dtype).eval(), "SpeculatorModel.from_pretrained"
    m = SpeculatorModel.registered_model_class_from_config(cfg)(cfg)
    assert type(m).__name__ == "Eagle3DraftModel", type(m)
    sd = load_file(os.path.join(head, "model.safetensors"))
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # what the checkpoint does not hold: the frozen embedding and the
    # verifier's norm and LM head (training only)
    assert set(missing) <= {"embed_tokens.weight", "verifier_norm.weight",
                            "verifier_lm_head.weight"}, missing
    assert unexpected == [], unexpected
    m = m.to(dtype).eval()
    d = cfg.transformer_layer_config.hidden_size
    w = torch.zeros(cfg.transformer_layer_config.vocab_size, d, dtype=dtype)
    for t, row in spec["embedding"].items():
        w[int(t)] = torch.tensor(row, dtype=dtype)
    m.embed_tokens.weight.data = w
    return m, "Eagle3DraftModel(config) + load_state_dict"


def run(head, spec, dtype):
    m, how = load(head, spec, dtype)
    logits = []
    hook = m.lm_head.register_forward_hook(lambda mod, inp, out: logits.append(out[0]))
    n = len(spec["tokens"])
    with torch.no_grad():
        m(torch.tensor([spec["features"]], dtype=dtype),
          torch.tensor([spec["tokens"]], dtype=torch.long),
          torch.zeros(1, n, dtype=torch.long),
          position_ids=torch.arange(n).unsqueeze(0), ttt_steps=spec["steps"])
    hook.remove()
    return torch.stack(logits), how


def main():
    head, inp, outp = sys.argv[1:4]
    spec = json.load(open(inp))
    ref, how = run(head, spec, torch.float64)
    f32 = run(head, spec, torch.float32)[0].double()
    rel = float((f32 - ref).abs().max() / ref.abs().max())
    json.dump({"oracle": "speculators 0.9.0 Eagle3DraftModel (%s, eager attention), torch %s, "
               "float64" % (how, torch.__version__), "torch_f32_vs_f64": rel,
               "logits": ref.tolist()}, open(outp, "w"))


if __name__ == "__main__":
    main()
