/*
 * eagle_hf.h - EAGLE heads in the published Hugging Face layouts
 * (algorithms.md §6.11): a directory with config.json and model.safetensors,
 * as the EAGLE authors' code (eagle/model/cnets.py Model), vLLM and vLLM's
 * speculators library load them.
 *
 * EAGLE-1, config.json: LlamaForCausalLM with num_hidden_layers 1, the
 * target's hidden_size, heads, kv heads, intermediate_size, vocab_size,
 * rms_norm_eps, rope_theta (rope_scaling linear when the head's RoPE is
 * scaled), head_dim when it is not hidden_size / heads, "bias" (true; false,
 * with no fc.bias tensor, when the head's FC bias is zero, as bias-free heads
 * are published), torch_dtype float32, max_position_embeddings 2048
 * (LlamaConfig's default: a head stores no context length).
 *
 * EAGLE-1 tensors (F32 on writing; F32, F16 or BF16 read), PyTorch shapes
 * [rows, cols]:
 *   fc.weight [d, 2d]  fc.bias [d]  layers.0.self_attn.{q,k,v,o}_proj.weight
 *   layers.0.post_attention_layernorm.weight [d]
 *   layers.0.mlp.{gate,up,down}_proj.weight
 * (no layers.0.input_layernorm, no final norm, no LM head).  (vLLM's
 * EAGLE-1 model, llama_eagle.py, has no FC bias: it loads only bias-free
 * heads.)
 *
 * EAGLE-3, two layouts (enum below), the same weights:
 *  - the EAGLE authors' (EAGLE_HF_EAGLE, traineagle3/config.json): the llama
 *    config above with architectures [LlamaForCausalLMEagle3] (the class
 *    vLLM maps to its Eagle3LlamaForCausalLM), no "bias", draft_vocab_size,
 *    eagle_aux_hidden_state_layer_ids (the three feature layers: inputs of
 *    those target layers, as vLLM reads the key); target_hidden_size is
 *    read (it must equal hidden_size) and not written.  Tensors
 *      fc.weight [d, 3d]  midlayer.self_attn.{q,k,v}_proj.weight [., 2d]
 *      midlayer.self_attn.o_proj.weight  midlayer.mlp.{gate,up,down}_proj.weight
 *      midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight
 *      norm.weight  lm_head.weight [draft_vocab, d]
 *      d2t I64 [draft_vocab] (target id = i + d2t[i], ascending)
 *      t2d BOOL [vocab] (the draft vocabulary's set)
 *    d2t and t2d are absent when the draft vocabulary is the whole one.
 *  - speculators' (EAGLE_HF_SPECULATORS, speculators 0.9.0 Eagle3DraftModel):
 *    config.json {architectures [Eagle3Speculator], speculators_model_type
 *    "eagle3", speculators_version, draft_vocab_size,
 *    eagle_aux_hidden_state_layer_ids, norm_before_residual, norm_before_fc,
 *    fc_norm, norm_output (all false: the EAGLE authors' layer; a head with
 *    any set is refused), embed_requires_grad, target_hidden_size null,
 *    transformer_layer_config (the llama config above, without
 *    architectures), speculators_config {algorithm eagle3, one greedy
 *    proposal method of 3 tokens, verifier {name_or_path null (the base is a
 *    GGUF, or the name given on export), architectures [LlamaForCausalLM]}}};
 *    speculators' Eagle3DraftModel.from_pretrained needs the name (it reads
 *    the verifier's config and embedding), vLLM takes the target from its
 *    command line.  Tensors as above with
 *    layers.0.* for midlayer.*.
 * A config.json with speculators_model_type is speculators', else one with
 * draft_vocab_size the EAGLE authors' EAGLE-3, else EAGLE-1.
 *
 * In every layout q and k rows are in HF's rotate-half order: a head whose
 * RoPE is the interleaved (llama GGUF) kind has them permuted as convert
 * does for llama models.  A checkpoint's embed_tokens.weight (the target's,
 * frozen) is checked for its shape and skipped.
 *
 * __metadata__ carries what the GGUF head knows beyond the weights, so that
 * GGUF -> HF -> GGUF is bit-identical: "format": "pt", then
 * llmkit.eagle.base.tensor_sha256, llmkit.eagle.base.name,
 * llmkit.eagle.train.{steps,tokens,data_sha256} and, for an EAGLE-1 head
 * with one, llmkit.eagle.draft_vocab (the ids, comma-separated; EAGLE-3's
 * is d2t).  Published heads lack them: importing then takes the base's
 * identity from --base and records 0 steps; an EAGLE-3 config without
 * eagle_aux_hidden_state_layer_ids takes the base's layers 2, L/2, L-3.
 */
#ifndef LLMKIT_EAGLE_HF_H
#define LLMKIT_EAGLE_HF_H

#include <stdbool.h>
#include <stddef.h>

#include "eagle.h"
#include "eagle_io.h"
#include "hf.h"
#include "safetensors.h"
#include "status.h"

/* the EAGLE-3 layouts */
enum { EAGLE_HF_EAGLE = 0, EAGLE_HF_SPECULATORS = 1 };

/* eagle_hf_layout_parse() : EAGLE_HF_* of "eagle" or "speculators", or -1. */
int eagle_hf_layout_parse(const char *name);

/* eagle_hf_detect() : 1 when the HF directory dir holds an EAGLE head (its
 * model.safetensors or index names fc.weight), 0 when not.  -ST_FORMAT for a
 * directory with pytorch_model.bin and no safetensors (pickles are not
 * read), -ST_IO / -ST_FORMAT when the checkpoint cannot be read. */
int eagle_hf_detect(const char *dir, struct diag *d);

/* eagle_hf_layer_config() : 1 when dir/config.json is an EAGLE-3 head's
 * (either layout), c then its llama layer's configuration with hf_arch
 * "EAGLE-3 head (LAYOUT layout)"; 0 when not (c untouched); -ST_IO,
 * -ST_FORMAT, -ST_NOMEM.  For convert --info. */
int eagle_hf_layer_config(struct hf_config *c, const char *dir, struct diag *d);

/* eagle_hf_head_read() : the head (EAGLE-1 or EAGLE-3, either layout) in
 * config.json text cfg (len bytes) and the safetensors file f, for a base
 * model of configuration base (the head takes its RoPE style, epsilon and
 * RoPE base from there, and EAGLE-3's feature layers when config.json has
 * none; config.json must agree).
 * meta gets the llmkit.eagle.* metadata when present (else zeros, and the
 * caller fills the base's identity); meta->draft_ids is malloc'd.  h is
 * allocated like eagle_head_init (eagle_head_release).  0, -ST_FORMAT (the
 * message names the key or tensor), -ST_NOMEM. */
int eagle_hf_head_read(struct eagle_head *h, struct eagle_meta *meta, const char *cfg, size_t len,
                       const struct sft_file *f, const struct eagle_config *base,
                       struct diag *d);

/* eagle_hf_export() : the head GGUF at in (not "-") as an HF directory out
 * in layout (EAGLE_HF_*; EAGLE-1 heads: EAGLE_HF_EAGLE only; speculators':
 * verifier, when not NULL, is its verifier's name_or_path), written
 * atomically (replacing out only with force); its weights in type
 * (GGML_TYPE_F16 or BF16; anything else, e.g. -1: F32).  0, -ST_IO,
 * -ST_FORMAT (not an EAGLE head), -ST_RANGE (out exists; an EAGLE-1 head
 * in the speculators layout), -ST_NOMEM. */
int eagle_hf_export(const char *in, const char *out, int type, int layout,
                    const char *verifier, bool force, struct diag *d);

/* eagle_hf_import() : the HF head directory dir as a head GGUF at out ("-" =
 * stdout), bound to the base model GGUF base: the head's configuration must
 * fit it, and when the checkpoint records a base hash it must be base's.
 * 0, -ST_IO, -ST_FORMAT, -ST_RANGE, -ST_NOMEM; nothing is left at out on
 * failure. */
int eagle_hf_import(const char *dir, const char *base, const char *out, bool force,
                    struct diag *d);

#endif
