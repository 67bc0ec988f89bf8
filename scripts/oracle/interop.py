# interop.py - the GPTQ/AWQ interop oracle (../shared/reference/oracles.md
# §1): transformers + gptqmodel load a quantized directory on CPU in fp32
# and its logits are compared with a reference.  Run by
# scripts/mkgolden-quant-hf in the venv of scripts/pyenv-oracle.
#
#   python interop.py check SPEC.json OUT.json
#       SPEC: {"ids": [token ids], "cases": [{"name", "base", "src", "deq",
#              "qdir", "expect": "equal"|"differ", "mutate": null|"relabel_v2"|
#              "awq_no_interleave", "backend": null|a gptqmodel GPTQ backend}]}
#       base: an fp32 HF directory of the source model (convert's), src: the
#       source GGUF, deq: our dequantized weights of every grid (mkqgrid
#       --dequant: the loaders' rounding fp16((q - z) * s) computed by our C
#       code, GGUF row order, f32, in the source's tensor order).  The
#       reference is base with those weights (q/k rows unpermuted here); the
#       quantized directory (mutated first into a copy, for the negative
#       controls) is loaded with AutoModelForCausalLM and both run the same
#       token ids.  "equal": logits bit-identical; "differ": they differ by
#       more than 1e-3.  OUT gets per case the verdict, the largest
#       difference and the quantized model's logits at the last position.
#       Exit 1 when any case fails its expectation.
#   python interop.py logits QDIR IDS OUT.f32 [BACKEND]
#       the last position's logits of a (quantized) HF directory, raw f32;
#       BACKEND (a gptqmodel backend, e.g. gptq_torch) replaces the automatic
#       choice: on a CPU with AVX512-BF16 it picks TorchCpuAvx512Linear,
#       which refuses widths the group size does not divide (576 with g128).
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import gguf  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
      "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
      "ffn_down": "mlp.down_proj"}
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def unpermute(w, n_head):
    """GGUF (llama.cpp) rows -> HF rows of a q/k weight: HF row h*D + a*D/2 + i
    is GGUF row h*D + 2i + a (the inverse of convert_hf_to_gguf's permute)."""
    rows = w.shape[0]
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, -1).swapaxes(1, 2).reshape(rows, -1)


def reference(base, src, deq):
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, device_map="cpu")
    cfg = model.config
    raw = np.fromfile(deq, dtype="<f4")
    off = 0
    for t in gguf.GGUFReader(src).tensors:
        p = t.name.split(".")
        if len(p) != 4 or p[0] != "blk" or p[2] not in HF or p[3] != "weight":
            continue
        cols, rows = int(t.shape[0]), int(t.shape[1])
        w = raw[off:off + rows * cols].reshape(rows, cols)
        off += rows * cols
        if p[2] == "attn_q":
            w = unpermute(w, cfg.num_attention_heads)
        elif p[2] == "attn_k":
            w = unpermute(w, cfg.num_key_value_heads)
        param = model.get_submodule("model.layers.%s.%s" % (p[1], HF[p[2]])).weight
        assert tuple(param.shape) == (rows, cols), (t.name, tuple(param.shape))
        with torch.no_grad():
            param.copy_(torch.from_numpy(np.ascontiguousarray(w)))
    assert off == raw.size, "dequantized weights: %d floats used of %d" % (off, raw.size)
    return model


def load(qdir, backend=None):
    """A quantized directory in fp32 on CPU; backend (e.g. gptq_torch) replaces
    gptqmodel's automatic kernel choice for a 4-bit GPTQ directory."""
    kw = {}
    if backend:
        from transformers import GPTQConfig
        kw["quantization_config"] = GPTQConfig(bits=4, backend=backend)
    return AutoModelForCausalLM.from_pretrained(qdir, device_map="cpu", dtype=torch.float32, **kw)


def run(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def relabel_v2(qdir):
    """GPTQ v1 data labelled gptq_v2: the zeros read off by one."""
    for name in ("config.json", "quantize_config.json"):
        path = os.path.join(qdir, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            c = json.load(f)
        q = c.get("quantization_config", c)
        q["checkpoint_format"] = q["format"] = "gptq_v2"
        with open(path, "w") as f:
            json.dump(c, f, indent=2)


def awq_no_interleave(qdir):
    """AWQ GEMM words repacked in natural column order (no [0,2,4,6,1,3,5,7])."""
    path = os.path.join(qdir, "model.safetensors")
    t = load_file(path)
    for k in list(t):
        if not (k.endswith(".qweight") or k.endswith(".qzeros")):
            continue
        w = t[k].view(np.uint32)
        nib = np.stack([(w >> (4 * i)) & 15 for i in range(8)], axis=-1)  # [.., j, nibble]
        cols = np.empty_like(nib)
        cols[..., AWQ_ORDER] = nib                                         # column order
        out = np.zeros_like(w)
        for i in range(8):
            out |= cols[..., i] << (4 * i)
        t[k] = out.view(np.int32)
    save_file(t, path, metadata={"format": "pt"})


def check(spec_path, out_path):
    with open(spec_path) as f:
        spec = json.load(f)
    ids = spec["ids"]
    results, bad = [], 0
    refs = {}
    for c in spec["cases"]:
        key = (c["base"], c["src"], c["deq"])
        if key not in refs:
            refs[key] = run(reference(*key), ids)
        ref = refs[key]
        qdir, tmp = c["qdir"], None
        if c.get("mutate"):
            tmp = tempfile.mkdtemp(prefix="interop-")
            qdir = os.path.join(tmp, "q")
            shutil.copytree(c["qdir"], qdir)
            {"relabel_v2": relabel_v2, "awq_no_interleave": awq_no_interleave}[c["mutate"]](qdir)
        try:
            model = load(qdir, c.get("backend"))
        except Exception as e:  # a case that does not load fails, the others still run
            print("interop: %-22s FAILED to load: %s" % (c["name"], e), file=sys.stderr)
            bad += 1
            results.append({"name": c["name"], "expect": c["expect"], "ok": False, "error": str(e)})
            continue
        finally:
            if tmp:
                shutil.rmtree(tmp)
        lq = run(model, ids)
        kernels = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__
                          and type(m).__name__ != "Linear"})
        diff = float((ref - lq).abs().max())
        equal = bool(torch.equal(ref, lq))
        ok = equal if c["expect"] == "equal" else diff > 1e-3
        bad += not ok
        r = {"name": c["name"], "expect": c["expect"], "ok": ok, "equal": equal,
             "max_abs_diff": diff, "max_abs_logit": float(ref.abs().max()), "kernels": kernels,
             "logits": [float(x) for x in lq[-1]]}
        print("interop: %-22s %-6s %s (max |diff| %.3g, kernels %s)"
              % (c["name"], c["expect"], "ok" if ok else "FAILED", diff, ",".join(kernels)),
              file=sys.stderr)
        results.append(r)
    with open(out_path, "w") as f:
        json.dump({"ids": ids, "cases": results}, f)
    return 1 if bad else 0


def logits(qdir, ids, out, backend=None):
    model = load(qdir, backend)
    run(model, [int(x) for x in ids.split(",")])[-1].numpy().astype("<f4").tofile(out)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    if len(sys.argv) in (5, 6) and sys.argv[1] == "logits":
        sys.exit(logits(*sys.argv[2:]))
    sys.exit("usage: interop.py check SPEC.json OUT.json | logits QDIR IDS OUT.f32")
