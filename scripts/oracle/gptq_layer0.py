# gptq_layer0.py - the GPTQ layer objective tr((W - Q) H (W - Q)^T) of the
# first layer's attention weights (attn_q, attn_k, attn_v), whose inputs are
# the RMS-normed token embeddings, so H = 2 X^T X / n is exact from token ids
# alone (docs/quantization.md: GPTQ against RTN and GPTQModel).
#
#   python gptq_layer0.py BASE.f32.gguf CALIB.ids EVAL.ids QUANT.gguf...
#
# For each QUANT (any GGUF whose three tensors dequantize; F32 carriers too)
# and for a numpy RTN, textbook GPTQ (damping 0.01, 0.05, 0.1, 0.3) and
# act-order GPTQ (4-bit, group 128, sym): the objective under the Hessian of
# the first 4096 calibration ids and of the first 4096 evaluation ids.
# llama only (eps 1e-5; gemma's embedding scale and 1 + w norms are not done).
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def tensors(p):
    return {t.name: t for t in GGUFReader(p).tensors}


def deq(t):
    shape = tuple(int(x) for x in reversed(t.shape))
    v = np.asarray(t.data) if t.tensor_type.name == "F32" else dequantize(t.data, t.tensor_type)
    return v.reshape(shape).astype(np.float64)


def hessian(base, path, n=4096):
    ids = np.array(open(path).read().split(), dtype=np.int64)[:n]
    e = deq(base["token_embd.weight"])[ids]
    x = e / np.sqrt((e * e).mean(1, keepdims=True) + 1e-5) * deq(base["blk.0.attn_norm.weight"])
    return 2 * x.T @ x / len(ids)


def scales(g, maxq=15):
    xmax = np.maximum(-np.minimum(g.min(1), 0), np.maximum(g.max(1), 0))
    s = 2 * xmax / maxq
    s[s == 0] = 1
    return s


def rtn(w, gs=128):
    q = np.zeros_like(w)
    for i in range(0, w.shape[1], gs):
        s = scales(w[:, i:i + gs])[:, None]
        q[:, i:i + gs] = s * (np.clip(np.round(w[:, i:i + gs] / s) + 8, 0, 15) - 8)
    return q


def gptq(w, h, damp=0.01, gs=128):
    w, n = w.copy(), w.shape[1]
    h = h + damp * np.mean(np.diag(h)) * np.eye(n)
    hinv = np.linalg.cholesky(np.linalg.inv(h)).T
    q = np.zeros_like(w)
    for i in range(n):
        if i % gs == 0:
            s = scales(w[:, i:i + gs])
        q[:, i] = s * (np.clip(np.round(w[:, i] / s) + 8, 0, 15) - 8)
        w[:, i:] -= np.outer((w[:, i] - q[:, i]) / hinv[i, i], hinv[i, i:])
    return q


base = tensors(sys.argv[1])
hc, he = hessian(base, sys.argv[2]), hessian(base, sys.argv[3])
quants = [(p, tensors(p)) for p in sys.argv[4:]]
print("%-20s %-36s %10s %10s" % ("tensor", "weights", "calib H", "eval H"))
for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"):
    w = deq(base[name])
    p = np.argsort(-np.diag(hc))
    rows = [("numpy rtn", rtn(w))]
    rows += [("numpy gptq damp %g" % d, gptq(w, hc, d)) for d in (0.01, 0.05, 0.1, 0.3)]
    rows += [("numpy gptq act-order", gptq(w[:, p], hc[p][:, p])[:, np.argsort(p)])]
    rows += [(path.rsplit("/", 1)[-1], deq(t[name])) for path, t in quants]
    for lab, q in rows:
        d = w - q
        print("%-20s %-36s %10.5f %10.5f" % (name, lab, np.einsum("ij,jk,ik->", d, hc, d),
                                               np.einsum("ij,jk,ik->", d, he, d)))
