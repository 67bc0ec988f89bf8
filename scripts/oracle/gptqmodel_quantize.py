# gptqmodel_quantize.py - GPTQModel's own GPTQ of an HF model on CPU
# (../shared/reference/oracles.md §2), for scripts/mkgolden-quant-hf and
# scripts/quality-table.
#
#   python gptqmodel_quantize.py [--ids FILE] [--bos ID] [--bits N]
#       [--act-order | --gar] [--damp F] [--f32] SRC_HF_DIR CALIB.txt OUT_DIR
#       [n_chunks chunk_tokens]
#
# Group 128, sym (GPTQConfig(bits=4, group_size=128, sym=True,
# desc_act=False, act_group_aware=False: plain GPTQ in column order) unless
# --bits/--act-order say otherwise; --gar turns on GPTQModel's group-aware
# reordering (act_group_aware, its default for GPTQ since 7.x: columns
# ordered by the Hessian diagonal inside each group and groups ordered too,
# no g_idx).  Damping --damp
# (default 0.01, as quantize --damp).  Calibration: n_chunks consecutive
# chunks of chunk_tokens tokens (default 64 x 512) of the text tokenized
# whole with the model's tokenizer.json; or, with --ids, of the token ids in
# FILE (numbers separated by white space, as `generate --tokenize` prints
# them), so that GPTQModel sees exactly the tokens quantize --calib does;
# --bos ID replaces the first token of each chunk by ID, as quantize does
# when the vocabulary adds a BOS.  --f32 runs the calibration forward passes
# in float32 (GPTQModel's CPU default is bfloat16).  Writes GPTQModel's
# checkpoint ("gptq" v1, its default) to OUT_DIR.
import argparse
import os
import sys
import time

os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from gptqmodel import GPTQModel, QuantizeConfig  # noqa: E402

ap = argparse.ArgumentParser(prog="gptqmodel_quantize.py")
ap.add_argument("--ids")
ap.add_argument("--bos", type=int)
ap.add_argument("--bits", type=int, default=4)
ap.add_argument("--act-order", action="store_true")
ap.add_argument("--gar", action="store_true")
ap.add_argument("--damp", type=float, default=0.01)
ap.add_argument("--f32", action="store_true")
ap.add_argument("src")
ap.add_argument("calib")
ap.add_argument("out")
ap.add_argument("n_chunks", type=int, nargs="?", default=64)
ap.add_argument("chunk", type=int, nargs="?", default=512)
a = ap.parse_args()
if a.act_order and a.gar:
    ap.error("--act-order and --gar exclude each other")

if a.ids:
    with open(a.ids, encoding="ascii") as f:
        ids = [int(t) for t in f.read().replace(",", " ").split()]
else:
    tok = Tokenizer.from_file(os.path.join(a.src, "tokenizer.json"))
    with open(a.calib, encoding="utf-8") as f:
        ids = tok.encode(f.read(), add_special_tokens=False).ids
n, chunk = a.n_chunks, a.chunk
if len(ids) < n * chunk:
    sys.exit("calibration too short: %d tokens, %d needed" % (len(ids), n * chunk))
data = []
for i in range(n):
    c = ids[i * chunk:(i + 1) * chunk]
    if a.bos is not None:
        c[0] = a.bos
    data.append({"input_ids": c, "attention_mask": [1] * chunk})
cfg = QuantizeConfig(bits=a.bits, group_size=128, sym=True, desc_act=a.act_order,
                     act_group_aware=a.gar, damp_percent=a.damp)
kw = {"dtype": torch.float32} if a.f32 else {}
t0 = time.time()
model = GPTQModel.load(a.src, cfg, device="cpu", **kw)
model.quantize(data)
model.save(a.out)
print("gptqmodel: quantized %s in %.1f s (%d x %d calibration tokens%s) -> %s"
      % (a.src, time.time() - t0, n, chunk, ", ids of " + a.ids if a.ids else "", a.out),
      file=sys.stderr)
