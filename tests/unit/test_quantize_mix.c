/*
 * test_quantize_mix.c - llama-quantize's per-tensor rules (quantize_mix.c) on
 * synthetic model descriptions: layer maps as llama-quantize writes them
 * (src/llama-quant.cpp llama_tensor_get_type_impl), shape fallbacks
 * (tensor_type_fallback), overrides, tensor order.
 */
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "qtypes.h"
#include "quantize.h"
#include "t.h"

#define MAXT 512

struct model_desc {
    int n_layer, n_embd, n_ff, n_head, n_head_kv;
    bool tied;
};

static void
add(struct gguf *g, const char *name, int64_t ne0, int64_t ne1)
{
    int64_t ne[4] = { ne0, ne1, 1, 1 };
    gguf_add_tensor(g, name, GGML_TYPE_F32, ne1 > 1 ? 2 : 1, ne, NULL, NULL);
}

static void
build(struct gguf *g, const struct model_desc *m)
{
    char n[64];
    int hd = m->n_embd / m->n_head;

    gguf_init(g);
    gguf_set_str(g, "general.architecture", "llama");
    gguf_set_u32(g, "llama.block_count", (uint32_t)m->n_layer);
    gguf_set_u32(g, "llama.attention.head_count", (uint32_t)m->n_head);
    gguf_set_u32(g, "llama.attention.head_count_kv", (uint32_t)m->n_head_kv);
    add(g, "token_embd.weight", m->n_embd, 1000);
    if (!m->tied)
        add(g, "output.weight", m->n_embd, 1000);
    add(g, "output_norm.weight", m->n_embd, 1);
    for (int l = 0; l < m->n_layer; l++) {
#define T(s, a, b) snprintf(n, sizeof(n), "blk.%d." s, l), add(g, n, a, b)
        T("attn_norm.weight", m->n_embd, 1);
        T("attn_q.weight", m->n_embd, m->n_embd);
        T("attn_k.weight", m->n_embd, m->n_head_kv * hd);
        T("attn_v.weight", m->n_embd, m->n_head_kv * hd);
        T("attn_output.weight", m->n_embd, m->n_embd);
        T("ffn_norm.weight", m->n_embd, 1);
        T("ffn_gate.weight", m->n_embd, m->n_ff);
        T("ffn_up.weight", m->n_embd, m->n_ff);
        T("ffn_down.weight", m->n_ff, m->n_embd);
#undef T
    }
}

struct typed {
    char name[64];
    int type;
    bool fb;
};

static int
cmp_name(const void *a, const void *b)
{
    return quant_layer_cmp(((const struct typed *)a)->name, ((const struct typed *)b)->name);
}

/* Types every tensor of m in llama.cpp's order; returns the count. */
static int
type_all(const struct model_desc *m, const struct quant_mix_opts *o, struct typed *out)
{
    struct gguf g;
    struct quant_mix mix;
    struct diag d;
    int n;

    build(&g, m);
    n = (int)g.n_tensors;
    for (int i = 0; i < n; i++)
        snprintf(out[i].name, sizeof(out[i].name), "%s", g.t[i].name.p);
    qsort(out, (size_t)n, sizeof(*out), cmp_name);
    if (quant_mix_init(&mix, &g, o, &d) < 0) {
        fprintf(stderr, "quant_mix_init: %s\n", d.msg);
        gguf_release(&g);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int64_t k = gguf_find_tensor(&g, out[i].name);
        const struct gguf_tensor *t = &g.t[k];
        out[i].type = quant_mix_type(&mix, t->name.p, t->type, t->n_dims, t->ne, &out[i].fb, &d);
    }
    quant_mix_release(&mix);
    gguf_release(&g);
    return n;
}

static const char *
type_of(const struct typed *ts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].name, name))
            return ts[i].type >= 0 ? qtype_get((uint32_t)ts[i].type)->name : "error";
    return "absent";
}

/* "QA,QB,..." for tensor suffix s of each layer */
static void
layer_map(const struct typed *ts, int n, int n_layer, const char *s, char *out, size_t cap)
{
    char name[64];

    out[0] = 0;
    for (int l = 0; l < n_layer; l++) {
        snprintf(name, sizeof(name), "blk.%d.%s", l, s);
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", l ? "," : "", type_of(ts, n, name));
    }
}

static struct quant_mix_opts
opts(const char *ftype)
{
    struct quant_mix_opts o;
    memset(&o, 0, sizeof(o));
    o.ftype = quant_ftype_find(ftype)->ftype;
    o.output_type = -1;
    o.embd_type = -1;
    return o;
}

int
main(void)
{
    static struct typed ts[MAXT];
    struct model_desc m16 = { 16, 256, 512, 8, 8, false };
    struct model_desc smol = { 4, 576, 1536, 9, 3, true };
    struct quant_mix_opts o;
    char map[1024];
    int n;

    /* file type names */
    CHECK_EQ(quant_ftype_find("q4_k_m")->ftype, 15);
    CHECK_EQ(quant_ftype_find("Q4_K")->ftype, 15);
    CHECK_EQ(quant_ftype_find("Q3_K")->ftype, 12);
    CHECK_EQ(quant_ftype_find("Q5_K")->ftype, 17);
    CHECK_EQ(quant_ftype_find("7")->ftype, 7);
    CHECK(quant_ftype_find("Q4_K_X") == NULL);
    CHECK(quant_ftype_find("99") == NULL);
    CHECK(quant_ftype_find("") == NULL);
    CHECK_EQ(quant_tensor_type_parse("q6_k"), GGML_TYPE_Q6_K);
    CHECK_EQ(quant_tensor_type_parse("Q8_1"), -1);
    CHECK_EQ(quant_tensor_type_parse("IQ2_XXS"), -1);

    /* which tensors, which order */
    CHECK(quant_tensor_allowed("blk.0.attn_q.weight", 2, false));
    CHECK(!quant_tensor_allowed("blk.0.attn_norm.weight", 2, false));
    CHECK(!quant_tensor_allowed("blk.0.attn_q.bias", 2, false));
    CHECK(!quant_tensor_allowed("blk.0.attn_q.weight", 1, false));
    CHECK(quant_tensor_allowed("output.weight", 2, false));
    CHECK(!quant_tensor_allowed("output.weight", 2, true));
    CHECK(!quant_tensor_allowed("blk.0.ffn_gate_inp.weight", 2, false));
    CHECK(quant_layer_cmp("output.weight", "output_norm.weight") < 0);
    CHECK(quant_layer_cmp("token_embd.weight", "blk.0.attn_k.weight") < 0);
    CHECK(quant_layer_cmp("blk.9.ffn_up.weight", "blk.10.attn_k.weight") < 0);
    CHECK(quant_layer_cmp("blk.2.attn_v.weight", "blk.2.attn_q.weight") > 0);

    /* 16 layers, 256 wide, untied, n_gqa 1 (llama-quantize's layer maps) */
    o = opts("Q4_K_M");
    n = type_all(&m16, &o, ts);
    CHECK_EQ(n, 3 + 16 * 9);
    layer_map(ts, n, 16, "attn_v.weight", map, sizeof(map));
    CHECK_STR(map, "Q6_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q6_K,Q6_K");
    layer_map(ts, n, 16, "ffn_down.weight", map, sizeof(map));
    CHECK_STR(map, "Q6_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q6_K,Q6_K");
    CHECK_STR(type_of(ts, n, "output.weight"), "Q6_K");
    CHECK_STR(type_of(ts, n, "token_embd.weight"), "Q4_K");
    CHECK_STR(type_of(ts, n, "output_norm.weight"), "F32");
    CHECK_STR(type_of(ts, n, "blk.5.ffn_up.weight"), "Q4_K");

    o = opts("Q4_K_S");
    n = type_all(&m16, &o, ts);
    layer_map(ts, n, 16, "attn_v.weight", map, sizeof(map));
    CHECK_STR(map, "Q5_K,Q5_K,Q5_K,Q5_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K");
    layer_map(ts, n, 16, "ffn_down.weight", map, sizeof(map));
    CHECK_STR(map, "Q5_K,Q5_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K");

    o = opts("Q3_K_M");
    n = type_all(&m16, &o, ts);
    layer_map(ts, n, 16, "attn_v.weight", map, sizeof(map));
    CHECK_STR(map, "Q5_K,Q5_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K");
    layer_map(ts, n, 16, "ffn_down.weight", map, sizeof(map));
    CHECK_STR(map, "Q5_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K,Q4_K");
    CHECK_STR(type_of(ts, n, "blk.3.attn_output.weight"), "Q4_K");
    CHECK_STR(type_of(ts, n, "blk.3.attn_q.weight"), "Q3_K");
    CHECK_STR(type_of(ts, n, "token_embd.weight"), "Q3_K");
    CHECK_STR(type_of(ts, n, "output.weight"), "Q6_K");

    o = opts("Q2_K");
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "blk.0.attn_v.weight"), "Q3_K");     /* n_gqa 1 */
    CHECK_STR(type_of(ts, n, "blk.9.ffn_down.weight"), "Q3_K");
    CHECK_STR(type_of(ts, n, "blk.9.attn_output.weight"), "Q3_K");
    CHECK_STR(type_of(ts, n, "blk.9.ffn_gate.weight"), "Q2_K");
    m16.n_head_kv = 2;      /* n_gqa 4 */
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "blk.0.attn_v.weight"), "Q4_K");
    m16.n_head_kv = 8;

    o = opts("Q4_0");
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "output.weight"), "Q6_K");
    CHECK_STR(type_of(ts, n, "blk.0.ffn_down.weight"), "Q4_0");
    o.has_imatrix = true;
    n = type_all(&m16, &o, ts);
    layer_map(ts, n, 4, "ffn_down.weight", map, sizeof(map));
    CHECK_STR(map, "Q4_1,Q4_1,Q4_0,Q4_0");

    o = opts("Q8_0");
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "output.weight"), "Q8_0");
    CHECK_STR(type_of(ts, n, "blk.1.attn_v.weight"), "Q8_0");

    o = opts("F16");        /* not quantized: no mix, no fallback; norms stay */
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "output.weight"), "F16");
    CHECK_STR(type_of(ts, n, "blk.1.attn_norm.weight"), "F32");

    /* SmolLM2-like: 576 wide, tied, 3 KV heads (576 % 256 != 0: tensor_type_fallback) */
    o = opts("Q4_K_M");
    n = type_all(&smol, &o, ts);
    CHECK_STR(type_of(ts, n, "token_embd.weight"), "Q8_0");
    CHECK_STR(type_of(ts, n, "blk.0.attn_q.weight"), "Q5_0");
    CHECK_STR(type_of(ts, n, "blk.0.ffn_gate.weight"), "Q5_0");
    layer_map(ts, n, 4, "attn_v.weight", map, sizeof(map));
    CHECK_STR(map, "Q5_0,Q5_0,Q8_0,Q8_0");
    layer_map(ts, n, 4, "ffn_down.weight", map, sizeof(map));
    CHECK_STR(map, "Q4_K,Q4_K,Q6_K,Q6_K");
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].name, "blk.0.attn_q.weight"))
            CHECK(ts[i].fb);
    o = opts("Q3_K_M");
    n = type_all(&smol, &o, ts);
    layer_map(ts, n, 4, "attn_v.weight", map, sizeof(map));
    CHECK_STR(map, "Q5_1,Q5_1,Q5_0,Q5_0");
    CHECK_STR(type_of(ts, n, "blk.2.attn_output.weight"), "Q5_0");
    CHECK_STR(type_of(ts, n, "blk.2.attn_k.weight"), "Q4_0");
    CHECK_STR(type_of(ts, n, "blk.2.ffn_down.weight"), "Q4_K");
    o = opts("Q6_K");
    n = type_all(&smol, &o, ts);
    CHECK_STR(type_of(ts, n, "token_embd.weight"), "Q8_0");
    CHECK_STR(type_of(ts, n, "blk.2.ffn_up.weight"), "Q8_0");

    /* rows of 48: no 32-element block fits -> F16 */
    {
        struct model_desc odd = { 2, 48, 96, 4, 4, true };
        o = opts("Q4_K_M");
        n = type_all(&odd, &o, ts);
        CHECK_STR(type_of(ts, n, "blk.0.attn_q.weight"), "F16");
        CHECK_STR(type_of(ts, n, "blk.0.ffn_down.weight"), "Q5_0");  /* 96 = 3 x 32 */
    }

    /* overrides: pure, --tensor-type (first match wins, then the fallback), output/embd types */
    o = opts("Q4_K_M");
    o.pure = true;
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "output.weight"), "Q4_K");
    CHECK_STR(type_of(ts, n, "blk.0.attn_v.weight"), "Q4_K");
    o.pure = false;
    {
        struct quant_override ov[2] = { { "attn_[vk]", GGML_TYPE_Q8_0 }, { "ATTN", GGML_TYPE_Q6_K } };
        o.ov = ov;
        o.n_ov = 2;
        n = type_all(&m16, &o, ts);
        CHECK_STR(type_of(ts, n, "blk.4.attn_v.weight"), "Q8_0");
        CHECK_STR(type_of(ts, n, "blk.4.attn_k.weight"), "Q8_0");
        CHECK_STR(type_of(ts, n, "blk.4.attn_q.weight"), "Q6_K");  /* pattern lower-cased */
        CHECK_STR(type_of(ts, n, "blk.4.ffn_up.weight"), "Q4_K");
        /* attn_v counters do not advance on manual tensors: ffn_down keeps its map */
        layer_map(ts, n, 16, "ffn_down.weight", map, sizeof(map));
        CHECK_STR(map, "Q6_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q4_K,Q4_K,Q6_K,Q6_K,Q6_K");
        o.n_ov = 0;
        o.ov = NULL;
    }
    o.output_type = GGML_TYPE_Q8_0;
    o.embd_type = GGML_TYPE_Q4_0;
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "output.weight"), "Q8_0");
    CHECK_STR(type_of(ts, n, "token_embd.weight"), "Q4_0");
    o.output_type = o.embd_type = -1;
    o.keep_output = true;
    n = type_all(&m16, &o, ts);
    CHECK_STR(type_of(ts, n, "output.weight"), "F32");

    /* a bad pattern is refused */
    {
        struct gguf g;
        struct quant_mix mix;
        struct diag d;
        struct quant_override bad = { "(", GGML_TYPE_Q8_0 };
        o = opts("Q4_0");
        o.ov = &bad;
        o.n_ov = 1;
        build(&g, &m16);
        CHECK_EQ(quant_mix_init(&mix, &g, &o, &d), -ST_RANGE);
        gguf_release(&g);
    }
    T_DONE();
}
