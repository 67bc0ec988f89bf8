/*
 * test_hf.c - HF <-> GGUF conversion of the llama family: Q/K permutation,
 * tensor names, config.json, llama3 rope factors, tokenizer import rules,
 * SentencePiece protobuf, pre-tokenizer detection, and the metadata round
 * trip GGUF -> HF files -> GGUF on the vocab GGUFs of llama.cpp
 * ($LLMKIT_VOCAB_DIR, default ../shared/vocab; those cases are skipped with a
 * note when it is absent) and on the SmolLM2 model when it is in the cache.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "hf.h"
#include "json.h"
#include "t.h"
#include "xio.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* ---- Q/K permutation ---- */

static void
test_permute(void)
{
    /* D = 4: GGUF rows (0,1,2,3) of a head = HF rows (0,2,1,3) */
    uint8_t hf[8] = {10, 11, 12, 13, 20, 21, 22, 23}, gg[8], back[8];
    static const uint8_t want1[4] = {10, 12, 11, 13};
    static const uint8_t want2[8] = {10, 12, 11, 13, 20, 22, 21, 23};

    CHECK_EQ(hf_permute_rows(gg, hf, 4, 1, 1), 0);
    CHECK(!memcmp(gg, want1, 4));
    CHECK_EQ(hf_permute_rows(gg, hf, 8, 1, 2), 0);
    CHECK(!memcmp(gg, want2, 8));
    CHECK_EQ(hf_unpermute_rows(back, gg, 8, 1, 2), 0);
    CHECK(!memcmp(back, hf, 8));
    /* D = 8, two-byte rows: gguf[2i + a] = hf[a*4 + i] */
    {
        uint16_t s[8], o[8];
        int j;
        for (j = 0; j < 8; j++)
            s[j] = (uint16_t)(100 + j);
        CHECK_EQ(hf_permute_rows(o, s, 8, 2, 1), 0);
        for (j = 0; j < 8; j++)
            CHECK_EQ(o[j], 100 + (j % 2) * 4 + j / 2);
    }
    CHECK_EQ(hf_permute_rows(gg, hf, 6, 1, 1) < 0, 0);   /* D = 6 is fine */
    CHECK_EQ(hf_permute_rows(gg, hf, 6, 1, 2), -ST_RANGE); /* D = 3 odd */
    CHECK_EQ(hf_permute_rows(gg, hf, 7, 1, 2), -ST_RANGE);
    CHECK_EQ(hf_permute_rows(gg, hf, 8, 1, 0), -ST_RANGE);
    CHECK_EQ(hf_unpermute_rows(gg, hf, 8, 1, -1), -ST_RANGE);

    /* random round trips, and the permutation is not the identity */
    for (int it = 0; it < 200; it++) {
        int64_t heads = 1 + rnd() % 8, D = 2 * (1 + rnd() % 16), rows = heads * D;
        size_t rb = 1 + rnd() % 40, n = (size_t)rows * rb;
        uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
        for (size_t k = 0; k < n; k++)
            a[k] = (uint8_t)rnd();
        CHECK_EQ(hf_permute_rows(b, a, rows, rb, heads), 0);
        CHECK_EQ(hf_unpermute_rows(c, b, rows, rb, heads), 0);
        CHECK(!memcmp(a, c, n));
        /* row 1 of head 0 comes from HF row D/2 */
        CHECK(!memcmp(b + rb, a + (size_t)(D / 2) * rb, rb));
        CHECK_EQ(hf_unpermute_rows(c, a, rows, rb, heads), 0);
        CHECK_EQ(hf_permute_rows(b, c, rows, rb, heads), 0);
        CHECK(!memcmp(a, b, n));
        free(a);
        free(b);
        free(c);
    }
}

/* ---- tensor names ---- */

static struct hf_config
small_cfg(enum hf_arch arch)
{
    struct hf_config c;

    memset(&c, 0, sizeof(c));
    c.arch = arch;
    c.arch_name = arch == HF_ARCH_QWEN2 ? "qwen2" : "llama";
    c.n_layer = 30;
    c.n_head = 9;
    c.n_head_kv = 3;
    c.permute_qk = arch == HF_ARCH_LLAMA;
    return c;
}

static void
test_names(void)
{
    static const char *const pairs[][2] = {
        {"model.embed_tokens.weight", "token_embd.weight"},
        {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"},
        {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
        {"model.layers.29.self_attn.q_proj.weight", "blk.29.attn_q.weight"},
        {"model.layers.7.self_attn.k_proj.weight", "blk.7.attn_k.weight"},
        {"model.layers.7.self_attn.k_proj.bias", "blk.7.attn_k.bias"},
        {"model.layers.10.self_attn.v_proj.weight", "blk.10.attn_v.weight"},
        {"model.layers.1.self_attn.o_proj.weight", "blk.1.attn_output.weight"},
        {"model.layers.2.post_attention_layernorm.weight", "blk.2.ffn_norm.weight"},
        {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
        {"model.layers.4.mlp.up_proj.weight", "blk.4.ffn_up.weight"},
        {"model.layers.5.mlp.down_proj.weight", "blk.5.ffn_down.weight"},
    };
    static const char *const junk[] = {
        "model.layers.01.input_layernorm.weight", "model.layers.-1.input_layernorm.weight",
        "model.layers.30.input_layernorm.weight", "model.layers.9999999999.mlp.up_proj.weight",
        "model.layers.3", "model.layers..mlp.up_proj.weight", "model.layers.3.mlp.up_proj.weightx",
        "model.layers.3x.mlp.up_proj.weight", "model.layers.3.mlp.up_proj", "", "lm_head",
        "model.layers. 3.mlp.up_proj.weight", "model.layers.+3.mlp.up_proj.weight",
    };
    struct hf_config c = small_cfg(HF_ARCH_LLAMA), q = small_cfg(HF_ARCH_QWEN2);
    struct hf_tensor_map m;
    struct diag d;
    size_t i;

    for (i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        CHECK_EQ(hf_name_to_gguf(&c, pairs[i][0], &m, &d), 1);
        CHECK_STR(m.name, pairs[i][1]);
        CHECK_EQ(hf_name_from_gguf(&c, pairs[i][1], &m, &d), 1);
        CHECK_STR(m.name, pairs[i][0]);
    }
    CHECK_EQ(hf_name_to_gguf(&c, "model.layers.29.self_attn.q_proj.weight", &m, &d), 1);
    CHECK_EQ(m.layer, 29);
    CHECK_EQ(m.perm, HF_PERM_Q);
    CHECK_EQ(m.perm_heads, 9);
    CHECK_EQ(hf_name_to_gguf(&c, "model.layers.7.self_attn.k_proj.bias", &m, &d), 1);
    CHECK_EQ(m.perm, HF_PERM_K);
    CHECK_EQ(m.perm_heads, 3);
    CHECK_EQ(hf_name_from_gguf(&c, "blk.7.attn_k.weight", &m, &d), 1);
    CHECK_EQ(m.perm, HF_PERM_K);
    CHECK_EQ(hf_name_to_gguf(&c, "model.layers.7.self_attn.v_proj.weight", &m, &d), 1);
    CHECK_EQ(m.perm, HF_PERM_NONE);
    CHECK_EQ(hf_name_to_gguf(&c, "model.embed_tokens.weight", &m, &d), 1);
    CHECK_EQ(m.layer, -1);
    /* qwen2: biases, no permutation */
    CHECK_EQ(hf_name_to_gguf(&q, "model.layers.2.self_attn.q_proj.bias", &m, &d), 1);
    CHECK_STR(m.name, "blk.2.attn_q.bias");
    CHECK_EQ(m.perm, HF_PERM_NONE);
    CHECK_EQ(m.perm_heads, 0);
    /* dropped */
    CHECK_EQ(hf_name_to_gguf(&c, "model.layers.0.self_attn.rotary_emb.inv_freq", &m, &d), 0);
    CHECK_EQ(hf_name_from_gguf(&c, "rope_freqs.weight", &m, &d), 0);
    for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        d.msg[0] = 0;
        CHECK_EQ(hf_name_to_gguf(&c, junk[i], &m, &d), -ST_FORMAT);
        CHECK(d.msg[0] != 0);
    }
    CHECK_EQ(hf_name_from_gguf(&c, "blk.30.attn_q.weight", &m, &d), -ST_FORMAT);
    CHECK_EQ(hf_name_from_gguf(&c, "blk.1.attn_qkv.weight", &m, &d), -ST_FORMAT);
    CHECK_EQ(hf_name_from_gguf(&c, "blk.01.attn_q.weight", &m, &d), -ST_FORMAT);

    CHECK(hf_tensor_force_f32("blk.0.attn_norm.weight", 1));
    CHECK(hf_tensor_force_f32("output_norm.weight", 1));
    CHECK(hf_tensor_force_f32("blk.0.attn_q.bias", 1));
    CHECK(hf_tensor_force_f32("rope_freqs.weight", 1));
    CHECK(hf_tensor_force_f32("blk.0.ffn_norm.weight", 2));
    CHECK(!hf_tensor_force_f32("blk.0.attn_q.weight", 2));
    CHECK(!hf_tensor_force_f32("token_embd.weight", 2));
    CHECK_STR(hf_torch_dtype(1), "float16");
    CHECK_STR(hf_torch_dtype(30), "bfloat16");
    CHECK(hf_torch_dtype(2) == NULL);
}

/* ---- config.json ---- */

static const char tinyllama_cfg[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\","
    " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 5632,"
    " \"max_position_embeddings\": 2048, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 22, \"num_key_value_heads\": 4,"
    " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": null,"
    " \"rope_theta\": 10000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.35.0\", \"use_cache\": true, \"vocab_size\": 32000}";

static const char llama31_cfg[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"bos_token_id\": 128000,"
    " \"eos_token_id\": [128001, 128008, 128009], \"hidden_size\": 4096,"
    " \"intermediate_size\": 14336, \"max_position_embeddings\": 131072,"
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0,"
    " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192,"
    " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": false,"
    " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 128256}";

static void
check_keys(const struct gguf *g, const char *const *want)
{
    uint64_t i;

    for (i = 0; want[i] && i < g->n_kv; i++)
        CHECK_STR(g->kv[i].key.p, want[i]);
    CHECK(want[i] == NULL && i == g->n_kv);
}

static void
test_config(void)
{
    static const char *const order[] = {
        "general.architecture", "general.type", "general.name", "llama.block_count",
        "llama.context_length", "llama.embedding_length", "llama.feed_forward_length",
        "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.freq_base",
        "llama.attention.layer_norm_rms_epsilon", "general.file_type", "llama.vocab_size",
        "llama.rope.dimension_count", "general.quantization_version", NULL};
    struct hf_config c;
    struct gguf g;
    struct diag d;
    uint64_t u;
    double x;
    const char *s;
    bool b;

    CHECK_EQ(hf_config_parse(&c, tinyllama_cfg, strlen(tinyllama_cfg), &d), 0);
    CHECK_EQ(c.arch, HF_ARCH_LLAMA);
    CHECK_STR(c.arch_name, "llama");
    CHECK_EQ(c.n_embd, 2048);
    CHECK_EQ(c.n_layer, 22);
    CHECK_EQ(c.n_ff, 5632);
    CHECK_EQ(c.n_head, 32);
    CHECK_EQ(c.n_head_kv, 4);
    CHECK_EQ(c.head_dim, 64);
    CHECK(!c.has_head_dim);
    CHECK_EQ(c.n_ctx, 2048);
    CHECK_EQ(c.n_vocab, 32000);
    CHECK(c.permute_qk);
    CHECK(!c.tie_word_embeddings);
    CHECK_EQ(c.rope.type, HF_ROPE_NONE);
    CHECK_EQ(c.special[HF_SPECIAL_BOS], 1);
    CHECK_EQ(c.special[HF_SPECIAL_EOS], 2);
    CHECK_EQ(c.special[HF_SPECIAL_PAD], -1);
    CHECK_STR(c.torch_dtype, "bfloat16");

    gguf_init(&g);
    CHECK_EQ(gguf_set_str(&g, "general.architecture", "llama"), 0);
    CHECK_EQ(gguf_set_str(&g, "general.name", "TinyLlama"), 0);
    CHECK_EQ(hf_config_to_gguf(&g, &c, 1, &d), 0);
    /* general.type lands after general.name because the caller set that first */
    {
        static const char *const o2[] = {
            "general.architecture", "general.name", "general.type", "llama.block_count",
            "llama.context_length", "llama.embedding_length", "llama.feed_forward_length",
            "llama.attention.head_count", "llama.attention.head_count_kv", "llama.rope.freq_base",
            "llama.attention.layer_norm_rms_epsilon", "general.file_type", "llama.vocab_size",
            "llama.rope.dimension_count", "general.quantization_version", NULL};
        check_keys(&g, o2);
    }
    gguf_release(&g);
    gguf_init(&g);
    CHECK_EQ(hf_config_to_gguf(&g, &c, 1, &d), 0);
    CHECK_EQ(gguf_set_str(&g, "general.name", "x"), 0);   /* appended: check order sans it */
    gguf_remove(&g, "general.name");
    {
        const char *o3[16];
        int k = 0;
        for (int j = 0; order[j]; j++)
            if (strcmp(order[j], "general.name"))
                o3[k++] = order[j];
        o3[k] = NULL;
        check_keys(&g, o3);
    }
    CHECK_EQ(gguf_get(&g, "llama.block_count")->type, GGUF_TYPE_UINT32);
    CHECK_EQ(gguf_get(&g, "llama.rope.freq_base")->type, GGUF_TYPE_FLOAT32);
    CHECK_EQ(gguf_get(&g, "llama.attention.layer_norm_rms_epsilon")->type, GGUF_TYPE_FLOAT32);
    CHECK_EQ(gguf_get(&g, "general.file_type")->type, GGUF_TYPE_UINT32);
    CHECK_EQ(gguf_get_uint(&g, "llama.attention.head_count_kv", &u, &d), 0);
    CHECK_EQ(u, 4);
    CHECK_EQ(gguf_get_uint(&g, "llama.rope.dimension_count", &u, &d), 0);
    CHECK_EQ(u, 64);
    CHECK_EQ(gguf_get_float(&g, "llama.attention.layer_norm_rms_epsilon", &x, &d), 0);
    CHECK(x == (double)1e-5f);
    CHECK_EQ(gguf_get_str(&g, "general.type", &s, &d), 0);
    CHECK_STR(s, "model");
    gguf_release(&g);

    /* Llama 3.1: llama3 rope makes no KV; eos list ignored */
    CHECK_EQ(hf_config_parse(&c, llama31_cfg, strlen(llama31_cfg), &d), 0);
    CHECK_EQ(c.rope.type, HF_ROPE_LLAMA3);
    CHECK_EQ(c.rope.orig_ctx, 8192);
    CHECK_EQ(c.special[HF_SPECIAL_EOS], -1);
    CHECK_EQ(c.special[HF_SPECIAL_BOS], 128000);
    gguf_init(&g);
    CHECK_EQ(hf_config_to_gguf(&g, &c, 32, &d), 0);
    CHECK(gguf_find(&g, "llama.rope.scaling.type") < 0);
    CHECK_EQ(gguf_get_float(&g, "llama.rope.freq_base", &x, &d), 0);
    CHECK(x == 500000.0);
    gguf_release(&g);

    /* yarn, head_dim, qwen2 */
    {
        static const char yarn[] =
            "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":896,"
            "\"intermediate_size\":4864,\"num_attention_heads\":14,\"num_hidden_layers\":24,"
            "\"num_key_value_heads\":2,\"head_dim\":64,\"rms_norm_eps\":1e-6,"
            "\"rope_theta\":1000000.0,\"tie_word_embeddings\":true,\"vocab_size\":151936,"
            "\"max_position_embeddings\":32768,\"rope_scaling\":{\"type\":\"yarn\","
            "\"factor\":4.0,\"original_max_position_embeddings\":32768,\"beta_fast\":32}}";
        static const char *const qo[] = {
            "general.architecture", "general.type", "qwen2.block_count", "qwen2.context_length",
            "qwen2.embedding_length", "qwen2.feed_forward_length", "qwen2.attention.head_count",
            "qwen2.attention.head_count_kv", "qwen2.rope.scaling.type", "qwen2.rope.scaling.factor",
            "qwen2.rope.scaling.original_context_length", "qwen2.rope.scaling.yarn_beta_fast",
            "qwen2.rope.freq_base", "qwen2.attention.layer_norm_rms_epsilon",
            "qwen2.attention.key_length", "qwen2.attention.value_length", "general.file_type",
            "general.quantization_version", NULL};
        CHECK_EQ(hf_config_parse(&c, yarn, strlen(yarn), &d), 0);
        CHECK_EQ(c.arch, HF_ARCH_QWEN2);
        CHECK(!c.permute_qk);
        CHECK(c.attn_bias);
        CHECK(c.tie_word_embeddings);
        CHECK(c.has_head_dim);
        CHECK_EQ(c.rope.type, HF_ROPE_YARN);
        gguf_init(&g);
        CHECK_EQ(hf_config_to_gguf(&g, &c, 1, &d), 0);
        check_keys(&g, qo);
        CHECK_EQ(gguf_get_str(&g, "qwen2.rope.scaling.type", &s, &d), 0);
        CHECK_STR(s, "yarn");
        gguf_release(&g);
    }
    /* transformers 5 rope_parameters, mistral defaults */
    {
        static const char m[] =
            "{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":64,"
            "\"intermediate_size\":128,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
            "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1e6},"
            "\"tie_word_embeddings\":true,\"sliding_window\":null}";
        CHECK_EQ(hf_config_parse(&c, m, strlen(m), &d), 0);
        CHECK(c.has_rope_theta);
        CHECK(c.rope_theta == 1e6);
        CHECK_EQ(c.n_ctx, 131072);
        CHECK_EQ(c.n_head_kv, 4);
        CHECK(c.rms_eps == 1e-6);
        CHECK(c.tie_word_embeddings);
        static const char mt[] = "{\"model_type\":\"llama\",\"hidden_size\":8,"
                                 "\"intermediate_size\":8,\"num_attention_heads\":2,"
                                 "\"num_hidden_layers\":1}";
        CHECK_EQ(hf_config_parse(&c, mt, strlen(mt), &d), 0);
        CHECK_STR(c.hf_arch, "LlamaForCausalLM");
    }
    (void)b;
}

static void
expect_cfg_error(const char *json, const char *msg)
{
    struct hf_config c;
    struct diag d = {{0}};

    CHECK_EQ(hf_config_parse(&c, json, strlen(json), &d), -ST_FORMAT);
    if (!strstr(d.msg, msg)) {
        t_fail++;
        fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, d.msg, msg);
    }
}

static void
test_config_errors(void)
{
#define BASE "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2"
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":\"32\"}",
                     "config.json: 'num_attention_heads' is not an integer");
    expect_cfg_error("{\"architectures\":[\"GPT2LMHeadModel\"]," BASE
                     ",\"num_attention_heads\":4}",
                     "config.json: unsupported architecture 'GPT2LMHeadModel'");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"],\"intermediate_size\":128,"
                     "\"num_hidden_layers\":2,\"num_attention_heads\":4}",
                     "config.json: 'hidden_size' is missing");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"num_key_value_heads\":3}",
                     "does not divide");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":5}", "is not a multiple of");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"dynamic\","
                     "\"factor\":2}}", "rope_scaling type 'dynamic' is not supported");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"linear\"}}",
                     "'rope_scaling.factor' is missing");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"linear\","
                     "\"factor\":\"x\"}}", "'rope_scaling.factor' is not a number");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"vocab_size\":99999999}", "'vocab_size'");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"rms_norm_eps\":-1}", "'rms_norm_eps'");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"bos_token_id\":\"1\"}",
                     "'bos_token_id' is not an integer");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"tie_word_embeddings\":1}",
                     "'tie_word_embeddings' is not a boolean");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"head_dim\":15}", "head dimension 15 is odd");
    expect_cfg_error("{\"architectures\":[\"LlamaForCausalLM\"]," BASE
                     ",\"num_attention_heads\":4,\"num_hidden_layers\":-2}", "");
    expect_cfg_error("[1,2]", "config.json: not a JSON object");
    expect_cfg_error("{\"architectures\":", "config.json: invalid JSON");
    expect_cfg_error("{\"architectures\":7}", "'architectures' is not a non-empty array");
#undef BASE
}

/* ---- llama3 rope factors ---- */

static void
test_rope(void)
{
    struct hf_config c, c2;
    struct diag d;
    float f[64], g[64];
    int k;

    CHECK_EQ(hf_config_parse(&c, llama31_cfg, strlen(llama31_cfg), &d), 0);
    CHECK_EQ(hf_rope_freqs(&c, f, 64, &d), 0);
    CHECK_EQ(hf_rope_freqs(&c, f, 63, &d), -ST_RANGE);
    CHECK(f[0] == 1.0f);
    CHECK(f[63] == 8.0f);
    for (k = 1; k < 64; k++)
        CHECK(f[k] >= f[k - 1] && f[k] >= 1.0f && f[k] <= 8.0f);
    /* k = 41: wavelen 2pi*500000^(82/128) ~ 27690, inside (2048, 8192)?  no:
     * above 8192 -> factor; find the blend region and check one value by hand */
    for (k = 0; k < 64; k++) {
        double freq = 1.0 / pow(500000.0, 2.0 * k / 128.0), wl = 2 * M_PI / freq;
        double want = wl < 2048 ? 1.0 : wl > 8192 ? 8.0
                    : 1.0 / ((1 - (8192 / wl - 1) / 3) / 8 + (8192 / wl - 1) / 3);
        CHECK_NEAR(f[k], want, 1e-5 * want);
    }
    /* the inverse finds the parameters back */
    c2 = c;
    c2.rope.type = HF_ROPE_NONE;
    c2.rope.factor = 0;
    CHECK_EQ(hf_config_match_rope_freqs(&c2, f, 64, &d), 0);
    CHECK_EQ(c2.rope.type, HF_ROPE_LLAMA3);
    CHECK(c2.rope.factor == 8.0);
    CHECK(c2.rope.low_freq_factor == 1.0);
    CHECK(c2.rope.high_freq_factor == 4.0);
    CHECK_EQ(c2.rope.orig_ctx, 8192);
    CHECK_EQ(hf_rope_freqs(&c2, g, 64, &d), 0);
    CHECK(!memcmp(f, g, sizeof(f)));
    g[20] *= 1.01f;
    CHECK_EQ(hf_config_match_rope_freqs(&c2, g, 64, &d), -ST_FORMAT);
    /* Llama 3.2 1B: factor 32, head_dim 64 */
    c.rope.factor = 32;
    c.head_dim = 64;
    CHECK_EQ(hf_rope_freqs(&c, f, 32, &d), 0);
    CHECK(f[31] == 32.0f);
    c2 = c;
    c2.rope.type = HF_ROPE_NONE;
    CHECK_EQ(hf_config_match_rope_freqs(&c2, f, 32, &d), 0);
    CHECK(c2.rope.factor == 32.0);
    c.rope.type = HF_ROPE_LINEAR;
    CHECK_EQ(hf_rope_freqs(&c, f, 32, &d), -ST_RANGE);
}

/* ---- vocabulary import rules ---- */

static int
vocab_from(struct hf_vocab *v, const char *tj, const char *tc, int64_t n_vocab,
           const int64_t *cfg_special, struct diag *d)
{
    struct hf_vocab_src s;

    memset(&s, 0, sizeof(s));
    s.tokenizer_json = tj;
    s.tokenizer_json_len = tj ? strlen(tj) : 0;
    s.tokenizer_config = tc;
    s.tokenizer_config_len = tc ? strlen(tc) : 0;
    s.n_vocab = n_vocab;
    s.cfg_special = cfg_special;
    return hf_vocab_from_mem(v, &s, d);
}

static const char gpt2_tj[] =
    "{\"added_tokens\":[{\"id\":5,\"content\":\"<|im_start|>\",\"special\":false},"
    "{\"id\":6,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":7,\"content\":\"a\\u2581b\",\"special\":false}],"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Digits\",\"individual_digits\":true},{\"type\":\"ByteLevel\","
    "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
    "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\","
    "\"type_id\":0}}]},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\\u0120\":3,"
    "\"\\u0120a\":4},\"merges\":[\"a b\",[\"\\u0120\",\"a\"],[\"x y\",\"z\"]]}}";

static void
test_vocab_gpt2(void)
{
    struct hf_vocab v;
    struct diag d;
    int64_t cs[HF_SPECIAL_COUNT] = {-1, 1, -1, -1, -1, -1, -1};

    hf_vocab_init(&v);
    CHECK_EQ(vocab_from(&v, gpt2_tj, "{\"bos_token\":\"<s>\",\"chat_template\":\"T\"}", 9, cs,
                        &d), 0);
    CHECK_STR(v.model, "gpt2");
    CHECK_STR(v.pre, "smollm");
    CHECK(!v.pre_guessed);
    CHECK_EQ(v.n_tokens, 9);
    CHECK_STR(v.tokens[4], "\xc4\xa0" "a");
    CHECK_STR(v.tokens[5], "<|im_start|>");
    CHECK_EQ(v.types[5], HF_TOK_CONTROL);      /* looks special */
    CHECK_EQ(v.types[6], HF_TOK_CONTROL);
    CHECK_STR(v.tokens[7], "a b");             /* U+2581 -> space */
    CHECK_EQ(v.types[7], HF_TOK_USER_DEFINED);
    CHECK_STR(v.tokens[8], "[PAD8]");
    CHECK_EQ(v.types[8], HF_TOK_UNUSED);
    CHECK_EQ(v.types[0], HF_TOK_NORMAL);
    CHECK(v.scores == NULL);
    CHECK_EQ(v.n_merges, 3);
    CHECK_STR(v.merges[0], "a b");
    CHECK_STR(v.merges[1], "\xc4\xa0 a");
    CHECK_STR(v.merges[2], "x\xc4\xa0y z");
    CHECK_EQ(v.special[HF_SPECIAL_BOS], 6);    /* content matched in added_tokens */
    CHECK_EQ(v.special[HF_SPECIAL_EOS], 1);    /* config.json fallback */
    CHECK_EQ(v.add_bos, 1);                    /* post_processor */
    CHECK_EQ(v.add_eos, -1);
    CHECK_STR(v.chat_template, "T");
    {
        struct gguf g;
        static const char *const keys[] = {
            "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
            "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
            "tokenizer.chat_template", NULL};
        gguf_init(&g);
        CHECK_EQ(hf_vocab_to_gguf(&g, &v, &d), 0);
        check_keys(&g, keys);
        CHECK_EQ(gguf_get(&g, "tokenizer.ggml.token_type")->arr_type, GGUF_TYPE_INT32);
        CHECK_EQ(gguf_get(&g, "tokenizer.ggml.bos_token_id")->type, GGUF_TYPE_UINT32);
        gguf_release(&g);
    }
    /* tokenizer_config overrides the post_processor; 49152 forces add_bos off */
    CHECK_EQ(vocab_from(&v, gpt2_tj, "{\"add_bos_token\":false,\"add_eos_token\":true,"
                        "\"add_prefix_space\":false}", 9, NULL, &d), 0);
    CHECK_EQ(v.add_bos, 0);
    CHECK_EQ(v.add_eos, 1);
    CHECK_EQ(v.add_space_prefix, 0);
    CHECK_EQ(vocab_from(&v, gpt2_tj, NULL, 0, NULL, &d), 0);
    CHECK_EQ(v.n_tokens, 8);                   /* no config size: max id + 1 */
    CHECK_EQ(v.add_bos, 1);                    /* no tokenizer_config: the template's token */
    /* errors */
    CHECK_EQ(vocab_from(&v, gpt2_tj, NULL, 5, NULL, &d), -ST_FORMAT); /* id 5 >= 5 */
    CHECK(v.tokens == NULL);
    CHECK_EQ(vocab_from(&v, "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", NULL, 0, NULL,
                        &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "model type 'Unigram' is not supported") != NULL);
    CHECK_EQ(vocab_from(&v, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0}}}", NULL,
                        0, NULL, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "appears twice") != NULL);
    CHECK_EQ(vocab_from(&v, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"}}}", NULL, 0,
                        NULL, &d), -ST_FORMAT);
    CHECK_EQ(vocab_from(&v, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[1]}}",
                        NULL, 0, NULL, &d), -ST_FORMAT);
    CHECK_EQ(vocab_from(&v, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}",
                        "{\"chat_template\":5}", 0, NULL, &d), -ST_FORMAT);
    CHECK_EQ(vocab_from(&v, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", "[]", 0, NULL,
                        &d), -ST_FORMAT);
    CHECK_EQ(vocab_from(&v, NULL, "{}", 0, NULL, &d), -ST_FORMAT);
    /* unknown pre-tokenizer: default, with a warning */
    CHECK_EQ(vocab_from(&v, "{\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"type\":"
                        "\"BPE\",\"vocab\":{\"a\":0}}}", NULL, 0, NULL, &d), 0);
    CHECK_STR(v.pre, "default");
    CHECK(v.pre_guessed);
    CHECK(v.warning[0] != 0);
    /* chat template list form and chat_template.jinja */
    CHECK_EQ(vocab_from(&v, "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}",
                        "{\"chat_template\":[{\"name\":\"default\",\"template\":\"D\"},"
                        "{\"name\":\"tool_use\",\"template\":\"U\"}]}", 0, NULL, &d), 0);
    CHECK_STR(v.chat_template, "D");
    CHECK_EQ(v.n_extra, 1);
    CHECK_STR(v.extra[0].key, "tokenizer.chat_template.tool_use");
    {
        struct hf_vocab_src s;
        static const char tj[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}";
        memset(&s, 0, sizeof(s));
        s.tokenizer_json = tj;
        s.tokenizer_json_len = strlen(tj);
        s.chat_template_jinja = "J{{x}}";
        s.chat_template_jinja_len = 6;
        s.merges_txt = "#version: 0.2\nx y\n\nc d\r\n";
        s.merges_txt_len = strlen(s.merges_txt);
        CHECK_EQ(hf_vocab_from_mem(&v, &s, &d), 0);
        CHECK_STR(v.chat_template, "J{{x}}");
        CHECK_EQ(v.n_merges, 2);
        CHECK_STR(v.merges[1], "c d");
    }
    hf_vocab_release(&v);
}

/* A miniature Llama 3 directory as transformers writes it. */
static void
test_vocab_llama3(void)
{
    static const char tj[] =
        "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":6,\"content\":\"<|begin_of_text|>\","
        "\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,"
        "\"special\":true},{\"id\":7,\"content\":\"<|eot_id|>\",\"special\":true}],"
        "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
        "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r"
        "\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
        "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
        "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
        "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\","
        "\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},"
        "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":"
        "\"<|begin_of_text|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
        "\"pair\":[],\"special_tokens\":{}}]},"
        "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
        "\"unk_token\":null,\"byte_fallback\":false,\"ignore_merges\":true,"
        "\"vocab\":{\"H\":0,\"i\":1,\"Hi\":2,\"\\u0120\":3,\"\\u0120Hi\":4,\"!\":5},"
        "\"merges\":[\"H i\",\"\\u0120 Hi\"]}}";
    static const char tc[] =
        "{\"added_tokens_decoder\":{\"6\":{\"content\":\"<|begin_of_text|>\",\"special\":true},"
        "\"7\":{\"content\":\"<|eot_id|>\",\"special\":true}},"
        "\"bos_token\":\"<|begin_of_text|>\",\"chat_template\":\"{{ bos_token }}\","
        "\"clean_up_tokenization_spaces\":true,\"eos_token\":\"<|eot_id|>\","
        "\"model_max_length\":131072,\"tokenizer_class\":\"PreTrainedTokenizerFast\"}";
    int64_t cs[HF_SPECIAL_COUNT] = {6, -1, -1, -1, -1, -1, -1};
    struct hf_vocab v;
    struct diag d;

    hf_vocab_init(&v);
    CHECK_EQ(vocab_from(&v, tj, tc, 8, cs, &d), 0);
    CHECK_STR(v.model, "gpt2");
    CHECK_STR(v.pre, "llama-bpe");
    CHECK_EQ(v.special[HF_SPECIAL_BOS], 6);
    CHECK_EQ(v.special[HF_SPECIAL_EOS], 7);
    CHECK_EQ(v.add_bos, 1);
    CHECK_EQ(v.add_eos, -1);
    CHECK_EQ(v.types[6], HF_TOK_CONTROL);
    CHECK_EQ(v.types[7], HF_TOK_CONTROL);
    CHECK_EQ(v.n_merges, 2);
    CHECK_STR(v.chat_template, "{{ bos_token }}");
    hf_vocab_release(&v);
}

static void
test_vocab_llama_hf(void)
{
    static const char tj[] =
        "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
        "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\","
        "\"special\":true},{\"id\":6,\"content\":\"<tool>\",\"special\":false}],"
        "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,"
        "\"</s>\":2,\"<0x0A>\":3,\"\\u2581a\":4,\"b\":5,\"<tool>\":6},\"merges\":[]}}";
    struct hf_vocab v;
    struct diag d;

    hf_vocab_init(&v);
    CHECK_EQ(vocab_from(&v, tj, "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\","
                        "\"unk_token\":\"<unk>\"}", 0, NULL, &d), 0);
    CHECK_STR(v.model, "llama");
    CHECK_STR(v.pre, "default");
    CHECK_EQ(v.n_tokens, 7);
    CHECK(v.scores && v.scores[4] == -1000.0f && v.scores[0] == -1000.0f);
    CHECK_EQ(v.types[0], HF_TOK_CONTROL);
    CHECK_EQ(v.types[3], HF_TOK_BYTE);
    CHECK_EQ(v.types[4], HF_TOK_NORMAL);
    CHECK_EQ(v.types[6], HF_TOK_USER_DEFINED);
    CHECK_EQ(v.special[HF_SPECIAL_UNK], 0);
    CHECK_EQ(v.special[HF_SPECIAL_EOS], 2);
    CHECK(!v.has_merges);
    hf_vocab_release(&v);
}

/* ---- SentencePiece ---- */

static void
mk_spm_vocab(struct hf_vocab *v)
{
    static const char *const t[] = {"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81" "a", "b",
                                    "\xe2\x96\x81" "ab", "<u>"};
    static const int32_t ty[] = {2, 3, 3, 6, 1, 1, 1, 4};
    static const float sc[] = {0, 0, 0, 0, -1.5f, -2, -0.25f, 0};
    int i;

    hf_vocab_init(v);
    snprintf(v->model, sizeof(v->model), "llama");
    snprintf(v->pre, sizeof(v->pre), "default");
    v->n_tokens = 8;
    v->tokens = calloc(8, sizeof(char *));
    v->token_len = calloc(8, sizeof(uint32_t));
    v->scores = malloc(8 * sizeof(float));
    v->types = malloc(8 * sizeof(int32_t));
    for (i = 0; i < 8; i++) {
        v->tokens[i] = strdup(t[i]);
        v->token_len[i] = (uint32_t)strlen(t[i]);
        v->scores[i] = sc[i];
        v->types[i] = ty[i];
    }
    v->special[HF_SPECIAL_UNK] = 0;
    v->special[HF_SPECIAL_BOS] = 1;
    v->special[HF_SPECIAL_EOS] = 2;
    v->add_bos = 1;
    v->add_eos = 0;
}

static int
spm_from(struct hf_vocab *v, const uint8_t *b, size_t n, const char *tc, int64_t n_vocab,
         struct diag *d)
{
    struct hf_vocab_src s;

    memset(&s, 0, sizeof(s));
    s.spm_model = b;
    s.spm_model_len = n;
    s.tokenizer_config = tc;
    s.tokenizer_config_len = tc ? strlen(tc) : 0;
    s.n_vocab = n_vocab;
    return hf_vocab_from_mem(v, &s, d);
}

static void
test_spm(void)
{
    struct hf_vocab v, w;
    struct diag d;
    uint8_t *b;
    size_t n;
    int i;

    mk_spm_vocab(&v);
    hf_vocab_init(&w);
    CHECK_EQ(hf_spm_write(&v, &b, &n, &d), 0);
    CHECK_EQ(spm_from(&w, b, n, NULL, 0, &d), 0);
    CHECK_EQ(w.n_tokens, 8);
    for (i = 0; i < 8 && w.n_tokens == 8; i++) {
        CHECK_STR(w.tokens[i], v.tokens[i]);
        CHECK(w.scores[i] == v.scores[i]);
        /* without the marker, as _create_vocab_sentencepiece: a
         * USER_DEFINED piece is NORMAL (user tokens come from
         * added_tokens_decoder) */
        CHECK_EQ(w.types[i], v.types[i] == HF_TOK_USER_DEFINED ? HF_TOK_NORMAL : v.types[i]);
    }
    CHECK_STR(w.model, "llama");
    CHECK_STR(w.pre, "default");
    /* config vocab_size pads; added_tokens_decoder without the marker follows
     * the converter: CONTROL, score -1000 */
    CHECK_EQ(spm_from(&w, b, n, "{\"added_tokens_decoder\":{\"1\":{\"content\":\"<s>\","
                      "\"special\":true},\"7\":{\"content\":\"<x\\u2581y>\",\"special\":false}}}",
                      10, &d), 0);
    CHECK_EQ(w.n_tokens, 10);
    CHECK(w.scores[1] == -1000.0f);
    CHECK_EQ(w.types[1], HF_TOK_CONTROL);
    CHECK_STR(w.tokens[7], "<x y>");
    CHECK_STR(w.tokens[9], "[PAD9]");
    CHECK_EQ(w.types[9], HF_TOK_UNUSED);
    CHECK(w.scores[9] == -10000.0f);
    /* with the marker: exact tokens keep their score */
    CHECK_EQ(spm_from(&w, b, n, "{\"llmkit_gguf\":{},\"added_tokens_decoder\":{\"1\":"
                      "{\"content\":\"<s>\",\"special\":true}}}", 0, &d), 0);
    CHECK(w.scores[1] == 0.0f);
    /* truncations and corruptions never crash and are rejected or parse */
    for (size_t cut = 0; cut < n; cut++) {
        int rc = spm_from(&w, b, cut, NULL, 0, &d);
        CHECK(rc == 0 || rc == -ST_FORMAT);
    }
    {
        uint8_t bad[] = {0x0a, 0x04, 0x18, 0x09, 0x10, 0x00};   /* type 9 */
        uint8_t grp[] = {0x0b, 0x0c};                            /* group wire type */
        uint8_t big[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f};    /* length past end */
        uint8_t wt[] = {0x08, 0x01};                             /* pieces as varint */
        uint8_t ok[] = {0x0a, 0x03, 0x0a, 0x01, 'x'};
        CHECK_EQ(spm_from(&w, bad, sizeof(bad), NULL, 0, &d), -ST_FORMAT);
        CHECK(strstr(d.msg, "unknown type 9") != NULL);
        CHECK_EQ(spm_from(&w, grp, sizeof(grp), NULL, 0, &d), -ST_FORMAT);
        CHECK_EQ(spm_from(&w, big, sizeof(big), NULL, 0, &d), -ST_FORMAT);
        CHECK_EQ(spm_from(&w, wt, sizeof(wt), NULL, 0, &d), -ST_FORMAT);
        CHECK_EQ(spm_from(&w, ok, sizeof(ok), NULL, 0, &d), 0);
        CHECK_STR(w.tokens[0], "x");
        CHECK_EQ(w.types[0], HF_TOK_NORMAL);
    }
    free(b);
    /* an unk typed CONTROL (llama.cpp's Gemma GGUFs) is still SentencePiece's
     * unk piece: written UNKNOWN, the only one */
    v.types[0] = HF_TOK_CONTROL;
    CHECK_EQ(hf_spm_write(&v, &b, &n, &d), 0);
    CHECK_EQ(spm_from(&w, b, n, NULL, 0, &d), 0);
    CHECK_EQ(w.types[0], HF_TOK_UNKNOWN);
    for (i = 1; i < 8; i++)
        CHECK(w.types[i] != HF_TOK_UNKNOWN);
    v.types[0] = HF_TOK_UNKNOWN;
    free(b);
    /* tokenizer.json of an SPM vocabulary: merges from the pieces */
    {
        json_t *tj, *tc, *m;
        CHECK_EQ(hf_vocab_to_json(&v, 4096, &tj, &tc, &d), 0);
        m = json_object_get(json_object_get(tj, "model"), "merges");
        /* "▁ab" = "▁a" + "b" (score -0.25) before "▁a"... no: only splits into pieces */
        CHECK_EQ(json_array_size(m), 1);
        CHECK_STR(json_string_value(json_array_get(m, 0)), "\xe2\x96\x81" "a b");
        CHECK(json_is_true(json_object_get(json_object_get(tj, "model"), "byte_fallback")));
        CHECK_STR(json_string_value(json_object_get(tc, "bos_token")), "<s>");
        CHECK_EQ(json_integer_value(json_object_get(tc, "model_max_length")), 4096);
        json_decref(tj);
        json_decref(tc);
    }
    hf_vocab_release(&v);
    hf_vocab_release(&w);
}

/* ---- pre-tokenizers ---- */

static void
check_pre(const char *json, const char *hint, const char *want)
{
    json_t *j = json_loads(json, 0, NULL);
    const char *got;

    CHECK(j != NULL);
    got = hf_pre_match(j, hint);
    if (want)
        CHECK_STR(got, want);
    else
        CHECK(got == NULL);
    json_decref(j);
}

static void
test_pre(void)
{
#define BL(p, r) "{\"type\":\"ByteLevel\",\"add_prefix_space\":" p ",\"trim_offsets\":true," \
                 "\"use_regex\":" r "}"
#define SEQ(a, b) "{\"type\":\"Sequence\",\"pretokenizers\":[" a "," b "]}"
#define SPLIT(re) "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" re "\"},\"behavior\":" \
                  "\"Isolated\",\"invert\":false}"
#define L3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| " \
           "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define Q2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| " \
           "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define L3X "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\\\r\\\\n\\\\p{L}" \
            "\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*" \
            "[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
    check_pre(BL("false", "true"), NULL, "gpt-2");
    check_pre(BL("false", "true"), "mpt", "mpt");
    check_pre(BL("false", "true"), "jais-2", "jais-2");     /* no HF form here: trust the hint */
    check_pre(BL("false", "true"), "smollm", "gpt-2");      /* hint of another family */
    check_pre(BL("true", "true"), NULL, NULL);              /* add_prefix_space */
    check_pre("{\"type\":\"ByteLevel\"}", NULL, NULL);      /* HF default add_prefix_space */
    check_pre(SEQ(SPLIT(L3), BL("false", "false")), NULL, "llama-bpe");
    check_pre(SEQ(SPLIT(L3X), BL("false", "false")), NULL, "llama-bpe");
    check_pre(SEQ(SPLIT(L3), BL("false", "false")), "llama3", "llama3");
    check_pre(SEQ(SPLIT(Q2), "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                  "\"trim_offsets\":false,\"use_regex\":false}"), NULL, "qwen2");
    check_pre(SEQ(SPLIT(L3), BL("false", "true")), NULL, NULL);
    check_pre(SEQ("{\"type\":\"Digits\",\"individual_digits\":true}", BL("false", "true")),
              NULL, "smollm");
    check_pre(SEQ("{\"type\":\"Digits\",\"individual_digits\":true}", BL("false", "true")),
              "starcoder", "starcoder");
    check_pre("{\"type\":\"Sequence\",\"pretokenizers\":[" SPLIT("[\\r\\n]") ","
              SPLIT("\\\\s?\\\\p{L}+") "," SPLIT("\\\\s?\\\\p{P}+") ","
              SPLIT("[一-龥ࠀ-一가-퟿]+") ",{\"type\":\"Digits\",\"individual_digits\":true},"
              BL("false", "false") "]}", NULL, "deepseek-coder");
    check_pre("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Punctuation\","
              "\"behavior\":\"contiguous\"}," BL("false", "true") ",{\"type\":\"Digits\","
              "\"individual_digits\":false}," SPLIT("[0-9][0-9][0-9]") "]}", NULL, "falcon");
    check_pre("{\"type\":\"Metaspace\",\"replacement\":\"x\"}", NULL, NULL);
    check_pre("{\"type\":\"Sequence\",\"pretokenizers\":7}", NULL, NULL);
    check_pre("[]", NULL, NULL);
    CHECK(hf_pre_known("smollm"));
    CHECK(hf_pre_known("default"));
    CHECK(!hf_pre_known("tekken"));
#undef BL
#undef SEQ
#undef SPLIT
#undef L3
#undef Q2
#undef L3X
}

/* ---- round trips over real vocabularies ---- */

static bool
kv_equal(const struct gguf_kv *a, const struct gguf_kv *b)
{
    uint64_t i;

    if (a->type != b->type || a->n != b->n)
        return false;
    if (a->type == GGUF_TYPE_STRING)
        return a->v.str.n == b->v.str.n && !memcmp(a->v.str.p, b->v.str.p, a->v.str.n);
    if (a->type != GGUF_TYPE_ARRAY)
        return !memcmp(a->v.raw, b->v.raw, gguf_type_size(a->type));
    if (a->arr_type != b->arr_type)
        return false;
    if (a->arr_type != GGUF_TYPE_STRING)
        return !memcmp(a->v.arr, b->v.arr, a->n * gguf_type_size(a->arr_type));
    for (i = 0; i < a->n; i++)
        if (a->v.strs[i].n != b->v.strs[i].n ||
            memcmp(a->v.strs[i].p, b->v.strs[i].p, a->v.strs[i].n))
            return false;
    return true;
}

/* Every key of src whose name starts with one of prefixes must be in dst
 * with the same type and value; dst may only add keys listed in extra. */
static void
compare(const char *what, const struct gguf *src, const struct gguf *dst,
        const char *const *prefixes, const char *const *extra)
{
    uint64_t i;
    size_t k;

    for (i = 0; i < src->n_kv; i++) {
        const struct gguf_kv *a = &src->kv[i], *b;
        for (k = 0; prefixes[k]; k++)
            if (!strncmp(a->key.p, prefixes[k], strlen(prefixes[k])))
                break;
        if (!prefixes[k])
            continue;
        b = gguf_get(dst, a->key.p);
        t_checks++;
        if (!b || !kv_equal(a, b)) {
            t_fail++;
            fprintf(stderr, "%s: key '%s' %s after the round trip\n", what, a->key.p,
                    b ? "differs" : "is missing");
        }
    }
    for (i = 0; i < dst->n_kv; i++) {
        const char *key = dst->kv[i].key.p;
        if (gguf_find(src, key) >= 0)
            continue;
        for (k = 0; extra[k]; k++)
            if (!strcmp(key, extra[k]))
                break;
        t_checks++;
        if (!extra[k]) {
            t_fail++;
            fprintf(stderr, "%s: key '%s' appeared in the round trip\n", what, key);
        }
    }
}

static char *
dump(json_t *o, size_t *n)
{
    char *s = hf_json_dump(o, n);

    json_decref(o);
    return s;
}

/* GGUF -> tokenizer.json/tokenizer_config.json(/tokenizer.model) text -> GGUF */
static void
roundtrip_vocab(const char *path)
{
    static const char *const prefixes[] = {"tokenizer.", NULL};
    static const char *const none[] = {NULL};
    struct gguf g, g2;
    struct hf_vocab v, w;
    struct hf_vocab_src s;
    struct diag d;
    json_t *tj, *tc;
    uint8_t *spm = NULL;

    hf_vocab_init(&v);
    hf_vocab_init(&w);
    if (gguf_open(&g, path, &d)) {
        t_fail++;
        fprintf(stderr, "%s: %s\n", path, d.msg);
        return;
    }
    int rc1 = hf_vocab_from_gguf(&v, &g, &d);
    int rc2 = rc1 ? rc1 : hf_vocab_to_json(&v, 2048, &tj, &tc, &d);
    CHECK_EQ(rc1, 0);
    CHECK_EQ(rc2, 0);
    if (rc1 || rc2) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        gguf_release(&g);
        hf_vocab_release(&v);
        return;
    }
    memset(&s, 0, sizeof(s));
    s.tokenizer_json = dump(tj, &s.tokenizer_json_len);
    s.tokenizer_config = dump(tc, &s.tokenizer_config_len);
    if (!strcmp(v.model, "llama")) {
        CHECK_EQ(hf_spm_write(&v, &spm, &s.spm_model_len, &d), 0);
        s.spm_model = spm;
    }
    s.n_vocab = v.n_tokens;
    s.cfg_special = v.special;
    CHECK_EQ(hf_vocab_from_mem(&w, &s, &d), 0);
    if (w.n_tokens) {
        gguf_init(&g2);
        CHECK_EQ(hf_vocab_to_gguf(&g2, &w, &d), 0);
        compare(path, &g, &g2, prefixes, none);
        gguf_release(&g2);
        CHECK(!w.pre_guessed);
    } else {
        fprintf(stderr, "%s: %s\n", path, d.msg);
    }
    /* the pre name also comes back without the marker where the family is unique */
    {
        json_t *j = json_loadb(s.tokenizer_json, s.tokenizer_json_len, 0, NULL);
        const char *p = hf_pre_match(json_object_get(j, "pre_tokenizer"), NULL);
        if (!strcmp(v.model, "gpt2")) {
            CHECK(p != NULL);
            if (p && strcmp(v.pre, "starcoder"))
                CHECK_STR(p, v.pre);
        }
        json_decref(j);
    }
    free((char *)s.tokenizer_json);
    free((char *)s.tokenizer_config);
    free(spm);
    hf_vocab_release(&v);
    hf_vocab_release(&w);
    gguf_release(&g);
}

/* GGUF -> HF directory (hf_write_dir) -> hf_config_load + hf_vocab_load -> GGUF */
static void
roundtrip_dir(const char *path)
{
    static const char *const prefixes[] = {"tokenizer.", "llama.", "qwen2.",
                                           "general.architecture", "general.file_type",
                                           "general.quantization_version", NULL};
    static const char *const extra[] = {"general.type", "general.quantization_version",
                                        "llama.vocab_size", "llama.rope.dimension_count",
                                        "llama.attention.head_count_kv", NULL};
    char dir[] = "/tmp/llmkit_test_hf_XXXXXX";
    struct gguf g, g2;
    struct hf_config c, c2;
    struct hf_vocab v, w;
    struct diag d;
    uint64_t ft = 1;
    char *p;

    hf_vocab_init(&v);
    hf_vocab_init(&w);
    if (!mkdtemp(dir) || gguf_open(&g, path, &d)) {
        t_fail++;
        fprintf(stderr, "%s: cannot set up\n", path);
        return;
    }
    int rc = hf_config_from_gguf(&c, &g, &d);
    if (!rc)
        rc = hf_vocab_from_gguf(&v, &g, &d);
    if (!rc)
        rc = hf_write_dir(dir, &c, &v, "float16", &d);
    p = path_join(dir, "config.json");
    if (!rc)
        rc = hf_config_load(&c2, p, &d);
    free(p);
    if (!rc)
        rc = hf_vocab_load(&w, dir, &c2, &d);
    CHECK_EQ(rc, 0);
    if (!rc) {
        gguf_get_uint(&g, "general.file_type", &ft, &d);
        gguf_init(&g2);
        CHECK_EQ(hf_config_to_gguf(&g2, &c2, (uint32_t)ft, &d), 0);
        CHECK_EQ(hf_vocab_to_gguf(&g2, &w, &d), 0);
        compare(path, &g, &g2, prefixes, extra);
        CHECK_EQ(c2.tie_word_embeddings, gguf_find_tensor(&g, "output.weight") < 0);
        CHECK_EQ(c2.n_vocab, v.n_tokens);
        gguf_release(&g2);
    } else {
        fprintf(stderr, "%s: %s\n", path, d.msg);
    }
    {
        static const char *const files[] = {"config.json", "tokenizer.json",
                                            "tokenizer_config.json", "special_tokens_map.json",
                                            "generation_config.json", "tokenizer.model"};
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            p = path_join(dir, files[i]);
            unlink(p);
            free(p);
        }
        rmdir(dir);
    }
    hf_vocab_release(&v);
    hf_vocab_release(&w);
    gguf_release(&g);
}

/* gemma4-style raw BPE has no byte-level HF form: refused, not mis-written */
static void
test_raw_bpe_refused(void)
{
    static const char *const toks[] = {"a", "b", "ab"};
    struct gguf g;
    struct hf_vocab v;
    struct diag d;

    hf_vocab_init(&v);
    gguf_init(&g);
    CHECK(gguf_set_str(&g, "tokenizer.ggml.model", "gpt2") == 0 &&
          gguf_set_str(&g, "tokenizer.ggml.pre", "gemma4") == 0 &&
          gguf_set_arr_str(&g, "tokenizer.ggml.tokens", toks, NULL, 3) == 0);
    CHECK(hf_vocab_from_gguf(&v, &g, &d) == -ST_FORMAT && strstr(d.msg, "raw BPE"));
    hf_vocab_release(&v);
    gguf_release(&g);
}

static void
test_roundtrips(void)
{
    static const char *const vocabs[] = {"gpt-2", "llama-spm", "deepseek-coder", "falcon",
                                         "starcoder", "phi-3"};
    const char *dir = getenv("LLMKIT_VOCAB_DIR");
    const char *home = getenv("HOME");
    char path[4096];
    size_t i;

    if (!dir)
        dir = "../shared/vocab";
    for (i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", dir, vocabs[i]);
        if (!path_exists(path)) {
            fprintf(stderr, "test_hf: note: %s absent, round trip skipped\n", path);
            continue;
        }
        roundtrip_vocab(path);
        if (!strcmp(vocabs[i], "llama-spm") || !strcmp(vocabs[i], "deepseek-coder"))
            roundtrip_dir(path);
    }
    snprintf(path, sizeof(path), "%s/.cache/llmkit/SmolLM2-135M-Instruct.Q4_1.gguf",
             home ? home : "");
    if (path_exists(path)) {
        roundtrip_vocab(path);
        roundtrip_dir(path);
    } else {
        fprintf(stderr, "test_hf: note: %s absent, round trip skipped\n", path);
    }
}

/* gemma3: Gemma3TextConfig members, the converter's defaults and keys, the
 * norm shift on both name maps, the multimodal and Gemma 2 refusals */
static void
test_gemma3(void)
{
    static const char cfg[] =
        "{\"architectures\": [\"Gemma3ForCausalLM\"], \"model_type\": \"gemma3_text\","
        " \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 3,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"sliding_window\": 512,"
        " \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0,"
        " \"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_theta\": 20000.0}},"
        " \"final_logit_softcapping\": 30.0, \"query_pre_attn_scalar\": 256}";
    static const char *const order[] = {
        "general.architecture", "general.type", "gemma3.block_count", "gemma3.context_length",
        "gemma3.embedding_length", "gemma3.feed_forward_length", "gemma3.attention.head_count",
        "gemma3.attention.head_count_kv", "gemma3.rope.scaling.type", "gemma3.rope.scaling.factor",
        "gemma3.rope.freq_base", "gemma3.rope.freq_base_swa",
        "gemma3.attention.layer_norm_rms_epsilon", "gemma3.attention.key_length",
        "gemma3.attention.value_length", "gemma3.final_logit_softcapping",
        "gemma3.attention.sliding_window", "general.file_type", "general.quantization_version",
        NULL};
    struct hf_config c;
    struct hf_tensor_map m;
    struct gguf g;
    struct diag d;
    double x;
    uint64_t u;
    char buf[512];

    CHECK_EQ(hf_config_parse(&c, cfg, strlen(cfg), &d), 0);
    CHECK_EQ(c.arch, HF_ARCH_GEMMA3);
    CHECK_STR(c.arch_name, "gemma3");
    CHECK_EQ(c.head_dim, 256);          /* Gemma3TextConfig's default, not 64 / 4 */
    CHECK_EQ(c.n_ctx, 131072);
    CHECK(c.rope_theta == 1e6 && c.rope_theta_swa == 20000.0);
    CHECK(c.rope.type == HF_ROPE_LINEAR && c.rope.factor == 8.0);
    CHECK(c.final_logit_softcap == 30.0);
    CHECK_EQ(c.sliding_window, 512);
    CHECK(!c.permute_qk);
    CHECK_EQ(hf_layer_tensors_required(&c), 13);
    {
        /* no layer_types: llama.cpp's pattern, every 6th layer global */
        json_t *o = NULL;
        CHECK_EQ(hf_config_to_json(&c, NULL, &o, &d), 0);
        char *lt = json_dumps(json_object_get(o, "layer_types"), JSON_COMPACT);
        CHECK_STR(lt ? lt : "", "[\"sliding_attention\",\"sliding_attention\",\"sliding_attention\"]");
        CHECK(json_integer_value(json_object_get(o, "query_pre_attn_scalar")) == 256);
        free(lt);
        json_decref(o);
    }
    gguf_init(&g);
    CHECK_EQ(hf_config_to_gguf(&g, &c, 0, &d), 0);
    check_keys(&g, order);
    CHECK_EQ(gguf_get_uint(&g, "gemma3.attention.key_length", &u, &d), 0);
    CHECK_EQ(u, 256);
    CHECK_EQ(gguf_get_float(&g, "gemma3.rope.freq_base_swa", &x, &d), 0);
    CHECK(x == 20000.0);
    gguf_release(&g);

    CHECK_EQ(hf_name_to_gguf(&c, "model.layers.2.pre_feedforward_layernorm.weight", &m, &d), 1);
    CHECK_STR(m.name, "blk.2.ffn_norm.weight");
    CHECK(m.shift == 1.0f);
    CHECK_EQ(hf_name_to_gguf(&c, "model.layers.0.self_attn.k_norm.weight", &m, &d), 1);
    CHECK(m.shift == 1.0f);
    CHECK_EQ(hf_name_to_gguf(&c, "model.norm.weight", &m, &d), 1);
    CHECK_STR(m.name, "output_norm.weight");
    CHECK(m.shift == 1.0f);
    CHECK_EQ(hf_name_from_gguf(&c, "blk.1.post_ffw_norm.weight", &m, &d), 1);
    CHECK_STR(m.name, "model.layers.1.post_feedforward_layernorm.weight");
    CHECK(m.shift == -1.0f);
    CHECK_EQ(hf_name_to_gguf(&c, "model.layers.1.self_attn.q_proj.weight", &m, &d), 1);
    CHECK(m.shift == 0.0f && m.perm == HF_PERM_NONE);

    /* sliding_window_pattern 1: no window key; Gemma 2's softcap refused */
    snprintf(buf, sizeof(buf), "%.*s, \"sliding_window_pattern\": 1}", (int)strlen(cfg) - 1, cfg);
    CHECK_EQ(hf_config_parse(&c, buf, strlen(buf), &d), 0);
    CHECK_EQ(c.sliding_window, 0);
    snprintf(buf, sizeof(buf), "%.*s, \"attn_logit_softcapping\": 50.0}", (int)strlen(cfg) - 1, cfg);
    CHECK_EQ(hf_config_parse(&c, buf, strlen(buf), &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "attn_logit_softcapping") != NULL);
    CHECK_EQ(hf_config_parse(&c, "{\"architectures\": [\"Gemma3ForConditionalGeneration\"],"
                             " \"model_type\": \"gemma3\", \"text_config\": {}}", 96, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "multimodal") != NULL);
}

int
main(void)
{
    test_permute();
    test_names();
    test_config();
    test_config_errors();
    test_rope();
    test_vocab_gpt2();
    test_vocab_llama3();
    test_vocab_llama_hf();
    test_spm();
    test_pre();
    test_roundtrips();
    test_raw_bpe_refused();
    test_gemma3();
    T_DONE();
}
