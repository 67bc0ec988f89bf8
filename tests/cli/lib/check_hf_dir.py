#!/usr/bin/env python3
"""check_hf_dir.py GGUF HFDIR - reads an HF directory written by `convert` with
the safetensors and tokenizers packages (independent readers) and checks it
against the GGUF it came from (read with gguf-py): every tensor present with
the HF name, shape and values; for llama, q_proj/k_proj rows un-permuted as
convert_hf_to_gguf.py's LlamaModel.permute inverse prescribes (qwen2 and
qwen3 are not permuted); config.json hyperparameters; tokenizer.json loads
and has the GGUF's vocabulary size."""
import json
import os
import sys

import numpy as np
import safetensors.numpy as sn
import tokenizers
from gguf import GGUFReader
from gguf.quants import dequantize

HF = {'token_embd.weight': 'model.embed_tokens.weight', 'output_norm.weight': 'model.norm.weight',
      'output.weight': 'lm_head.weight'}
BLK = {'attn_norm': 'input_layernorm', 'attn_q': 'self_attn.q_proj', 'attn_k': 'self_attn.k_proj',
       'attn_v': 'self_attn.v_proj', 'attn_output': 'self_attn.o_proj', 'ffn_norm': 'post_attention_layernorm',
       'ffn_gate': 'mlp.gate_proj', 'ffn_up': 'mlp.up_proj', 'ffn_down': 'mlp.down_proj',
       'attn_q_norm': 'self_attn.q_norm', 'attn_k_norm': 'self_attn.k_norm'}
CLASS = {'llama': 'LlamaForCausalLM', 'qwen2': 'Qwen2ForCausalLM', 'qwen3': 'Qwen3ForCausalLM'}


def hf_name(n):
    if n in HF:
        return HF[n]
    _, layer, part, suffix = n.split('.')
    return 'model.layers.%s.%s.%s' % (layer, BLK[part], suffix)


def unpermute(w, n_head):
    # GGUF rows are HF rows permuted by reshape(n_head, 2, D/2, ...).swapaxes(1, 2);
    # undo it: GGUF -> (n_head, D/2, 2, ...) -> swap -> (n_head, 2, D/2, ...).
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    r = GGUFReader(sys.argv[1])
    d = sys.argv[2]
    cfg = json.load(open(os.path.join(d, 'config.json')))
    f = {x.name: x for x in r.fields.values()}
    val = lambda k: f[k].contents()
    a = val('general.architecture')
    assert cfg['architectures'] == [CLASS[a]], cfg['architectures']
    n_head, n_kv = val(a + '.attention.head_count'), val(a + '.attention.head_count_kv')
    assert cfg['num_attention_heads'] == n_head and cfg['num_key_value_heads'] == n_kv
    assert cfg['hidden_size'] == val(a + '.embedding_length')
    assert cfg['num_hidden_layers'] == val(a + '.block_count')
    assert cfg['intermediate_size'] == val(a + '.feed_forward_length')
    if a + '.attention.key_length' in f:
        assert cfg['head_dim'] == val(a + '.attention.key_length')
    if a == 'qwen2':
        assert any(t.name == 'blk.0.attn_q.bias' for t in r.tensors)
    tensors = {}
    idx = os.path.join(d, 'model.safetensors.index.json')
    files = sorted(set(json.load(open(idx))['weight_map'].values())) if os.path.exists(idx) else ['model.safetensors']
    for fn in files:
        tensors.update(sn.load_file(os.path.join(d, fn)))
    n = 0
    for t in r.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)]) \
            if t.tensor_type.name not in ('F32', 'F16', 'BF16') else None
        if w is None:
            w = np.asarray(t.data).astype(np.float32) if t.tensor_type.name != 'BF16' else \
                (np.asarray(t.data).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            w = w.reshape([int(x) for x in reversed(t.shape)])
        if a != 'llama':
            pass
        elif '.attn_q.' in t.name:
            w = unpermute(w, n_head)
        elif '.attn_k.' in t.name:
            w = unpermute(w, n_kv)
        h = tensors[hf_name(t.name)]
        h = (h.view(np.uint16).astype(np.uint32) << 16).view(np.float32) if h.dtype == np.uint16 else h
        assert list(h.shape) == list(w.shape), (t.name, h.shape, w.shape)
        if not np.array_equal(h.astype(np.float32), w):
            sys.exit('%s: values differ (max |diff| %g)' % (t.name, np.abs(h.astype(np.float32) - w).max()))
        n += 1
    assert len(tensors) == n, (len(tensors), n)
    tok = tokenizers.Tokenizer.from_file(os.path.join(d, 'tokenizer.json'))
    assert tok.get_vocab_size() == len(f['tokenizer.ggml.tokens'].data), tok.get_vocab_size()
    print('%s: %d tensors match %s, tokenizer.json loads (%d tokens), %d file(s)' %
          (d, n, sys.argv[1], tok.get_vocab_size(), len(files)))


if __name__ == '__main__':
    main()
