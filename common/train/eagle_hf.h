/*
 * eagle_hf.h - EAGLE-1 heads in the published Hugging Face layout
 * (algorithms.md §6.11): a directory with config.json and model.safetensors,
 * as the EAGLE authors' code (eagle/model/cnets.py Model) and vLLM load them.
 *
 * config.json: LlamaForCausalLM with num_hidden_layers 1, the target's
 * hidden_size, heads, kv heads, intermediate_size, vocab_size, rms_norm_eps,
 * rope_theta (rope_scaling linear when the head's RoPE is scaled), head_dim
 * when it is not hidden_size / heads, "bias" (true; false, with no fc.bias
 * tensor, when the head's FC bias is zero, as bias-free heads are published),
 * torch_dtype float32, max_position_embeddings 2048 (LlamaConfig's default:
 * a head stores no context length).
 *
 * Tensors (F32 on writing; F32, F16 or BF16 read), PyTorch shapes [rows, cols]:
 *   fc.weight [d, 2d]  fc.bias [d]  layers.0.self_attn.{q,k,v,o}_proj.weight
 *   layers.0.post_attention_layernorm.weight [d]
 *   layers.0.mlp.{gate,up,down}_proj.weight
 * (no layers.0.input_layernorm, no final norm, no LM head).  q and k rows are
 * in HF's rotate-half order: a head whose RoPE is the interleaved (llama
 * GGUF) kind has them permuted as convert does for llama models.  A
 * checkpoint's embed_tokens.weight (the target's, frozen) is checked for
 * its shape and skipped; "bias": false means a zero FC bias.  (vLLM's
 * EAGLE-1 model, llama_eagle.py, has no FC bias: it loads only bias-free
 * heads.)
 *
 * __metadata__ carries what the GGUF head knows beyond the weights, so that
 * GGUF -> HF -> GGUF is bit-identical: "format": "pt", then
 * llmkit.eagle.base.tensor_sha256, llmkit.eagle.base.name,
 * llmkit.eagle.train.{steps,tokens,data_sha256} and, when present,
 * llmkit.eagle.draft_vocab (the ids, comma-separated).  Published heads lack
 * them: importing then takes the base's identity from --base and records 0
 * steps.
 *
 * EAGLE-3 heads (draft_vocab_size, midlayer.*, d2t, t2d) are refused both
 * ways.
 */
#ifndef LLMKIT_EAGLE_HF_H
#define LLMKIT_EAGLE_HF_H

#include <stdbool.h>
#include <stddef.h>

#include "eagle.h"
#include "eagle_io.h"
#include "safetensors.h"
#include "status.h"

/* eagle_hf_name() : the HF name of the head's tensor i (enum eagle_tensor),
 * or NULL. */
const char *eagle_hf_name(int i);

/* eagle_hf_detect() : 1 when the HF directory dir holds an EAGLE head (its
 * model.safetensors or index names fc.weight), 0 when not.  -ST_FORMAT for a
 * directory with pytorch_model.bin and no safetensors (pickles are not
 * read), -ST_IO / -ST_FORMAT when the checkpoint cannot be read. */
int eagle_hf_detect(const char *dir, struct diag *d);

/* eagle_hf_head_read() : the head in config.json text cfg (len bytes) and the
 * safetensors file f, for a base model of configuration base (the head takes
 * its RoPE style, epsilon and RoPE base from there; config.json must agree).
 * meta gets the llmkit.eagle.* metadata when present (else zeros, and the
 * caller fills the base's identity); meta->draft_ids is malloc'd.  h is
 * allocated like eagle_head_init (eagle_head_release).  0, -ST_FORMAT (the
 * message names the key or tensor), -ST_NOMEM. */
int eagle_hf_head_read(struct eagle_head *h, struct eagle_meta *meta, const char *cfg, size_t len,
                       const struct sft_file *f, const struct eagle_config *base,
                       struct diag *d);

/* eagle_hf_export() : the head GGUF at in (not "-") as an HF directory out,
 * written atomically (replacing out only with force); its tensors in type
 * (GGML_TYPE_F16 or BF16; anything else, e.g. -1: F32).  0, -ST_IO,
 * -ST_FORMAT (not an EAGLE-1 head), -ST_RANGE (out exists), -ST_NOMEM. */
int eagle_hf_export(const char *in, const char *out, int type, bool force, struct diag *d);

/* eagle_hf_import() : the HF head directory dir as a head GGUF at out ("-" =
 * stdout), bound to the base model GGUF base: the head's configuration must
 * fit it, and when the checkpoint records a base hash it must be base's.
 * 0, -ST_IO, -ST_FORMAT, -ST_RANGE, -ST_NOMEM; nothing is left at out on
 * failure. */
int eagle_hf_import(const char *dir, const char *base, const char *out, bool force,
                    struct diag *d);

#endif
