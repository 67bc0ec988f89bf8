"""spec_chi2.py MODEL DRAWS PROMPT_IDS TEMP [COLUMN]

The statistical check of speculative sampling: DRAWS holds one JSON array
of generated token ids per line (seeded runs of generate with a draft, at
temperature TEMP with every filter off), PROMPT_IDS the prompt's ids.  (COLUMN,
default 1, picks the token tested: 0 is a control that must fail.)  The
distribution of the second generated token (the first one sampled from a
verify pass) is computed directly, independently of llmkit, by a float64
numpy forward pass of the llama model read with gguf-py:

    Pr(t2 = v) = sum over t1 of p(t1 | prompt) p(v | prompt, t1)

and Pearson's chi-square compares the draws with it (bins of expected count
below 5 merged).  Exits 0 when the p-value is above 0.001 (the draws are
seeded, so the verdict is deterministic), 1 otherwise; prints the figures.
"""
import json
import math
import sys

import numpy as np
from gguf import GGUFReader


def load(path):
    r = GGUFReader(path)
    f = {k: v for k, v in r.fields.items()}

    def scalar(k):
        x = f[k]
        return x.parts[x.data[0]][0]
    hp = dict(n_layer=int(scalar('llama.block_count')), n_head=int(scalar('llama.attention.head_count')),
              n_kv=int(scalar('llama.attention.head_count_kv')), n_embd=int(scalar('llama.embedding_length')),
              eps=float(scalar('llama.attention.layer_norm_rms_epsilon')),
              base=float(scalar('llama.rope.freq_base')), n_rot=int(scalar('llama.rope.dimension_count')))
    w = {}
    for t in r.tensors:
        assert t.tensor_type.name == 'F32', t.name
        shape = [int(x) for x in reversed(t.shape)]  # rows, cols
        w[t.name] = np.array(t.data, dtype=np.float64).reshape(shape if len(shape) > 1 else [-1])
    return hp, w


def rmsnorm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope(x, pos, n_rot, base):
    # x [T, heads, hd]; adjacent pairs (llama.cpp's ROPE_NORM) of the first n_rot dims
    y = x.copy()
    i = np.arange(n_rot // 2)
    theta = pos[:, None] * base ** (-2.0 * i / n_rot)          # [T, n_rot/2]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    y[..., 0:n_rot:2] = x0 * c - x1 * s
    y[..., 1:n_rot:2] = x0 * s + x1 * c
    return y


def logits(hp, w, toks):
    T, H, K, E = len(toks), hp['n_head'], hp['n_kv'], hp['n_embd']
    hd = E // H
    x = w['token_embd.weight'][toks]
    pos = np.arange(T, dtype=np.float64)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(hp['n_layer']):
        p = 'blk.%d.' % l
        h = rmsnorm(x, w[p + 'attn_norm.weight'], hp['eps'])
        q = (h @ w[p + 'attn_q.weight'].T).reshape(T, H, hd)
        k = (h @ w[p + 'attn_k.weight'].T).reshape(T, K, hd)
        v = (h @ w[p + 'attn_v.weight'].T).reshape(T, K, hd)
        q, k = rope(q, pos, hp['n_rot'], hp['base']), rope(k, pos, hp['n_rot'], hp['base'])
        out = np.zeros((T, H, hd))
        for hh in range(H):
            g = hh // (H // K)
            s = q[:, hh] @ k[:, g].T / math.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hh] = (s / s.sum(axis=1, keepdims=True)) @ v[:, g]
        x = x + out.reshape(T, E) @ w[p + 'attn_output.weight'].T
        h = rmsnorm(x, w[p + 'ffn_norm.weight'], hp['eps'])
        gt = h @ w[p + 'ffn_gate.weight'].T
        up = h @ w[p + 'ffn_up.weight'].T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ w[p + 'ffn_down.weight'].T
    x = rmsnorm(x, w['output_norm.weight'], hp['eps'])
    out_w = w.get('output.weight', w['token_embd.weight'])
    return x[-1] @ out_w.T


TEMP = 1.0


def softmax(z):
    z = z / TEMP
    e = np.exp(z - z.max())
    return e / e.sum()


def chi2_sf(x, k):
    # the regularised upper incomplete gamma Q(k/2, x/2)
    a, z = k / 2.0, x / 2.0
    if z < a + 1:
        term = s = 1.0 / a
        n = a
        for _ in range(1000):
            n += 1
            term *= z / n
            s += term
        return max(0.0, 1.0 - s * math.exp(-z + a * math.log(z) - math.lgamma(a)))
    b, c, d = z + 1 - a, 1e300, 1.0 / (z + 1 - a)
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = b + an / c
        c = c if abs(c) > 1e-300 else 1e-300
        h *= d * c
    return h * math.exp(-z + a * math.log(z) - math.lgamma(a))


def main():
    global TEMP
    TEMP = float(sys.argv[4])
    col = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    hp, w = load(sys.argv[1])
    draws = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
    prompt = json.loads(sys.argv[3])
    V = w['token_embd.weight'].shape[0]
    p1 = softmax(logits(hp, w, prompt))
    p2 = np.zeros(V)
    for t1 in range(V):
        if p1[t1] > 1e-9:
            p2 += p1[t1] * softmax(logits(hp, w, prompt + [t1]))
    n = len(draws)
    obs = np.bincount([d[col] for d in draws], minlength=V).astype(float)
    exp = p2 * n
    big = exp >= 5
    o = np.append(obs[big], obs[~big].sum())
    e = np.append(exp[big], exp[~big].sum())
    if e[-1] < 5:      # too little mass outside the big bins to be a bin of its own
        o, e = o[:-1], e[:-1]
        o[-1] += obs[~big].sum()
        e[-1] += exp[~big].sum()
    x2 = float(((o - e) ** 2 / e).sum())
    df = len(e) - 1
    pv = chi2_sf(x2, df)
    print('draws %d, bins %d, chi-square %.2f, df %d, p-value %.4f' % (n, len(e), x2, df, pv))
    sys.exit(0 if pv > 0.001 else 1)


main()
