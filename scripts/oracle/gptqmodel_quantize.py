# gptqmodel_quantize.py - GPTQModel's own GPTQ of an HF model on CPU
# (../shared/reference/oracles.md §2), for scripts/mkgolden-quant-hf.
#
#   python gptqmodel_quantize.py SRC_HF_DIR CALIB.txt OUT_DIR [n_chunks chunk_tokens]
#
# 4-bit, group 128, sym, no desc_act (GPTQConfig(bits=4, group_size=128,
# sym=True, desc_act=False)); calibration: the text tokenized whole with the
# model's tokenizer.json, cut into n_chunks consecutive chunks of
# chunk_tokens tokens (default 64 x 512).  Writes GPTQModel's checkpoint
# ("gptq" v1, its default) to OUT_DIR.
import os
import sys
import time

os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tokenizers import Tokenizer  # noqa: E402
from gptqmodel import GPTQModel, QuantizeConfig  # noqa: E402

src, calib, out = sys.argv[1:4]
n_chunks = int(sys.argv[4]) if len(sys.argv) > 4 else 64
chunk = int(sys.argv[5]) if len(sys.argv) > 5 else 512
tok = Tokenizer.from_file(os.path.join(src, "tokenizer.json"))
with open(calib, encoding="utf-8") as f:
    ids = tok.encode(f.read(), add_special_tokens=False).ids
if len(ids) < n_chunks * chunk:
    sys.exit("calibration text too short: %d tokens, %d needed" % (len(ids), n_chunks * chunk))
data = [{"input_ids": ids[i * chunk:(i + 1) * chunk], "attention_mask": [1] * chunk}
        for i in range(n_chunks)]
cfg = QuantizeConfig(bits=4, group_size=128, sym=True, desc_act=False)
t0 = time.time()
model = GPTQModel.load(src, cfg, device="cpu")
model.quantize(data)
model.save(out)
print("gptqmodel: quantized %s in %.1f s (%d x %d calibration tokens) -> %s"
      % (src, time.time() - t0, n_chunks, chunk, out), file=sys.stderr)
