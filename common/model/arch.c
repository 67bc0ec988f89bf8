/*
 * arch.c - the architecture table and the hyperparameter readers (arch.h).
 *
 * GGUF key names and types are llama.cpp's (llama-arch.cpp LLM_KV_*,
 * llama-model-loader.cpp get_key/get_key_or_arr); config.json spellings are
 * those of transformers' config classes and of llama.cpp's converter
 * (convert_hf_to_gguf.py find_hparam).
 */
#include "arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define JSON_INT_MAX ((int64_t)1 << 53)

/* ---- hyperparameter keys ---- */

/* config.json spellings: B() read always, K() only for KV accounting of any
 * model (spellings of other families: falcon, chatglm, t5 ...), C() only
 * when converting (the rest of llama.cpp's converter's search lists, in its
 * order; max_length is a generation setting in most configs). */
#define HF(...) ((const struct arch_hf_name[]){ __VA_ARGS__, { NULL, 0 } })
#define B(s) { s, 0 }
#define K(s) { s, ARCH_HF_KV }
#define C(s) { s, ARCH_HF_CONVERT }
#define OFF(f) offsetof(struct arch_hparams, f)
#define DIM ((double)ARCH_MAX_DIM)
#define U32MAX 4294967295.0

const struct arch_key arch_keys[ARCH_HP_COUNT] = {
    [ARCH_HP_BLOCK_COUNT] = { "block_count", ARCH_KT_U32, ARCH_K_KV, 1, ARCH_MAX_LAYERS,
        HF(B("num_hidden_layers"), K("n_layer"), B("n_layers"), C("n_layer"), B("num_layers")),
        OFF(n_layer) },
    [ARCH_HP_CONTEXT_LENGTH] = { "context_length", ARCH_KT_U32, ARCH_K_KV, 1, U32MAX,
        HF(B("max_position_embeddings"), C("n_ctx"), B("n_positions"), K("seq_length"),
           C("max_length"), B("max_sequence_length"), C("model_max_length")),
        OFF(n_ctx_train) },
    [ARCH_HP_EMBEDDING_LENGTH] = { "embedding_length", ARCH_KT_U32, ARCH_K_KV, 1, DIM,
        HF(B("hidden_size"), B("n_embd"), K("d_model"), C("dim")), OFF(n_embd) },
    [ARCH_HP_FEED_FORWARD_LENGTH] = { "feed_forward_length", ARCH_KT_U32, ARCH_K_PER_LAYER, 1, DIM,
        HF(B("intermediate_size"), C("n_inner"), C("hidden_dim")), OFF(n_ff) },
    [ARCH_HP_HEAD_COUNT] = { "attention.head_count", ARCH_KT_U32, ARCH_K_PER_LAYER | ARCH_K_KV,
        1, DIM, HF(B("num_attention_heads"), B("n_head"), B("n_heads"), K("num_heads")),
        OFF(n_head) },
    [ARCH_HP_HEAD_COUNT_KV] = { "attention.head_count_kv", ARCH_KT_U32,
        ARCH_K_PER_LAYER | ARCH_K_KV, 1, DIM,
        HF(B("num_key_value_heads"), K("num_kv_heads"), K("n_head_kv"),
           K("multi_query_group_num")), OFF(n_head_kv) },
    [ARCH_HP_KEY_LENGTH] = { "attention.key_length", ARCH_KT_U32, ARCH_K_KV, 1, DIM,
        HF(B("head_dim")), OFF(head_dim) },
    [ARCH_HP_VALUE_LENGTH] = { "attention.value_length", ARCH_KT_U32, ARCH_K_KV, 1, DIM,
        NULL, OFF(head_dim_v) },
    [ARCH_HP_RMS_EPS] = { "attention.layer_norm_rms_epsilon", ARCH_KT_F32, 0, 0, 1,
        HF(B("rms_norm_eps")), OFF(rms_eps) },
    [ARCH_HP_ROPE_DIM] = { "rope.dimension_count", ARCH_KT_U32, ARCH_K_KV, 1, DIM,
        HF(B("qk_rope_head_dim")), OFF(n_rot) },
    [ARCH_HP_ROPE_FREQ_BASE] = { "rope.freq_base", ARCH_KT_F32, 0, 1e-3, 1e12,
        HF(B("rope_theta")), OFF(rope_freq_base) },
    /* gemma3's final logit softcap (llama.cpp's src/models/gemma3.cpp
     * applies it when non-zero); config.json's is read by hf_config.c */
    [ARCH_HP_FINAL_SOFTCAP] = { "final_logit_softcapping", ARCH_KT_F32, 0, 0, 1e9, NULL,
        OFF(final_softcap) },
    [ARCH_HP_ROPE_FREQ_BASE_SWA] = { "rope.freq_base_swa", ARCH_KT_F32, 0, 1e-3, 1e12,
        HF(B("rope_local_base_freq")), OFF(rope_freq_base_swa) },
    /* rope_scaling is an object in config.json: hf_config.c reads it */
    [ARCH_HP_ROPE_SCALING_TYPE] = { "rope.scaling.type", ARCH_KT_STR, 0, 0, 0,
        NULL, OFF(rope_scaling) },
    [ARCH_HP_ROPE_SCALING_FACTOR] = { "rope.scaling.factor", ARCH_KT_F32, 0, 0, 1e9,
        NULL, OFF(rope_factor) },
    [ARCH_HP_ROPE_SCALE_LINEAR] = { "rope.scale_linear", ARCH_KT_F32, 0, 0, 1e9,
        NULL, OFF(rope_scale_linear) },
    [ARCH_HP_ROPE_ORIG_CTX] = { "rope.scaling.original_context_length", ARCH_KT_U32, 0, 1, U32MAX,
        NULL, OFF(rope_orig_ctx) },
    [ARCH_HP_YARN_EXT_FACTOR] = { "rope.scaling.yarn_ext_factor", ARCH_KT_F32, 0, -1e6, 1e6,
        NULL, OFF(yarn_ext_factor) },
    [ARCH_HP_YARN_ATTN_FACTOR] = { "rope.scaling.yarn_attn_factor", ARCH_KT_F32, 0, -1e6, 1e6,
        NULL, OFF(yarn_attn_factor) },
    [ARCH_HP_YARN_BETA_FAST] = { "rope.scaling.yarn_beta_fast", ARCH_KT_F32, 0, -1e6, 1e6,
        NULL, OFF(yarn_beta_fast) },
    [ARCH_HP_YARN_BETA_SLOW] = { "rope.scaling.yarn_beta_slow", ARCH_KT_F32, 0, -1e6, 1e6,
        NULL, OFF(yarn_beta_slow) },
    [ARCH_HP_VOCAB_SIZE] = { "vocab_size", ARCH_KT_U32, 0, 1, ARCH_MAX_VOCAB,
        HF(B("vocab_size")), OFF(n_vocab) },
    [ARCH_HP_EXPERT_COUNT] = { "expert_count", ARCH_KT_U32, 0, 0, U32MAX,
        HF(B("num_local_experts"), B("n_routed_experts")), OFF(n_expert) },
    [ARCH_HP_KV_LORA_RANK] = { "attention.kv_lora_rank", ARCH_KT_U32, ARCH_K_KV, 0, DIM,
        HF(B("kv_lora_rank")), OFF(kv_lora_rank) },
    [ARCH_HP_Q_LORA_RANK] = { "attention.q_lora_rank", ARCH_KT_U32, 0, 0, DIM,
        HF(B("q_lora_rank")), OFF(q_lora_rank) },
    [ARCH_HP_KEY_LENGTH_MLA] = { "attention.key_length_mla", ARCH_KT_U32, 0, 1, DIM,
        NULL, OFF(head_dim_mla) },
    [ARCH_HP_VALUE_LENGTH_MLA] = { "attention.value_length_mla", ARCH_KT_U32, ARCH_K_KV, 1, DIM,
        HF(B("v_head_dim")), OFF(head_dim_v_mla) },
    [ARCH_HP_QK_NOPE_DIM] = { NULL, ARCH_KT_U32, ARCH_K_KV, 0, DIM,
        HF(B("qk_nope_head_dim")), OFF(qk_nope_dim) },
    [ARCH_HP_SLIDING_WINDOW] = { "attention.sliding_window", ARCH_KT_U32, ARCH_K_KV, 0, U32MAX,
        HF(B("sliding_window")), OFF(sliding_window) },
    [ARCH_HP_SWA_PATTERN] = { "attention.sliding_window_pattern", ARCH_KT_PATTERN, ARCH_K_KV, 0, 0,
        HF(B("sliding_window_pattern")), OFF(swa_period) },
    [ARCH_HP_LEADING_DENSE] = { "leading_dense_block_count", ARCH_KT_U32, 0, 0, U32MAX,
        HF(B("first_k_dense_replace")), OFF(n_layer_dense_lead) },
    [ARCH_HP_EXPERT_SHARED] = { "expert_shared_count", ARCH_KT_U32, 0, 0, U32MAX,
        HF(B("n_shared_experts")), OFF(n_expert_shared) },
    [ARCH_HP_EXPERT_FF] = { "expert_feed_forward_length", ARCH_KT_U32, 0, 0, DIM,
        HF(B("moe_intermediate_size")), OFF(n_ff_exp) },
    [ARCH_HP_YARN_LOG_MUL] = { "rope.scaling.yarn_log_multiplier", ARCH_KT_F32, 0, -1e6, 1e6,
        NULL, OFF(yarn_log_mul) },
};

_Static_assert(ARCH_HP_COUNT <= 64, "arch_hparams.has is a 64-bit mask");

/* ---- tensors ---- */

#define T_L ARCH_T_LAYER
#define T_M ARCH_T_MATRIX
#define T_R ARCH_T_REQUIRED

/* llama.cpp's LLM_ARCH_LLAMA tensors and the HF LlamaForCausalLM names
 * (convert_hf_to_gguf.py, tensor_mapping.py).  Layer tensors in the order
 * model.c checks them. */
static const struct arch_tensor llama_tensors[] = {
    { ARCH_W_TOKEN_EMBD, "token_embd.weight", "model.embed_tokens.weight",
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M | T_R },
    { ARCH_W_OUTPUT_NORM, "output_norm.weight", "model.norm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_R },
    { ARCH_W_OUTPUT, "output.weight", "lm_head.weight",
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M },          /* absent: tied to token_embd */
    { ARCH_W_ROPE_FREQS, "rope_freqs.weight", NULL,   /* llama3 factors; HF: rope_scaling */
      ARCH_DIM_1, ARCH_DIM_ROT_HALF, 0 },
    { ARCH_W_ATTN_NORM, "attn_norm.weight", "input_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { ARCH_W_ATTN_Q, "attn_q.weight", "self_attn.q_proj.weight",
      ARCH_DIM_Q, ARCH_DIM_EMBD, T_L | T_M | T_R | ARCH_T_PERM_Q },
    { ARCH_W_ATTN_K, "attn_k.weight", "self_attn.k_proj.weight",
      ARCH_DIM_K, ARCH_DIM_EMBD, T_L | T_M | T_R | ARCH_T_PERM_K },
    { ARCH_W_ATTN_V, "attn_v.weight", "self_attn.v_proj.weight",
      ARCH_DIM_V, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_ATTN_OUT, "attn_output.weight", "self_attn.o_proj.weight",
      ARCH_DIM_EMBD, ARCH_DIM_O, T_L | T_M | T_R },
    { ARCH_W_ATTN_Q_BIAS, "attn_q.bias", "self_attn.q_proj.bias",
      ARCH_DIM_1, ARCH_DIM_Q, T_L | ARCH_T_PERM_Q },
    { ARCH_W_ATTN_K_BIAS, "attn_k.bias", "self_attn.k_proj.bias",
      ARCH_DIM_1, ARCH_DIM_K, T_L | ARCH_T_PERM_K },
    { ARCH_W_ATTN_V_BIAS, "attn_v.bias", "self_attn.v_proj.bias",
      ARCH_DIM_1, ARCH_DIM_V, T_L },
    { ARCH_W_ATTN_OUT_BIAS, "attn_output.bias", "self_attn.o_proj.bias",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L },
    { ARCH_W_FFN_NORM, "ffn_norm.weight", "post_attention_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { ARCH_W_FFN_GATE, "ffn_gate.weight", "mlp.gate_proj.weight",
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_FFN_UP, "ffn_up.weight", "mlp.up_proj.weight",
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_FFN_DOWN, "ffn_down.weight", "mlp.down_proj.weight",
      ARCH_DIM_EMBD, ARCH_DIM_FF, T_L | T_M | T_R },
    /* mlp_bias = true checkpoints: converted, not run (the llama recipe has no FFN biases) */
    { ARCH_W_FFN_GATE_BIAS, "ffn_gate.bias", "mlp.gate_proj.bias",
      ARCH_DIM_1, ARCH_DIM_FF, T_L },
    { ARCH_W_FFN_UP_BIAS, "ffn_up.bias", "mlp.up_proj.bias",
      ARCH_DIM_1, ARCH_DIM_FF, T_L },
    { ARCH_W_FFN_DOWN_BIAS, "ffn_down.bias", "mlp.down_proj.bias",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L },
    { 0, NULL, NULL, 0, 0, 0 },
};

/* llama.cpp's LLM_ARCH_QWEN2 and LLM_ARCH_QWEN3 tensors (src/models/qwen2.cpp,
 * qwen3.cpp: create_tensor_qkv with optional q/k/v biases, no output or FFN
 * biases; llama.cpp refuses a file with tensors its loader does not take)
 * and the HF Qwen2ForCausalLM / Qwen3ForCausalLM names.  Q and K are not
 * permuted: both use NeoX RoPE, which rotates the halves HF's rotate_half
 * does.  qwen3 adds the per-head RMSNorm of Q and K. */
#define QWEN_TENSORS_TOP \
    { ARCH_W_TOKEN_EMBD, "token_embd.weight", "model.embed_tokens.weight", \
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M | T_R }, \
    { ARCH_W_OUTPUT_NORM, "output_norm.weight", "model.norm.weight", \
      ARCH_DIM_1, ARCH_DIM_EMBD, T_R }, \
    { ARCH_W_OUTPUT, "output.weight", "lm_head.weight", \
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M }, \
    { ARCH_W_ATTN_NORM, "attn_norm.weight", "input_layernorm.weight", \
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R }, \
    { ARCH_W_ATTN_Q, "attn_q.weight", "self_attn.q_proj.weight", \
      ARCH_DIM_Q, ARCH_DIM_EMBD, T_L | T_M | T_R }, \
    { ARCH_W_ATTN_K, "attn_k.weight", "self_attn.k_proj.weight", \
      ARCH_DIM_K, ARCH_DIM_EMBD, T_L | T_M | T_R }, \
    { ARCH_W_ATTN_V, "attn_v.weight", "self_attn.v_proj.weight", \
      ARCH_DIM_V, ARCH_DIM_EMBD, T_L | T_M | T_R }, \
    { ARCH_W_ATTN_OUT, "attn_output.weight", "self_attn.o_proj.weight", \
      ARCH_DIM_EMBD, ARCH_DIM_O, T_L | T_M | T_R }, \
    { ARCH_W_ATTN_Q_BIAS, "attn_q.bias", "self_attn.q_proj.bias", \
      ARCH_DIM_1, ARCH_DIM_Q, T_L }, \
    { ARCH_W_ATTN_K_BIAS, "attn_k.bias", "self_attn.k_proj.bias", \
      ARCH_DIM_1, ARCH_DIM_K, T_L }, \
    { ARCH_W_ATTN_V_BIAS, "attn_v.bias", "self_attn.v_proj.bias", \
      ARCH_DIM_1, ARCH_DIM_V, T_L }
#define QWEN_TENSORS_FFN \
    { ARCH_W_FFN_NORM, "ffn_norm.weight", "post_attention_layernorm.weight", \
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R }, \
    { ARCH_W_FFN_GATE, "ffn_gate.weight", "mlp.gate_proj.weight", \
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R }, \
    { ARCH_W_FFN_UP, "ffn_up.weight", "mlp.up_proj.weight", \
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R }, \
    { ARCH_W_FFN_DOWN, "ffn_down.weight", "mlp.down_proj.weight", \
      ARCH_DIM_EMBD, ARCH_DIM_FF, T_L | T_M | T_R }, \
    { 0, NULL, NULL, 0, 0, 0 }

static const struct arch_tensor qwen2_tensors[] = {
    QWEN_TENSORS_TOP,
    QWEN_TENSORS_FFN,
};

static const struct arch_tensor qwen3_tensors[] = {
    QWEN_TENSORS_TOP,
    { ARCH_W_ATTN_Q_NORM, "attn_q_norm.weight", "self_attn.q_norm.weight",
      ARCH_DIM_1, ARCH_DIM_HEAD, T_L | T_R },
    { ARCH_W_ATTN_K_NORM, "attn_k_norm.weight", "self_attn.k_norm.weight",
      ARCH_DIM_1, ARCH_DIM_HEAD, T_L | T_R },
    QWEN_TENSORS_FFN,
};

/* llama.cpp's LLM_ARCH_GEMMA3 tensors (llama-arch.cpp; src/models/gemma3.cpp
 * loads them) and the HF Gemma3ForCausalLM names they are converted from.
 * llama.cpp's converter stores the RMSNorm weights as 1 + w (Gemma
 * multiplies by 1 + w), so they are plain multipliers here; hf_config.c
 * shifts them on the way. */
static const struct arch_tensor gemma3_tensors[] = {
    { ARCH_W_TOKEN_EMBD, "token_embd.weight", "model.embed_tokens.weight",
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M | T_R },
    { ARCH_W_OUTPUT_NORM, "output_norm.weight", "model.norm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_R },
    { ARCH_W_OUTPUT, "output.weight", "lm_head.weight",
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M },          /* absent: tied to token_embd */
    { ARCH_W_ATTN_NORM, "attn_norm.weight", "input_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { ARCH_W_ATTN_Q, "attn_q.weight", "self_attn.q_proj.weight",
      ARCH_DIM_Q, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_ATTN_K, "attn_k.weight", "self_attn.k_proj.weight",
      ARCH_DIM_K, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_ATTN_V, "attn_v.weight", "self_attn.v_proj.weight",
      ARCH_DIM_V, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_ATTN_OUT, "attn_output.weight", "self_attn.o_proj.weight",
      ARCH_DIM_EMBD, ARCH_DIM_O, T_L | T_M | T_R },
    { ARCH_W_ATTN_Q_NORM, "attn_q_norm.weight", "self_attn.q_norm.weight",
      ARCH_DIM_1, ARCH_DIM_HEAD, T_L | T_R },
    { ARCH_W_ATTN_K_NORM, "attn_k_norm.weight", "self_attn.k_norm.weight",
      ARCH_DIM_1, ARCH_DIM_HEAD, T_L | T_R },
    { ARCH_W_ATTN_POST_NORM, "post_attention_norm.weight", "post_attention_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { ARCH_W_FFN_NORM, "ffn_norm.weight", "pre_feedforward_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { ARCH_W_FFN_GATE, "ffn_gate.weight", "mlp.gate_proj.weight",
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_FFN_UP, "ffn_up.weight", "mlp.up_proj.weight",
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_FFN_DOWN, "ffn_down.weight", "mlp.down_proj.weight",
      ARCH_DIM_EMBD, ARCH_DIM_FF, T_L | T_M | T_R },
    { ARCH_W_FFN_POST_NORM, "post_ffw_norm.weight", "post_feedforward_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { 0, NULL, NULL, 0, 0, 0 },
};

/* llama.cpp's LLM_ARCH_DEEPSEEK2 tensors (src/models/deepseek2.cpp) as its
 * current converter writes them (conversion/deepseek.py: kv_b_proj split
 * into k_b, transposed, and v_b, stacked per head), dense layers.  Either
 * attn_q (no query compression) or attn_q_a, attn_q_a_norm and attn_q_b
 * (q_lora_rank > 0): model.c requires the set the file's q_lora_rank says.
 * The HF names are DeepseekV2ForCausalLM's (for reference: not converted). */
static const struct arch_tensor deepseek2_tensors[] = {
    { ARCH_W_TOKEN_EMBD, "token_embd.weight", "model.embed_tokens.weight",
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M | T_R },
    { ARCH_W_OUTPUT_NORM, "output_norm.weight", "model.norm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_R },
    { ARCH_W_OUTPUT, "output.weight", "lm_head.weight",
      ARCH_DIM_VOCAB, ARCH_DIM_EMBD, T_M },          /* absent: tied to token_embd */
    { ARCH_W_ATTN_NORM, "attn_norm.weight", "input_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { ARCH_W_ATTN_Q, "attn_q.weight", "self_attn.q_proj.weight",
      ARCH_DIM_Q_MLA, ARCH_DIM_EMBD, T_L | T_M },
    { ARCH_W_ATTN_Q_A, "attn_q_a.weight", "self_attn.q_a_proj.weight",
      ARCH_DIM_Q_LORA, ARCH_DIM_EMBD, T_L | T_M },
    { ARCH_W_ATTN_Q_A_NORM, "attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_Q_LORA, T_L },
    { ARCH_W_ATTN_Q_B, "attn_q_b.weight", "self_attn.q_b_proj.weight",
      ARCH_DIM_Q_MLA, ARCH_DIM_Q_LORA, T_L | T_M },
    { ARCH_W_ATTN_KV_A_MQA, "attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight",
      ARCH_DIM_KV_A, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_ATTN_KV_A_NORM, "attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_KV_LORA, T_L | T_R },
    { ARCH_W_ATTN_K_B, "attn_k_b.weight", NULL,
      ARCH_DIM_K_B, ARCH_DIM_QK_NOPE, T_L | T_M | T_R | ARCH_T_HEADS },
    { ARCH_W_ATTN_V_B, "attn_v_b.weight", NULL,
      ARCH_DIM_V_B, ARCH_DIM_KV_LORA, T_L | T_M | T_R | ARCH_T_HEADS },
    { ARCH_W_ATTN_OUT, "attn_output.weight", "self_attn.o_proj.weight",
      ARCH_DIM_EMBD, ARCH_DIM_O_MLA, T_L | T_M | T_R },
    { ARCH_W_FFN_NORM, "ffn_norm.weight", "post_attention_layernorm.weight",
      ARCH_DIM_1, ARCH_DIM_EMBD, T_L | T_R },
    { ARCH_W_FFN_GATE, "ffn_gate.weight", "mlp.gate_proj.weight",
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_FFN_UP, "ffn_up.weight", "mlp.up_proj.weight",
      ARCH_DIM_FF, ARCH_DIM_EMBD, T_L | T_M | T_R },
    { ARCH_W_FFN_DOWN, "ffn_down.weight", "mlp.down_proj.weight",
      ARCH_DIM_EMBD, ARCH_DIM_FF, T_L | T_M | T_R },
    { 0, NULL, NULL, 0, 0, 0 },
};

/* ---- architectures ---- */

/* llama.cpp's loader refuses a model without these (llama-model.cpp
 * load_hparams; feed_forward_length and head_count default to 0 there,
 * which no dense model can have). */
#define REQ_GGUF (ARCH_BIT(ARCH_HP_BLOCK_COUNT) | ARCH_BIT(ARCH_HP_CONTEXT_LENGTH) | \
                  ARCH_BIT(ARCH_HP_EMBEDDING_LENGTH) | ARCH_BIT(ARCH_HP_FEED_FORWARD_LENGTH) | \
                  ARCH_BIT(ARCH_HP_HEAD_COUNT) | ARCH_BIT(ARCH_HP_RMS_EPS))
/* Every config.json of these classes has them; transformers' defaults are
 * those of a 7B model and no checkpoint relies on them. */
#define REQ_HF (ARCH_BIT(ARCH_HP_BLOCK_COUNT) | ARCH_BIT(ARCH_HP_EMBEDDING_LENGTH) | \
                ARCH_BIT(ARCH_HP_FEED_FORWARD_LENGTH) | ARCH_BIT(ARCH_HP_HEAD_COUNT))
/* The keys llama.cpp's loader reads for a llama-like architecture (others
 * are not read, whatever they hold). */
#define KEYS_LLAMA (REQ_GGUF | ARCH_BIT(ARCH_HP_HEAD_COUNT_KV) | ARCH_BIT(ARCH_HP_KEY_LENGTH) | \
                    ARCH_BIT(ARCH_HP_VALUE_LENGTH) | ARCH_BIT(ARCH_HP_ROPE_DIM) | \
                    ARCH_BIT(ARCH_HP_ROPE_FREQ_BASE) | ARCH_BIT(ARCH_HP_ROPE_SCALING_TYPE) | \
                    ARCH_BIT(ARCH_HP_ROPE_SCALING_FACTOR) | ARCH_BIT(ARCH_HP_ROPE_SCALE_LINEAR) | \
                    ARCH_BIT(ARCH_HP_ROPE_ORIG_CTX) | ARCH_BIT(ARCH_HP_YARN_EXT_FACTOR) | \
                    ARCH_BIT(ARCH_HP_YARN_ATTN_FACTOR) | ARCH_BIT(ARCH_HP_YARN_BETA_FAST) | \
                    ARCH_BIT(ARCH_HP_YARN_BETA_SLOW) | ARCH_BIT(ARCH_HP_VOCAB_SIZE) | \
                    ARCH_BIT(ARCH_HP_EXPERT_COUNT))
/* deepseek2 (llama-model.cpp load_hparams, src/models/deepseek2.cpp): MLA's
 * ranks and per-head sizes, the dense/MoE split; llama.cpp requires
 * q_lora_rank except in its "lite" layer counts (0 = no query compression
 * here), expert_feed_forward_length and expert_shared_count */
#define KEYS_DEEPSEEK2 (KEYS_LLAMA | ARCH_BIT(ARCH_HP_KV_LORA_RANK) | \
                        ARCH_BIT(ARCH_HP_Q_LORA_RANK) | ARCH_BIT(ARCH_HP_KEY_LENGTH_MLA) | \
                        ARCH_BIT(ARCH_HP_VALUE_LENGTH_MLA) | ARCH_BIT(ARCH_HP_LEADING_DENSE) | \
                        ARCH_BIT(ARCH_HP_EXPERT_SHARED) | ARCH_BIT(ARCH_HP_EXPERT_FF) | \
                        ARCH_BIT(ARCH_HP_YARN_LOG_MUL))
#define REQ_DEEPSEEK2 (REQ_GGUF | ARCH_BIT(ARCH_HP_KV_LORA_RANK) | ARCH_BIT(ARCH_HP_ROPE_DIM))
#define KEYS_SWA (ARCH_BIT(ARCH_HP_SLIDING_WINDOW) | ARCH_BIT(ARCH_HP_SWA_PATTERN) | \
                  ARCH_BIT(ARCH_HP_ROPE_FREQ_BASE_SWA))

static const struct arch arch_table[] = {
    { ARCH_ID_LLAMA, "llama", ARCH_RECIPE_LLAMA, ARCH_F_CONVERT, KEYS_LLAMA, REQ_GGUF, REQ_HF, 0,
      true, false, llama_tensors, false },
    /* llama's graph with q/k/v biases (qwen2) or per-head QK norm (qwen3),
     * NeoX rope (so no Q/K permutation when converting) */
    { ARCH_ID_QWEN2, "qwen2", ARCH_RECIPE_LLAMA, ARCH_F_CONVERT, KEYS_LLAMA, REQ_GGUF, REQ_HF, 0,
      false, true, qwen2_tensors, true },
    { ARCH_ID_QWEN3, "qwen3", ARCH_RECIPE_LLAMA, ARCH_F_CONVERT, KEYS_LLAMA, REQ_GGUF, REQ_HF, 0,
      false, false, qwen3_tensors, true },
    /* sliding windows: llama.cpp's set_swa_pattern(2) and (6), every n-th
     * layer global; gemma2 is known for kvstat only (not run or converted),
     * gemma3 runs and converts (text model) */
    { ARCH_ID_GEMMA2, "gemma2", ARCH_RECIPE_NONE, 0, KEYS_LLAMA | KEYS_SWA, REQ_GGUF, REQ_HF, 2,
      false, false, NULL, false },
    { ARCH_ID_GEMMA3, "gemma3", ARCH_RECIPE_GEMMA3, ARCH_F_CONVERT,
      KEYS_LLAMA | KEYS_SWA | ARCH_BIT(ARCH_HP_FINAL_SOFTCAP), REQ_GGUF, REQ_HF, 6,
      false, false, gemma3_tensors, true },
    /* MLA, run in the absorbed form; not converted */
    { ARCH_ID_DEEPSEEK2, "deepseek2", ARCH_RECIPE_DEEPSEEK2, 0, KEYS_DEEPSEEK2, REQ_DEEPSEEK2,
      REQ_HF, 0, false, false, deepseek2_tensors, false },
};

#define N_ARCH (sizeof(arch_table) / sizeof(arch_table[0]))

/* The first entry of each architecture is the class written to config.json. */
static const struct arch_hf hf_table[] = {
    { "LlamaForCausalLM", "llama", ARCH_ID_LLAMA, 2048 },
    { "LLaMAForCausalLM", NULL, ARCH_ID_LLAMA, 2048 },
    { "MistralForCausalLM", "mistral", ARCH_ID_LLAMA, 131072 },
    { "Qwen2ForCausalLM", "qwen2", ARCH_ID_QWEN2, 32768 },
    { "Qwen3ForCausalLM", "qwen3", ARCH_ID_QWEN3, 32768 },
    { "Gemma2ForCausalLM", "gemma2", ARCH_ID_GEMMA2, 8192 },
    { "Gemma3ForCausalLM", "gemma3_text", ARCH_ID_GEMMA3, 131072 },
    { "Gemma3ForConditionalGeneration", "gemma3", ARCH_ID_GEMMA3, 131072 },
};

#define N_HF (sizeof(hf_table) / sizeof(hf_table[0]))

const struct arch *
arch_find(const char *name)
{
    size_t i;

    for (i = 0; name && i < N_ARCH; i++)
        if (!strcmp(arch_table[i].name, name))
            return &arch_table[i];
    return NULL;
}

const struct arch *
arch_get(enum arch_id id)
{
    size_t i;

    for (i = 0; i < N_ARCH; i++)
        if (arch_table[i].id == id)
            return &arch_table[i];
    return NULL;
}

const struct arch_hf *
arch_find_hf(const char *hf_class, const char *model_type)
{
    size_t i;

    for (i = 0; i < N_HF; i++) {
        if (hf_class ? !strcmp(hf_table[i].hf_class, hf_class)
                     : model_type && hf_table[i].model_type &&
                           !strcmp(hf_table[i].model_type, model_type))
            return &hf_table[i];
    }
    return NULL;
}

const struct arch_hf *
arch_hf_of(enum arch_id id)
{
    size_t i;

    for (i = 0; i < N_HF; i++)
        if (hf_table[i].arch == id)
            return &hf_table[i];
    return NULL;
}

/* ---- field access ---- */

static int64_t *
ifield(struct arch_hparams *hp, enum arch_hp id)
{
    return (int64_t *)(void *)((char *)hp + arch_keys[id].off);
}

static double *
ffield(struct arch_hparams *hp, enum arch_hp id)
{
    return (double *)(void *)((char *)hp + arch_keys[id].off);
}

static int64_t
ival(const struct arch_hparams *hp, enum arch_hp id)
{
    return *(const int64_t *)(const void *)((const char *)hp + arch_keys[id].off);
}

const char *
arch_hp_key(const struct arch_hparams *hp, enum arch_hp id, char *buf, size_t n)
{
    const struct arch_key *k = &arch_keys[id];

    if (hp->key[id])
        return hp->key[id];
    if (hp->src == ARCH_SRC_CONFIG)
        return k->hf ? k->hf[0].name : k->gguf;
    snprintf(buf, n, "%s.%s", hp->name, k->gguf ? k->gguf : "?");
    return buf;
}

/* layer_types[il] of a config.json is "sliding_attention" */
static bool
sliding_type(const json_t *layer_types, int64_t il)
{
    const char *s = json_string_value(json_array_get(layer_types, (size_t)il));

    return s && !strcmp(s, "sliding_attention");
}

static void
swa_count(struct arch_hparams *hp)
{
    int64_t i, p = hp->swa_period;

    if (hp->sliding_window <= 0) {
        hp->sliding_window = 0;
        hp->n_swa_layers = 0;
        return;
    }
    if (hp->layer_types) {
        hp->n_swa_layers = 0;
        for (i = 0; i < (int64_t)json_array_size(hp->layer_types); i++)
            hp->n_swa_layers += sliding_type(hp->layer_types, i);
        if (hp->n_swa_layers > hp->n_layer)
            hp->n_swa_layers = hp->n_layer;
        return;
    }
    if (hp->kv[ARCH_HP_SWA_PATTERN] && hp->kv[ARCH_HP_SWA_PATTERN]->type == GGUF_TYPE_ARRAY) {
        hp->n_swa_layers = 0;
        for (i = 0; i < hp->n_layer; i++)
            hp->n_swa_layers += arch_swa_layer(hp, i);
        return;
    }
    if (p <= 0 && hp->arch)
        p = hp->arch->swa_period;
    hp->n_swa_layers = p > 0 ? hp->n_layer - hp->n_layer / p : hp->n_layer;
}

bool
arch_swa_layer(const struct arch_hparams *hp, int64_t il)
{
    const struct gguf_kv *kv = hp->kv[ARCH_HP_SWA_PATTERN];
    int64_t p = hp->swa_period;

    if (hp->sliding_window <= 0 || il < 0 || il >= hp->n_layer)
        return false;
    if (kv && kv->type == GGUF_TYPE_ARRAY)
        return ((const uint8_t *)kv->v.arr)[il] != 0;
    if (hp->layer_types)
        return sliding_type(hp->layer_types, il);
    if (p <= 0 && hp->arch)
        p = hp->arch->swa_period;
    /* llama.cpp's set_swa_pattern(p): the last layer of each group of p is global */
    return p <= 0 || il % p < p - 1;
}

/* ---- GGUF ---- */

/* ARCH_READ_KV reads the KV cache's geometry of any model; else an
 * architecture of the table has its loader's keys read, and one the table
 * does not know none (whoever runs or converts it refuses it first). */
static bool
wanted(unsigned flags, const struct arch_hparams *hp, enum arch_hp id)
{
    if (flags & ARCH_READ_KV)
        return (arch_keys[id].flags & ARCH_K_KV) != 0;
    return hp->arch && (hp->arch->keys & ARCH_BIT(id));
}

static const char *
kv_type_name(const struct gguf_kv *kv)
{
    return kv->type == GGUF_TYPE_ARRAY ? "array" : gguf_type_name(kv->type);
}

/* A per-layer array: integers >= 0, one per layer when block_count is known
 * (it is read first; a missing block_count is reported by the check). */
static int
gguf_layer_array(struct arch_hparams *hp, enum arch_hp id, const struct gguf_kv *kv,
                 struct diag *d)
{
    const char *key = kv->key.p;
    int64_t v, mx = 0, first = 0;
    uint64_t i;

    if (kv->n == 0 || (hp->n_layer > 0 && kv->n != (uint64_t)hp->n_layer))
        return diag_set(d, ST_FORMAT, "'%s' has %llu entries for %lld layers", key,
                        (unsigned long long)kv->n, (long long)hp->n_layer);
    for (i = 0; i < kv->n; i++) {
        if (!gguf_arr_int(kv, i, &v) || v < 0)
            return diag_set(d, ST_FORMAT, "'%s'[%llu] is not a non-negative integer", key,
                            (unsigned long long)i);
        if (i == 0)
            first = v;
        else if (v != first)
            hp->varies |= ARCH_BIT(id);
        if (v > mx)
            mx = v;
    }
    if (kv->arr_type != GGUF_TYPE_UINT32 && kv->arr_type != GGUF_TYPE_INT32)
        hp->loose |= ARCH_BIT(id);
    *ifield(hp, id) = mx;
    return 0;
}

static int
gguf_key(const struct gguf *g, struct arch_hparams *hp, enum arch_hp id, struct diag *d)
{
    const struct arch_key *k = &arch_keys[id];
    const struct gguf_kv *kv;
    char key[256];
    uint64_t u;
    int64_t i64;
    double x;
    int rc;

    if (!k->gguf)
        return 0;
    snprintf(key, sizeof(key), "%s.%s", hp->name, k->gguf);
    kv = gguf_get(g, key);
    if (!kv)
        return 0;
    switch (k->type) {
    case ARCH_KT_U32:
        if (kv->type == GGUF_TYPE_ARRAY && (k->flags & ARCH_K_PER_LAYER)) {
            if ((rc = gguf_layer_array(hp, id, kv, d)) < 0)
                return rc;
            break;
        }
        if (!gguf_kv_uint(kv, &u))
            return diag_set(d, ST_FORMAT, "key '%s' has type %s, expected an unsigned integer",
                            key, kv_type_name(kv));
        if (u > INT64_MAX)
            return diag_set(d, ST_FORMAT, "key '%s': value %llu out of range", key,
                            (unsigned long long)u);
        *ifield(hp, id) = (int64_t)u;
        if (kv->type != GGUF_TYPE_UINT32)
            hp->loose |= ARCH_BIT(id);
        break;
    case ARCH_KT_F32:
        if ((kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64) ||
            !gguf_kv_float(kv, &x))
            return diag_set(d, ST_FORMAT, "key '%s' has type %s, expected a float", key,
                            kv_type_name(kv));
        if (!isfinite(x))
            return diag_set(d, ST_FORMAT, "key '%s': not a finite number", key);
        *ffield(hp, id) = x;
        if (kv->type != GGUF_TYPE_FLOAT32)
            hp->loose |= ARCH_BIT(id);
        break;
    case ARCH_KT_STR:
        if (kv->type != GGUF_TYPE_STRING)
            return diag_set(d, ST_FORMAT, "key '%s' has type %s, expected a string", key,
                            kv_type_name(kv));
        *(const char **)(void *)((char *)hp + k->off) = kv->v.str.p;
        break;
    case ARCH_KT_PATTERN:
        /* BOOL[n_layer] (true = sliding) or a period of 1 or more layers:
         * anything else is bad data, not the family's default */
        if (kv->type == GGUF_TYPE_ARRAY) {
            if (kv->arr_type != GGUF_TYPE_BOOL)
                return diag_set(d, ST_FORMAT, "key '%s' is an array of %s, expected bool", key,
                                gguf_type_name(kv->arr_type));
            if (kv->n == 0 || (hp->n_layer > 0 && kv->n != (uint64_t)hp->n_layer))
                return diag_set(d, ST_FORMAT, "'%s' has %llu entries for %lld layers", key,
                                (unsigned long long)kv->n, (long long)hp->n_layer);
        } else if (kv->type == GGUF_TYPE_BOOL || !gguf_kv_int(kv, &i64)) {
            if (kv->type != GGUF_TYPE_BOOL && gguf_kv_uint(kv, &u))
                return diag_set(d, ST_FORMAT, "key '%s': period %llu out of range", key,
                                (unsigned long long)u);
            return diag_set(d, ST_FORMAT,
                            "key '%s' has type %s, expected an integer period or a bool array",
                            key, kv_type_name(kv));
        } else if (i64 <= 0 || i64 > JSON_INT_MAX) {
            return diag_set(d, ST_FORMAT, "key '%s': period %lld out of range", key,
                            (long long)i64);
        } else {
            hp->swa_period = i64;
        }
        break;
    }
    hp->has |= ARCH_BIT(id);
    hp->key[id] = kv->key.p;
    hp->kv[id] = kv;
    return 0;
}

int
arch_read_hparams(const struct gguf *g, unsigned flags, struct arch_hparams *hp, struct diag *d)
{
    const char *name = NULL;
    int rc, id;

    memset(hp, 0, sizeof(*hp));
    hp->src = ARCH_SRC_GGUF;
    hp->name = "";
    rc = gguf_get_str(g, "general.architecture", &name, d);
    if (rc < 0)
        return rc;
    if (rc == 1)
        return diag_set(d, ST_FORMAT, "missing key 'general.architecture'");
    hp->name = name;
    hp->arch = arch_find(name);
    /* block_count first: per-layer arrays are checked against it */
    if (wanted(flags, hp, ARCH_HP_BLOCK_COUNT) &&
        (rc = gguf_key(g, hp, ARCH_HP_BLOCK_COUNT, d)) < 0)
        return rc;
    for (id = 0; id < ARCH_HP_COUNT; id++)
        if (id != ARCH_HP_BLOCK_COUNT && wanted(flags, hp, (enum arch_hp)id) &&
            (rc = gguf_key(g, hp, (enum arch_hp)id, d)) < 0)
            return rc;
    swa_count(hp);
    return 0;
}

int64_t
arch_hp_layer(const struct arch_hparams *hp, enum arch_hp id, int64_t il)
{
    const struct gguf_kv *kv = hp->kv[id];
    int64_t v;

    if (kv && kv->type == GGUF_TYPE_ARRAY && arch_keys[id].type == ARCH_KT_U32 &&
        gguf_arr_int(kv, (uint64_t)il, &v))
        return v;
    return ival(hp, id);
}

/* ---- config.json ---- */

static const json_t *
member(const json_t *o, const char *key)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;

    return v && !json_is_null(v) ? v : NULL;
}

static const char *
str_member(const json_t *o, const char *key)
{
    const json_t *v = member(o, key);

    return v && json_is_string(v) ? json_string_value(v) : NULL;
}

/* An integer member: integral reals (4096.0) accepted.  Any model type: a
 * non-negative integer up to 2^53; converting: any integer (the check
 * applies the range). */
static int
cfg_int(const json_t *v, const char *key, unsigned flags, int64_t *out, struct diag *d)
{
    double x;

    if (flags & ARCH_READ_KV) {
        if (json_is_integer(v)) {
            json_int_t i = json_integer_value(v);
            if (i < 0 || i > JSON_INT_MAX)
                return diag_set(d, ST_FORMAT, "'%s' = %lld out of range", key, (long long)i);
            *out = (int64_t)i;
            return 0;
        }
        x = json_is_real(v) ? json_real_value(v) : -1;
        if (x >= 0 && x <= (double)JSON_INT_MAX && x == floor(x)) {
            *out = (int64_t)x;
            return 0;
        }
        return diag_set(d, ST_FORMAT, "'%s' is not a non-negative integer", key);
    }
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        x = json_real_value(v);
        /* range first: casting an out-of-range double is undefined */
        if (x >= -(double)JSON_INT_MAX && x <= (double)JSON_INT_MAX && x == floor(x)) {
            *out = (int64_t)x;
            return 0;
        }
    }
    return diag_set(d, ST_FORMAT, "'%s' is not an integer", key);
}

static int
cfg_key(const json_t *c, unsigned flags, struct arch_hparams *hp, enum arch_hp id,
        struct diag *d)
{
    const struct arch_key *k = &arch_keys[id];
    const unsigned skip = (flags & ARCH_READ_KV) ? ARCH_HF_CONVERT : ARCH_HF_KV;
    const struct arch_hf_name *s;
    const json_t *v = NULL;
    const char *key = NULL;
    int64_t i;
    int rc;

    for (s = k->hf; s && s->name && !v; s++)
        if (!(s->only & skip) && (v = member(c, s->name)))
            key = s->name;
    if (!v)
        return 0;
    switch (k->type) {
    case ARCH_KT_U32:
        if ((rc = cfg_int(v, key, flags, ifield(hp, id), d)) < 0)
            return rc;
        break;
    case ARCH_KT_F32:
        if (!json_is_number(v))
            return diag_set(d, ST_FORMAT, "'%s' is not a number", key);
        *ffield(hp, id) = json_number_value(v);
        break;
    case ARCH_KT_STR:
        if (!json_is_string(v))
            return diag_set(d, ST_FORMAT, "'%s' is not a string", key);
        *(const char **)(void *)((char *)hp + k->off) = json_string_value(v);
        break;
    case ARCH_KT_PATTERN:
        /* a period of 1 or more layers */
        if ((rc = cfg_int(v, key, 0, &i, d)) < 0)
            return rc;
        if (i <= 0)
            return diag_set(d, ST_FORMAT, "'%s' = %lld is not a period of 1 or more layers", key,
                            (long long)i);
        hp->swa_period = i;
        break;
    }
    hp->has |= ARCH_BIT(id);
    hp->key[id] = key;
    return 0;
}

/* layer_types: one "sliding_attention" or "full_attention" per layer (when
 * the number of layers is known; a missing one is reported by the check) */
static int
check_layer_types(const json_t *a, int64_t n_layer, struct diag *d)
{
    size_t i;

    if (!json_is_array(a))
        return diag_set(d, ST_FORMAT, "'layer_types' is not an array");
    if (n_layer > 0 && json_array_size(a) != (size_t)n_layer)
        return diag_set(d, ST_FORMAT, "'layer_types' has %zu entries for %lld layers",
                        json_array_size(a), (long long)n_layer);
    for (i = 0; i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s || (strcmp(s, "sliding_attention") && strcmp(s, "full_attention")))
            return diag_set(d, ST_FORMAT,
                            "'layer_types'[%zu] is not \"sliding_attention\" or \"full_attention\"",
                            i);
    }
    return 0;
}

int
arch_read_config(const json_t *root, unsigned flags, struct arch_hparams *hp, struct diag *d)
{
    const bool any = flags & ARCH_READ_KV;
    const json_t *c = root, *a, *v;
    int rc, id;

    memset(hp, 0, sizeof(*hp));
    hp->src = ARCH_SRC_CONFIG;
    hp->name = "";
    if (!json_is_object(root))
        return diag_set(d, ST_FORMAT, "not a JSON object");
    /* multimodal configs (gemma3, llava ...) keep the language model apart
     * (accounted for; not converted) */
    if (any && (v = json_object_get(root, "text_config")) && json_is_object(v))
        c = v;

    if ((a = member(root, "architectures"))) {
        if (!json_is_array(a) || json_array_size(a) == 0) {
            if (!any)
                return diag_set(d, ST_FORMAT, "'architectures' is not a non-empty array");
        } else if (!json_is_string(json_array_get(a, 0))) {
            if (!any)
                return diag_set(d, ST_FORMAT, "'architectures[0]' is not a string");
        } else {
            hp->hf_class = json_string_value(json_array_get(a, 0));
        }
    }
    hp->model_type = str_member(c, "model_type");
    if (!hp->model_type)
        hp->model_type = str_member(root, "model_type");
    if (!any && !hp->hf_class && !hp->model_type && member(root, "model_type"))
        return diag_set(d, ST_FORMAT, "'model_type' is not a string");
    hp->hf = arch_find_hf(hp->hf_class, hp->model_type);
    hp->arch = hp->hf ? arch_get(hp->hf->arch) : NULL;
    hp->name = hp->arch ? hp->arch->name
             : hp->model_type ? hp->model_type : hp->hf_class ? hp->hf_class : "";

    for (id = 0; id < ARCH_HP_COUNT; id++)
        if (wanted(flags, hp, (enum arch_hp)id) &&
            (rc = cfg_key(c, flags, hp, (enum arch_hp)id, d)) < 0)
            return rc;

    /* falcon-7b, starcoder: multi_query = one K/V head (falcon-40b's
     * new_decoder_architecture keeps num_kv_heads) */
    if (any && (v = json_object_get(c, "multi_query")) && json_is_true(v) &&
        (!arch_has(hp, ARCH_HP_HEAD_COUNT_KV) ||
         !json_is_true(json_object_get(c, "new_decoder_architecture")))) {
        hp->n_head_kv = 1;
        if (!arch_has(hp, ARCH_HP_HEAD_COUNT_KV))
            hp->key[ARCH_HP_HEAD_COUNT_KV] = "multi_query";
        hp->has |= ARCH_BIT(ARCH_HP_HEAD_COUNT_KV);
    }

    /* sliding window: off with use_sliding_window false (qwen2); the
     * layers from layer_types, else a pattern, else the family's */
    if ((v = json_object_get(c, "use_sliding_window")) && json_is_false(v))
        hp->sliding_window = 0;
    if ((a = member(c, "layer_types"))) {
        if ((rc = check_layer_types(a, hp->n_layer, d)) < 0)
            return rc;
        hp->layer_types = a;
    }
    swa_count(hp);
    return 0;
}

/* ---- the table's rules ---- */

static const char *
ktype_name(enum arch_ktype t)
{
    return t == ARCH_KT_U32 ? "uint32" : t == ARCH_KT_F32 ? "float32" : "string";
}

static int
check_key(struct arch_hparams *hp, enum arch_hp id, uint64_t required, struct diag *d)
{
    const struct arch_key *k = &arch_keys[id];
    const bool gguf = hp->src == ARCH_SRC_GGUF;
    char buf[256];
    const char *key = arch_hp_key(hp, id, buf, sizeof(buf));

    if (!arch_has(hp, id)) {
        if (!(required & ARCH_BIT(id)))
            return 0;
        return gguf ? diag_set(d, ST_FORMAT, "missing key '%s'", key)
                    : diag_set(d, ST_FORMAT, "'%s' is missing", key);
    }
    if (k->type == ARCH_KT_U32) {
        int64_t v = ival(hp, id);
        if (v < k->lo || v > k->hi)
            return gguf ? diag_set(d, ST_FORMAT, "key '%s': value %lld out of range [%lld, %lld]",
                                   key, (long long)v, (long long)k->lo, (long long)k->hi)
                        : diag_set(d, ST_FORMAT, "'%s' = %lld is out of range [%lld, %lld]", key,
                                   (long long)v, (long long)k->lo, (long long)k->hi);
    } else if (k->type == ARCH_KT_F32) {
        double x = *ffield(hp, id);
        if (!(x >= k->lo && x <= k->hi))
            return gguf ? diag_set(d, ST_FORMAT, "key '%s': value %g out of range", key, x)
                        : diag_set(d, ST_FORMAT, "'%s' = %g is out of range", key, x);
    }
    return 0;
}

int
arch_check_types(const struct arch_hparams *hp, struct diag *d)
{
    char buf[256];
    int id;

    for (id = 0; id < ARCH_HP_COUNT; id++)
        if (hp->loose & ARCH_BIT(id))
            return diag_set(d, ST_FORMAT, "key '%s': wrong type %s, expected %s",
                            arch_hp_key(hp, (enum arch_hp)id, buf, sizeof(buf)),
                            kv_type_name(hp->kv[id]), ktype_name(arch_keys[id].type));
    return 0;
}

int
arch_check_hparams(struct arch_hparams *hp, struct diag *d)
{
    static const char *const scalings[] = { "none", "linear", "yarn", "longrope" };
    const bool gguf = hp->src == ARCH_SRC_GGUF;
    char b1[256], b2[256];
    int64_t def_hd;
    size_t i;
    int rc, id;

    if (!hp->arch)
        return diag_set(d, ST_FORMAT, "unknown architecture '%.64s'", hp->name);
    for (id = 0; id < ARCH_HP_COUNT; id++)
        if ((rc = check_key(hp, (enum arch_hp)id,
                            gguf ? hp->arch->gguf_required : hp->arch->hf_required, d)) < 0)
            return rc;
    if (hp->rope_scaling) {
        for (i = 0; i < sizeof(scalings) / sizeof(scalings[0]); i++)
            if (!strcmp(hp->rope_scaling, scalings[i]))
                break;
        if (i == sizeof(scalings) / sizeof(scalings[0]))
            return diag_set(d, ST_FORMAT, "key '%s': unknown value '%.32s'",
                            arch_hp_key(hp, ARCH_HP_ROPE_SCALING_TYPE, b1, sizeof(b1)),
                            hp->rope_scaling);
    }

    if (!arch_has(hp, ARCH_HP_HEAD_COUNT_KV))
        hp->n_head_kv = hp->n_head;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
        return diag_set(d, ST_FORMAT, "'%s' (%lld) does not divide '%s' (%lld)",
                        arch_hp_key(hp, ARCH_HP_HEAD_COUNT_KV, b1, sizeof(b1)),
                        (long long)hp->n_head_kv,
                        arch_hp_key(hp, ARCH_HP_HEAD_COUNT, b2, sizeof(b2)),
                        (long long)hp->n_head);
    def_hd = hp->n_head > 0 && hp->n_embd % hp->n_head == 0 ? hp->n_embd / hp->n_head : 0;
    if ((!arch_has(hp, ARCH_HP_KEY_LENGTH) ||
         (gguf && !arch_has(hp, ARCH_HP_VALUE_LENGTH))) && def_hd == 0)
        return diag_set(d, ST_FORMAT, "'%s' (%lld) is not a multiple of '%s' (%lld)",
                        arch_hp_key(hp, ARCH_HP_EMBEDDING_LENGTH, b1, sizeof(b1)),
                        (long long)hp->n_embd,
                        arch_hp_key(hp, ARCH_HP_HEAD_COUNT, b2, sizeof(b2)),
                        (long long)hp->n_head);
    if (!arch_has(hp, ARCH_HP_KEY_LENGTH))
        hp->head_dim = def_hd;
    if (!arch_has(hp, ARCH_HP_VALUE_LENGTH))
        hp->head_dim_v = gguf ? def_hd : hp->head_dim;
    if (!arch_has(hp, ARCH_HP_ROPE_DIM))
        hp->n_rot = hp->head_dim;
    if (!arch_has(hp, ARCH_HP_ROPE_FREQ_BASE))
        hp->rope_freq_base = 10000.0;
    if (!arch_has(hp, ARCH_HP_ROPE_SCALING_FACTOR) && arch_has(hp, ARCH_HP_ROPE_SCALE_LINEAR))
        hp->rope_factor = hp->rope_scale_linear;
    if (!gguf) {
        /* transformers' defaults */
        if (!arch_has(hp, ARCH_HP_CONTEXT_LENGTH))
            hp->n_ctx_train = hp->hf ? hp->hf->default_ctx : 0;
        if (!arch_has(hp, ARCH_HP_RMS_EPS))
            hp->rms_eps = 1e-6;
    }
    return 0;
}

int64_t
arch_dim(const struct arch_hparams *hp, enum arch_dim dim)
{
    switch (dim) {
    case ARCH_DIM_1: return 1;
    case ARCH_DIM_EMBD: return hp->n_embd;
    case ARCH_DIM_VOCAB: return hp->n_vocab;
    case ARCH_DIM_FF: return hp->n_ff;
    case ARCH_DIM_Q: return hp->n_head * hp->head_dim;
    case ARCH_DIM_K: return hp->n_head_kv * hp->head_dim;
    case ARCH_DIM_V: return hp->n_head_kv * hp->head_dim_v;
    case ARCH_DIM_O: return hp->n_head * hp->head_dim_v;
    case ARCH_DIM_ROT_HALF: return hp->n_rot / 2;
    case ARCH_DIM_HEAD: return hp->head_dim;
    case ARCH_DIM_Q_LORA: return hp->q_lora_rank;
    case ARCH_DIM_KV_LORA: return hp->kv_lora_rank;
    case ARCH_DIM_KV_A: return hp->kv_lora_rank + hp->n_rot;
    case ARCH_DIM_Q_MLA: return hp->n_head * hp->head_dim_mla;
    case ARCH_DIM_O_MLA: return hp->n_head * hp->head_dim_v_mla;
    case ARCH_DIM_K_B: return hp->n_head * hp->kv_lora_rank;
    case ARCH_DIM_V_B: return hp->n_head * hp->head_dim_v_mla;
    case ARCH_DIM_QK_NOPE: return hp->head_dim_mla - hp->n_rot;
    }
    return 0;
}
