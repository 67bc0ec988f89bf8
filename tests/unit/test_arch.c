/*
 * test_arch.c - the architecture table and its readers (arch.h), and the
 * pre-tokenizer table (tok_pre.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "arch.h"
#include "gguf.h"
#include "t.h"
#include "tok_pre.h"

#define MSG_HAS(d, s) do { t_checks++; if (!strstr((d).msg, (s))) { t_fail++; \
    fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, (d).msg, (s)); } \
    } while (0)

/* ---- the table ---- */

static void
test_table(void)
{
    const struct arch *a = arch_find("llama"), *q = arch_find("qwen2"), *g = arch_find("gemma3");
    const struct arch *q3 = arch_find("qwen3");
    const struct arch_tensor *t, *u;
    int id, n;

    /* every key: a GGUF name or a config.json spelling, a sane range */
    for (id = 0; id < ARCH_HP_COUNT; id++) {
        const struct arch_key *k = &arch_keys[id];
        CHECK(k->gguf || k->hf);
        CHECK(k->lo <= k->hi);
        CHECK(k->off < sizeof(struct arch_hparams));
        if (k->hf)
            CHECK(k->hf[0].name && k->hf[0].only == 0);   /* the usual spelling is always read */
    }
    CHECK_STR(arch_keys[ARCH_HP_BLOCK_COUNT].gguf, "block_count");
    CHECK_STR(arch_keys[ARCH_HP_HEAD_COUNT_KV].hf[0].name, "num_key_value_heads");

    CHECK(a && a->id == ARCH_ID_LLAMA && a->recipe == ARCH_RECIPE_LLAMA);
    CHECK(a && (a->flags & ARCH_F_CONVERT) && a->hf_permute_qk && !a->hf_attn_bias);
    CHECK(q && q->recipe == ARCH_RECIPE_LLAMA && (q->flags & ARCH_F_CONVERT) && !q->hf_permute_qk &&
          q->rope_neox && q->hf_attn_bias);
    CHECK(q3 && q3->id == ARCH_ID_QWEN3 && q3->recipe == ARCH_RECIPE_LLAMA && q3->rope_neox &&
          !q3->hf_permute_qk && !q3->hf_attn_bias);
    CHECK(!a->rope_neox && g->rope_neox);
    CHECK(g && g->recipe == ARCH_RECIPE_GEMMA3 && (g->flags & ARCH_F_CONVERT) && g->swa_period == 6);
    CHECK(!arch_find("mamba") && !arch_find(NULL) && !arch_find("deepseek3"));
    const struct arch *ds = arch_find("deepseek2");
    CHECK(ds && ds->id == ARCH_ID_DEEPSEEK2 && ds->recipe == ARCH_RECIPE_DEEPSEEK2 &&
          !(ds->flags & ARCH_F_CONVERT) && ds->tensors);
    CHECK(ds && (ds->gguf_required & ARCH_BIT(ARCH_HP_KV_LORA_RANK)) &&
          !(ds->gguf_required & ARCH_BIT(ARCH_HP_Q_LORA_RANK)) &&
          (ds->keys & ARCH_BIT(ARCH_HP_KEY_LENGTH_MLA)) &&
          (ds->keys & ARCH_BIT(ARCH_HP_LEADING_DENSE)));
    CHECK(arch_get(ARCH_ID_QWEN2) == q && !arch_get(ARCH_ID_NONE));
    CHECK((a->gguf_required & ARCH_BIT(ARCH_HP_RMS_EPS)) &&
          !(a->hf_required & ARCH_BIT(ARCH_HP_RMS_EPS)));
    CHECK((a->keys & a->gguf_required) == a->gguf_required);
    CHECK(!(a->keys & ARCH_BIT(ARCH_HP_SLIDING_WINDOW)) &&
          (g->keys & ARCH_BIT(ARCH_HP_SLIDING_WINDOW)));

    /* HF classes */
    CHECK(arch_find_hf("MistralForCausalLM", NULL)->arch == ARCH_ID_LLAMA);
    CHECK_EQ(arch_find_hf("MistralForCausalLM", NULL)->default_ctx, 131072);
    CHECK_STR(arch_find_hf(NULL, "qwen2")->hf_class, "Qwen2ForCausalLM");
    CHECK_STR(arch_find_hf(NULL, "llama")->hf_class, "LlamaForCausalLM");
    CHECK(!arch_find_hf("GPT2LMHeadModel", "llama"));   /* the class decides when given */
    CHECK(!arch_find_hf(NULL, NULL));
    CHECK_STR(arch_hf_of(ARCH_ID_LLAMA)->hf_class, "LlamaForCausalLM");
    CHECK_STR(arch_hf_of(ARCH_ID_QWEN2)->model_type, "qwen2");

    /* tensors: unique names, Q/K permutation only on q/k, HF names for all but rope_freqs */
    n = 0;
    for (t = a->tensors; t->gguf; t++, n++) {
        for (u = t + 1; u->gguf; u++) {
            CHECK(strcmp(t->gguf, u->gguf) != 0);
            CHECK(!t->hf || !u->hf || strcmp(t->hf, u->hf) != 0);
        }
        if (t->flags & (ARCH_T_PERM_Q | ARCH_T_PERM_K))
            CHECK(t->w == ARCH_W_ATTN_Q || t->w == ARCH_W_ATTN_K || t->w == ARCH_W_ATTN_Q_BIAS ||
                  t->w == ARCH_W_ATTN_K_BIAS);
        CHECK(t->hf || t->w == ARCH_W_ROPE_FREQS);
        if (t->flags & ARCH_T_MATRIX)
            CHECK(t->rows != ARCH_DIM_1);
        else
            CHECK(t->rows == ARCH_DIM_1);
    }
    CHECK_EQ(n, 20);
    /* qwen2: llama's without rope_freqs and the output/FFN biases (15);
     * qwen3: and the QK norms (17), one head wide and required */
    for (int which = 0; which < 2; which++) {
        const struct arch *x = which ? q3 : q;
        n = 0;
        for (t = x->tensors; t->gguf; t++, n++) {
            for (u = t + 1; u->gguf; u++)
                CHECK(strcmp(t->gguf, u->gguf) != 0 && strcmp(t->hf, u->hf) != 0);
            CHECK(!(t->flags & (ARCH_T_PERM_Q | ARCH_T_PERM_K)));
            CHECK(t->w != ARCH_W_ATTN_OUT_BIAS && t->w != ARCH_W_FFN_DOWN_BIAS);
            if (t->w == ARCH_W_ATTN_Q_NORM || t->w == ARCH_W_ATTN_K_NORM)
                CHECK(which && t->cols == ARCH_DIM_HEAD && (t->flags & ARCH_T_REQUIRED));
        }
        CHECK_EQ(n, which ? 17 : 15);
    }
    /* gemma3: llama.cpp's 16 (the norms as F32 vectors, the QK norms one head wide) */
    n = 0;
    for (t = g->tensors; t->gguf; t++, n++) {
        for (u = t + 1; u->gguf; u++)
            CHECK(strcmp(t->gguf, u->gguf) != 0 && strcmp(t->hf, u->hf) != 0);
        CHECK(!(t->flags & (ARCH_T_PERM_Q | ARCH_T_PERM_K)));
        CHECK((t->flags & ARCH_T_MATRIX) ? t->rows != ARCH_DIM_1 : t->rows == ARCH_DIM_1);
        if (t->w == ARCH_W_ATTN_Q_NORM || t->w == ARCH_W_ATTN_K_NORM)
            CHECK(t->cols == ARCH_DIM_HEAD && (t->flags & ARCH_T_REQUIRED));
    }
    CHECK_EQ(n, 16);
}

/* ---- GGUF ---- */

/* A llama header: 2 layers, 64 wide, 4 heads, 2 K/V heads. */
static void
llama_header(struct gguf *g, const char *arch)
{
    char k[128];

    gguf_init(g);
    gguf_set_str(g, "general.architecture", arch);
#define U32(s, v) (snprintf(k, sizeof(k), "%s." s, arch), gguf_set_u32(g, k, v))
    U32("block_count", 2);
    U32("context_length", 256);
    U32("embedding_length", 64);
    U32("feed_forward_length", 128);
    U32("attention.head_count", 4);
    U32("attention.head_count_kv", 2);
#undef U32
    snprintf(k, sizeof(k), "%s.attention.layer_norm_rms_epsilon", arch);
    gguf_set_f32(g, k, 1e-5f);
}

static void
test_gguf(void)
{
    struct arch_hparams hp;
    struct gguf g;
    struct diag d;
    uint32_t arr[3] = { 2, 1, 2 };
    uint8_t mask[2] = { 1, 0 };

    /* a plain llama: llama.cpp's defaults */
    llama_header(&g, "llama");
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK(hp.arch == arch_find("llama") && hp.src == ARCH_SRC_GGUF);
    CHECK_STR(hp.name, "llama");
    CHECK(arch_has(&hp, ARCH_HP_BLOCK_COUNT) && !arch_has(&hp, ARCH_HP_KEY_LENGTH));
    CHECK_STR(hp.key[ARCH_HP_HEAD_COUNT], "llama.attention.head_count");
    CHECK_EQ(arch_check_types(&hp, &d), 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), 0);
    CHECK_EQ(hp.n_layer, 2);
    CHECK_EQ(hp.n_head_kv, 2);
    CHECK_EQ(hp.head_dim, 16);
    CHECK_EQ(hp.head_dim_v, 16);
    CHECK_EQ(hp.n_rot, 16);
    CHECK_NEAR(hp.rope_freq_base, 10000, 0);
    CHECK_NEAR(hp.rms_eps, 1e-5f, 0);
    CHECK_EQ(arch_dim(&hp, ARCH_DIM_Q), 64);
    CHECK_EQ(arch_dim(&hp, ARCH_DIM_K), 32);
    CHECK_EQ(arch_dim(&hp, ARCH_DIM_ROT_HALF), 8);
    gguf_release(&g);

    /* a missing required key, named as the file spells it */
    gguf_init(&g);
    gguf_set_str(&g, "general.architecture", "llama");
    gguf_set_u32(&g, "llama.block_count", 2);
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "missing key 'llama.context_length'");
    gguf_release(&g);

    /* another integer type: read, but not llama.cpp's */
    llama_header(&g, "llama");
    gguf_set_u64(&g, "llama.block_count", 2);
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK_EQ(hp.n_layer, 2);
    CHECK_EQ(arch_check_types(&hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "key 'llama.block_count': wrong type u64, expected uint32");
    gguf_release(&g);

    /* a string where a count belongs, a range, heads that do not divide */
    llama_header(&g, "llama");
    gguf_set_str(&g, "llama.embedding_length", "64");
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "key 'llama.embedding_length' has type str, expected an unsigned integer");
    gguf_release(&g);
    llama_header(&g, "llama");
    gguf_set_u32(&g, "llama.block_count", 5000);
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), -ST_FORMAT);
    MSG_HAS(d, "'llama.block_count': value 5000 out of range [1, 4096]");
    gguf_release(&g);
    llama_header(&g, "llama");
    gguf_set_u32(&g, "llama.attention.head_count_kv", 3);
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "'llama.attention.head_count_kv' (3) does not divide "
                     "'llama.attention.head_count' (4)");
    gguf_release(&g);
    llama_header(&g, "llama");
    gguf_set_str(&g, "llama.rope.scaling.type", "bogus");
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), -ST_FORMAT);
    MSG_HAS(d, "unknown value 'bogus'");
    gguf_release(&g);

    /* per-layer arrays: the largest value, whether they differ, their length */
    llama_header(&g, "llama");
    gguf_set_arr(&g, "llama.attention.head_count_kv", GGUF_TYPE_UINT32, arr, 2);
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK_EQ(hp.n_head_kv, 2);
    CHECK(hp.varies & ARCH_BIT(ARCH_HP_HEAD_COUNT_KV));
    CHECK_EQ(arch_hp_layer(&hp, ARCH_HP_HEAD_COUNT_KV, 1), 1);
    CHECK_EQ(arch_hp_layer(&hp, ARCH_HP_HEAD_COUNT, 1), 4);
    gguf_set_arr(&g, "llama.attention.head_count_kv", GGUF_TYPE_UINT32, arr, 3);
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "'llama.attention.head_count_kv' has 3 entries for 2 layers");
    gguf_release(&g);

    /* keys llama.cpp does not read for llama are not read (whatever they
     * hold), but are for KV accounting; an unknown architecture has none */
    llama_header(&g, "llama");
    gguf_set_str(&g, "llama.attention.sliding_window", "x");
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK(!arch_has(&hp, ARCH_HP_SLIDING_WINDOW));
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), -ST_FORMAT);
    gguf_set_u32(&g, "llama.attention.sliding_window", 4096);
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), 0);
    CHECK_EQ(hp.sliding_window, 4096);
    CHECK_EQ(hp.n_swa_layers, 2);                  /* no pattern: every layer */
    CHECK(!arch_has(&hp, ARCH_HP_RMS_EPS));        /* not part of the KV geometry */
    gguf_release(&g);
    llama_header(&g, "mamba");
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), 0);
    CHECK(!hp.arch && hp.has == 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "unknown architecture 'mamba'");
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), 0);
    CHECK_EQ(hp.n_layer, 2);
    gguf_release(&g);

    /* sliding windows: the family's pattern, the file's period or mask */
    llama_header(&g, "gemma3");
    gguf_set_u32(&g, "gemma3.block_count", 18);
    gguf_set_u32(&g, "gemma3.attention.sliding_window", 512);
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), 0);
    CHECK_EQ(hp.n_swa_layers, 15);                 /* every 6th layer global */
    CHECK(arch_swa_layer(&hp, 0) && !arch_swa_layer(&hp, 5) && arch_swa_layer(&hp, 6));
    gguf_set_u32(&g, "gemma3.attention.sliding_window_pattern", 3);
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), 0);
    CHECK_EQ(hp.n_swa_layers, 12);
    gguf_set_u32(&g, "gemma3.block_count", 2);
    gguf_set_arr(&g, "gemma3.attention.sliding_window_pattern", GGUF_TYPE_BOOL, mask, 2);
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), 0);
    CHECK_EQ(hp.n_swa_layers, 1);
    CHECK(arch_swa_layer(&hp, 0) && !arch_swa_layer(&hp, 1));
    /* a mask of another length, a period of 0 or of another type: bad data */
    gguf_set_u32(&g, "gemma3.block_count", 3);
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "has 2 entries for 3 layers") != NULL);
    gguf_set_u32(&g, "gemma3.attention.sliding_window_pattern", 0);
    CHECK_EQ(arch_read_hparams(&g, ARCH_READ_KV, &hp, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "period 0 out of range") != NULL);
    gguf_set_str(&g, "gemma3.attention.sliding_window_pattern", "6");
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), -ST_FORMAT);
    gguf_release(&g);

    /* the architecture is required */
    gguf_init(&g);
    CHECK_EQ(arch_read_hparams(&g, 0, &hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "missing key 'general.architecture'");
    gguf_release(&g);
}

/* ---- config.json ---- */

static int
read_cfg(const char *text, unsigned flags, struct arch_hparams *hp, json_t **root,
         struct diag *d)
{
    json_error_t err;

    *root = json_loads(text, 0, &err);
    if (!*root) {
        fprintf(stderr, "bad test JSON: %s\n", err.text);
        return -1;
    }
    return arch_read_config(*root, flags, hp, d);
}

static void
test_config(void)
{
    struct arch_hparams hp;
    struct diag d;
    json_t *j;

    /* a llama config: transformers' defaults, keys named as spelled */
    CHECK_EQ(read_cfg("{\"architectures\":[\"MistralForCausalLM\"],\"hidden_size\":64,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":128,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2}", 0, &hp, &j, &d), 0);
    CHECK(hp.arch == arch_find("llama") && hp.src == ARCH_SRC_CONFIG);
    CHECK_STR(hp.hf_class, "MistralForCausalLM");
    CHECK_EQ(arch_check_hparams(&hp, &d), 0);
    CHECK_EQ(hp.n_ctx_train, 131072);
    CHECK_NEAR(hp.rms_eps, 1e-6, 0);
    CHECK_EQ(hp.head_dim, 16);
    CHECK_EQ(hp.head_dim_v, 16);
    json_decref(j);

    /* the two wordings of a bad count */
    CHECK_EQ(read_cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"num_hidden_layers\":\"2\"}", 0,
                      &hp, &j, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "'num_hidden_layers' is not an integer");
    json_decref(j);
    CHECK_EQ(read_cfg("{\"num_hidden_layers\":\"2\"}", ARCH_READ_KV, &hp, &j, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "'num_hidden_layers' is not a non-negative integer");
    json_decref(j);
    CHECK_EQ(read_cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
                      "\"num_hidden_layers\":2,\"intermediate_size\":128,"
                      "\"num_attention_heads\":5}", 0, &hp, &j, &d), 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "'hidden_size' (64) is not a multiple of 'num_attention_heads' (5)");
    json_decref(j);
    CHECK_EQ(read_cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"num_hidden_layers\":2,"
                      "\"intermediate_size\":128,\"num_attention_heads\":4}", 0, &hp, &j, &d), 0);
    CHECK_EQ(arch_check_hparams(&hp, &d), -ST_FORMAT);
    CHECK_STR(d.msg, "'hidden_size' is missing");
    json_decref(j);

    /* spellings: the converter's (n_ctx) only when converting, other
     * families' (seq_length, num_kv_heads) and multi_query only for KV
     * accounting; an unknown class has nothing read when converting */
    CHECK_EQ(read_cfg("{\"architectures\":[\"LlamaForCausalLM\"],\"n_ctx\":512,"
                      "\"seq_length\":300,\"num_kv_heads\":1,\"multi_query\":true}", 0, &hp, &j,
                      &d), 0);
    CHECK_EQ(hp.n_ctx_train, 512);
    CHECK(!arch_has(&hp, ARCH_HP_HEAD_COUNT_KV));
    CHECK_EQ(arch_read_config(j, ARCH_READ_KV, &hp, &d), 0);
    CHECK_EQ(hp.n_ctx_train, 300);
    CHECK_EQ(hp.n_head_kv, 1);
    json_decref(j);
    CHECK_EQ(read_cfg("{\"architectures\":[\"FalconForCausalLM\"],\"num_hidden_layers\":\"x\"}",
                      0, &hp, &j, &d), 0);
    CHECK(!hp.arch && hp.has == 0);
    CHECK_STR(hp.name, "FalconForCausalLM");
    json_decref(j);

    /* a multimodal config (KV accounting): the text model, its family's
     * sliding-window pattern, MLA keys */
    CHECK_EQ(read_cfg("{\"architectures\":[\"Gemma3ForConditionalGeneration\"],"
                      "\"model_type\":\"gemma3\",\"text_config\":{\"model_type\":\"gemma3_text\","
                      "\"num_hidden_layers\":26,\"sliding_window\":512,\"head_dim\":256}}",
                      ARCH_READ_KV, &hp, &j, &d), 0);
    CHECK(hp.arch == arch_find("gemma3"));
    CHECK_STR(hp.model_type, "gemma3_text");
    CHECK_EQ(hp.n_layer, 26);
    CHECK_EQ(hp.n_swa_layers, 22);
    CHECK_EQ(hp.head_dim, 256);
    json_decref(j);
    CHECK_EQ(read_cfg("{\"model_type\":\"qwen2\",\"num_hidden_layers\":4,\"sliding_window\":64,"
                      "\"use_sliding_window\":false}", ARCH_READ_KV, &hp, &j, &d), 0);
    CHECK_EQ(hp.sliding_window, 0);
    CHECK_EQ(hp.n_swa_layers, 0);
    json_decref(j);
    CHECK_EQ(read_cfg("{\"num_hidden_layers\":4,\"sliding_window\":64,\"layer_types\":"
                      "[\"sliding_attention\",\"full_attention\",\"sliding_attention\","
                      "\"full_attention\"]}", ARCH_READ_KV, &hp, &j, &d), 0);
    CHECK_EQ(hp.n_swa_layers, 2);
    CHECK(arch_swa_layer(&hp, 0) && !arch_swa_layer(&hp, 1) && arch_swa_layer(&hp, 2));
    json_decref(j);
    /* layer_types of another length or with other values, a period <= 0 */
    CHECK_EQ(read_cfg("{\"num_hidden_layers\":3,\"sliding_window\":64,\"layer_types\":"
                      "[\"sliding_attention\",\"full_attention\"]}", ARCH_READ_KV, &hp, &j, &d),
             -ST_FORMAT);
    CHECK(strstr(d.msg, "'layer_types' has 2 entries for 3 layers") != NULL);
    json_decref(j);
    CHECK_EQ(read_cfg("{\"num_hidden_layers\":2,\"sliding_window\":64,\"layer_types\":"
                      "[\"sliding_attention\",\"linear_attention\"]}", ARCH_READ_KV, &hp, &j,
                      &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "'layer_types'[1]") != NULL);
    json_decref(j);
    CHECK_EQ(read_cfg("{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":2,"
                      "\"sliding_window\":64,\"sliding_window_pattern\":0}", ARCH_READ_KV, &hp,
                      &j, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "'sliding_window_pattern' = 0") != NULL);
    json_decref(j);
    CHECK_EQ(read_cfg("{\"model_type\":\"deepseek_v2\",\"kv_lora_rank\":512,"
                      "\"qk_rope_head_dim\":64,\"v_head_dim\":128}", ARCH_READ_KV, &hp, &j, &d), 0);
    CHECK_EQ(hp.kv_lora_rank, 512);
    CHECK_EQ(hp.n_rot, 64);
    CHECK_EQ(hp.head_dim_v_mla, 128);
    CHECK_STR(hp.key[ARCH_HP_ROPE_DIM], "qk_rope_head_dim");
    json_decref(j);
}

/* ---- pre-tokenizers ---- */

static void
test_pre(void)
{
    static const char *const known[] = { "default", "llama-bpe", "llama3", "dbrx", "glm4",
        "deepseek-coder", "falcon", "gpt-2", "exaone4", "trillion", "starcoder", "smollm",
        "qwen2", "hunyuan", "stablelm2", "megrez", "qwen35", "tekken", "gpt-4o", "minicpm5" };
    const struct tok_pre *p, *s;
    const struct tok_pre_hf *h;
    size_t i;

    for (i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        p = tok_pre_find(known[i]);
        CHECK(p && p->re[0]);
        if (p && p->hf)
            CHECK(tok_pre_find(p->hf->name) && tok_pre_find(p->hf->name)->hf == p->hf);
    }
    CHECK(!tok_pre_find("smol") && !tok_pre_find("") && !tok_pre_find(NULL) &&
          !tok_pre_find("smollm command-r"));

    /* llama.cpp's settings and the HF side of one name */
    p = tok_pre_find("smollm");
    s = tok_pre_find("starcoder");
    CHECK(p && s && (p->flags & TOK_PRE_NO_CLEAN) && !(s->flags & TOK_PRE_NO_CLEAN));
    CHECK(p && s && p->hf && p->hf == s->hf);      /* one HF pre_tokenizer, two settings */
    CHECK_STR(p->hf->name, "smollm");
    CHECK_EQ(p->hf->n_steps, 2);
    CHECK_STR(p->re[0], "\\p{N}");
    p = tok_pre_find("llama3");
    CHECK(p && (p->flags & TOK_PRE_ADD_BOS) && (p->flags & TOK_PRE_IGNORE_MERGES));
    CHECK(p && p->hf && p->hf->ignore_merges);
    CHECK_STR(p->hf->name, "llama-bpe");
    CHECK(strstr(p->re[0], TOK_PRE_CONTRACTIONS) == p->re[0]);
    CHECK(strstr(p->hf->steps[0].regex, TOK_PRE_HF_CONTRACTIONS) == p->hf->steps[0].regex);
    CHECK(tok_pre_find("exaone4")->hf == NULL);     /* tokenized; no HF form checked */
    CHECK(tok_pre_find("glm4")->flags & TOK_PRE_NO_BOS);

    /* the HF pre_tokenizers, GPT-2's first */
    CHECK_STR(tok_pre_hf_get(0)->name, "gpt-2");
    for (i = 0; (h = tok_pre_hf_get(i)); i++) {
        CHECK(h->n_steps >= 1 && h->n_steps <= TOK_PRE_HF_MAX_STEPS);
        CHECK(h->ignore_merges == !strcmp(h->name, "llama-bpe"));
    }
    CHECK_EQ(i, 7);
}

int
main(void)
{
    test_table();
    test_gguf();
    test_config();
    test_pre();
    T_DONE();
}
