# gguf_to_hf.py - an f32 GGUF as a Hugging Face checkpoint directory, by
# transformers' own GGUF loader (independent of llmkit's convert), for the
# oracles that need an HF model: GPTQModel (scripts/quality-table).
#
#   python gguf_to_hf.py MODEL.gguf OUT_DIR
#
# transformers maps the GGUF names and hyperparameters back to its own and
# undoes llama.cpp's changes: the q/k row permutation of llama, and gemma's
# norms, which llama.cpp stores as 1 + w (HF keeps w: the GGUF value - 1).
# The weights are saved as float32 safetensors with the tokenizer.
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

if len(sys.argv) != 3:
    sys.exit("usage: gguf_to_hf.py MODEL.gguf OUT_DIR")
src, out = sys.argv[1:3]
d, f = os.path.split(os.path.abspath(src))
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
model.save_pretrained(out)
tok.save_pretrained(out)
print("gguf_to_hf: %s -> %s (%s)" % (src, out, model.config.model_type), file=sys.stderr)
