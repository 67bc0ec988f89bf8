/*
 * convert_l2c.c - llama2.c legacy checkpoint (+ tokenizer.bin) -> GGUF, and
 * --info for llama2.c checkpoints.  Mapping as llama.cpp's
 * examples/convert-llama2c-to-ggml: weights are already in Meta's
 * interleaved RoPE order, so no permutation; the vocabulary becomes a
 * SentencePiece-style ("llama") vocabulary with ids 0/1/2 forced to
 * <unk>/<s>/</s>, spaces turned into U+2581, byte pieces typed BYTE.
 */
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "convert_priv.h"
#include "escape.h"
#include "gguf.h"
#include "gguf_write.h"
#include "json.h"
#include "llama2c.h"
#include "qtypes.h"

#define TT_NORMAL 1
#define TT_UNKNOWN 2
#define TT_CONTROL 3
#define TT_BYTE 6

static const char *const l2c_gguf_name[LLAMA2C_KIND_COUNT] = {
    [LLAMA2C_TOKEN_EMBEDDING] = "token_embd.weight",
    [LLAMA2C_RMS_ATT] = "attn_norm.weight",
    [LLAMA2C_WQ] = "attn_q.weight",
    [LLAMA2C_WK] = "attn_k.weight",
    [LLAMA2C_WV] = "attn_v.weight",
    [LLAMA2C_WO] = "attn_output.weight",
    [LLAMA2C_RMS_FFN] = "ffn_norm.weight",
    [LLAMA2C_W1] = "ffn_gate.weight",
    [LLAMA2C_W2] = "ffn_down.weight",
    [LLAMA2C_W3] = "ffn_up.weight",
    [LLAMA2C_RMS_FINAL] = "output_norm.weight",
    [LLAMA2C_WCLS] = "output.weight",
};

static void
view_name(const struct llama2c_view *v, char *out, size_t n)
{
    if (v->layer < 0)
        snprintf(out, n, "%s", l2c_gguf_name[v->kind]);
    else
        snprintf(out, n, "blk.%d.%s", v->layer, l2c_gguf_name[v->kind]);
}

/* Token text as GGUF stores it: ' ' -> U+2581 (3 bytes). */
static char *
spm_text(const char *p, int32_t len)
{
    size_t n = 0;
    char *out;

    for (int32_t i = 0; i < len; i++)
        n += p[i] == ' ' ? 3 : 1;
    out = malloc(n + 1);
    if (!out)
        return NULL;
    n = 0;
    for (int32_t i = 0; i < len; i++) {
        if (p[i] == ' ') {
            memcpy(out + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            out[n++] = p[i];
        }
    }
    out[n] = '\0';
    return out;
}

static bool
is_byte_piece(const char *p, int32_t len)
{
    static const char hex[] = "0123456789ABCDEF";

    return len == 6 && !memcmp(p, "<0x", 3) && strchr(hex, p[3]) && strchr(hex, p[4]) && p[5] == '>' &&
           p[3] && p[4];
}

static int
l2c_vocab_to_gguf(struct gguf *g, const struct llama2c_vocab *v, struct diag *d)
{
    char **toks = calloc((size_t)v->n, sizeof(char *));
    uint64_t *lens = calloc((size_t)v->n, sizeof(uint64_t));
    int32_t *types = calloc((size_t)v->n, sizeof(int32_t));
    int rc = 0;

    if (!toks || !lens || !types) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    for (int32_t i = 0; i < v->n; i++) {
        const char *fixed = i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : NULL;
        toks[i] = fixed ? strdup(fixed) : spm_text(v->text[i], v->len[i]);
        if (!toks[i]) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        lens[i] = strlen(toks[i]);
        if (fixed)
            types[i] = i == 0 ? TT_UNKNOWN : TT_CONTROL;
        else if (v->len[i] == 0)
            types[i] = TT_CONTROL;
        else if (is_byte_piece(v->text[i], v->len[i]))
            types[i] = TT_BYTE;
        else
            types[i] = TT_NORMAL;
    }
    if (gguf_set_str(g, "tokenizer.ggml.model", "llama") ||
        gguf_set_str(g, "tokenizer.ggml.pre", "default") ||
        gguf_set_arr_str(g, "tokenizer.ggml.tokens", (const char *const *)toks, lens, (uint64_t)v->n) ||
        gguf_set_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->score, (uint64_t)v->n) ||
        gguf_set_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, (uint64_t)v->n) ||
        gguf_set_u32(g, "tokenizer.ggml.unknown_token_id", 0) ||
        gguf_set_u32(g, "tokenizer.ggml.bos_token_id", 1) ||
        gguf_set_u32(g, "tokenizer.ggml.eos_token_id", 2))
        rc = diag_set(d, ST_NOMEM, "out of memory");
out:
    for (int32_t i = 0; toks && i < v->n; i++)
        free(toks[i]);
    free(toks);
    free(lens);
    free(types);
    return rc;
}

static char *
default_tokenizer_path(const char *model)
{
    char *cp = strdup(model), *p;

    if (!cp)
        return NULL;
    p = path_join(dirname(cp), "tokenizer.bin");
    free(cp);
    return p;
}

int
convert_l2c_to_gguf(const struct convert_opts *o, struct diag *d)
{
    struct llama2c_model m;
    struct llama2c_vocab v;
    struct gguf g;
    struct llama2c_view *views = NULL;
    struct out_tensor *ts = NULL;
    struct gguf_write_opts wo = CONVERT_WRITE_OPTS(o);
    char *tokpath = NULL;
    size_t nv;
    int rc;
    int want = o->out_type < 0 ? GGML_TYPE_F32 : o->out_type;

    memset(&v, 0, sizeof(v));
    gguf_init(&g);
    rc = llama2c_open(&m, o->input, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->input);
        gguf_release(&g);
        return rc;
    }
    tokpath = o->tokenizer ? strdup(o->tokenizer) : default_tokenizer_path(o->input);
    if (!tokpath) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    rc = llama2c_tokenizer_open(&v, tokpath, m.c.vocab_size, d);
    if (rc) {
        diag_prefix(d, "'%s'", tokpath);
        goto out;
    }
    if (gguf_set_str(&g, "general.architecture", "llama") ||
        gguf_set_str(&g, "general.type", "model") ||
        gguf_set_str(&g, "general.name", "llama2.c") ||
        gguf_set_u32(&g, "llama.block_count", (uint32_t)m.c.n_layers) ||
        gguf_set_u32(&g, "llama.context_length", (uint32_t)m.c.seq_len) ||
        gguf_set_u32(&g, "llama.embedding_length", (uint32_t)m.c.dim) ||
        gguf_set_u32(&g, "llama.feed_forward_length", (uint32_t)m.c.hidden_dim) ||
        gguf_set_u32(&g, "llama.attention.head_count", (uint32_t)m.c.n_heads) ||
        gguf_set_u32(&g, "llama.attention.head_count_kv", (uint32_t)m.c.n_kv_heads) ||
        gguf_set_f32(&g, "llama.rope.freq_base", 10000.0f) ||
        gguf_set_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f) ||
        gguf_set_u32(&g, "general.file_type", ftype_for_type(want)) ||
        gguf_set_u32(&g, "llama.vocab_size", (uint32_t)m.c.vocab_size) ||
        gguf_set_u32(&g, "llama.rope.dimension_count", (uint32_t)m.head_size) ||
        gguf_set_u32(&g, "general.quantization_version", 2)) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    if ((rc = l2c_vocab_to_gguf(&g, &v, d))) {
        diag_prefix(d, "'%s'", tokpath);
        goto out;
    }
    nv = llama2c_views(&m, NULL, 0);
    views = calloc(nv, sizeof(*views));
    ts = calloc(nv, sizeof(*ts));
    if (!views || !ts) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory", o->input);
        goto out;
    }
    llama2c_views(&m, views, nv);
    for (size_t i = 0; i < nv; i++) {
        struct out_tensor *t = &ts[i];
        view_name(&views[i], t->name, sizeof(t->name));
        t->ne[0] = views[i].cols;
        t->ne[1] = views[i].rows;
        t->ne[2] = t->ne[3] = 1;
        t->n_dims = views[i].rows > 1 ? 2 : 1;
        t->type = retype_for(t->name, t->ne, GGML_TYPE_F32, want);
        t->src.data = views[i].data;
        t->src.type = GGML_TYPE_F32;
        memcpy(t->src.ne, t->ne, sizeof(t->ne));
    }
    rc = write_gguf_out(&g, ts, nv, NULL, NULL, &wo, d);
out:
    free(views);
    free(ts);
    free(tokpath);
    llama2c_tokenizer_release(&v);
    llama2c_close(&m);
    gguf_release(&g);
    return rc;
}

int
info_l2c(const char *path, bool json, FILE *out, struct diag *d)
{
    struct llama2c_model m;
    struct llama2c_view *views;
    size_t nv;
    uint64_t params = 0;
    int rc = llama2c_open(&m, path, d);

    if (rc)
        return rc;
    nv = llama2c_views(&m, NULL, 0);
    views = calloc(nv, sizeof(*views));
    if (!views) {
        llama2c_close(&m);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    llama2c_views(&m, views, nv);
    if (!json)
        fprintf(out, "%s: llama2.c checkpoint (legacy v0): dim %d, hidden_dim %d, n_layers %d, n_heads %d, "
                     "n_kv_heads %d, vocab_size %d, seq_len %d, %s classifier\n"
                     "tensors:\n  %-5s %-40s %-8s %-24s %14s %12s\n",
                ESC(path), m.c.dim, m.c.hidden_dim, m.c.n_layers, m.c.n_heads, m.c.n_kv_heads, m.c.vocab_size,
                m.c.seq_len, m.c.shared_classifier ? "shared" : "separate", "#", "name", "type", "shape",
                "offset", "bytes");
    for (size_t i = 0; i < nv; i++) {
        char name[64];
        uint64_t off = (uint64_t)((const uint8_t *)views[i].data - (const uint8_t *)m.src->map);
        uint64_t nb = (uint64_t)(views[i].rows * views[i].cols) * 4;
        view_name(&views[i], name, sizeof(name));
        params += (uint64_t)(views[i].rows * views[i].cols);
        if (!json) {
            char shape[48];
            if (views[i].rows > 1)
                snprintf(shape, sizeof(shape), "%" PRId64 " x %" PRId64, views[i].cols, views[i].rows);
            else
                snprintf(shape, sizeof(shape), "%" PRId64, views[i].cols);
            fprintf(out, "  %-5zu %-40s %-8s %-24s %14" PRIu64 " %12" PRIu64 "\n", i, name, "F32", shape, off, nb);
        } else {
            json_t *o = json_object(), *sh = json_array();
            json_array_append_new(sh, json_integer(views[i].cols));
            if (views[i].rows > 1)
                json_array_append_new(sh, json_integer(views[i].rows));
            json_object_set_new(o, "schema", json_string("convert-info/1"));
            json_object_set_new(o, "type", json_string("tensor"));
            json_object_set_new(o, "index", json_integer((json_int_t)i));
            json_object_set_new(o, "name", json_string(name));
            json_object_set_new(o, "source_name", json_string(llama2c_kind_name(views[i].kind)));
            json_object_set_new(o, "ggml_type", json_string("F32"));
            json_object_set_new(o, "shape", sh);
            json_object_set_new(o, "file_offset", json_integer((json_int_t)off));
            json_object_set_new(o, "bytes", json_integer((json_int_t)nb));
            rc = json_print_line(o, out, d);
            json_decref(o);
            if (rc)
                break;
        }
    }
    if (!rc && !json) {
        fprintf(out, "totals: %zu tensors, %" PRIu64 " parameters (freq_cis tables not counted), %" PRIu64
                     " bytes, 32.0000 bits per weight\n", nv, params, m.file_size);
    } else if (!rc) {
        json_t *o = json_object();
        json_object_set_new(o, "schema", json_string("convert-info/1"));
        json_object_set_new(o, "type", json_string("summary"));
        json_object_set_new(o, "format", json_string("llama2c"));
        json_object_set_new(o, "dim", json_integer(m.c.dim));
        json_object_set_new(o, "hidden_dim", json_integer(m.c.hidden_dim));
        json_object_set_new(o, "n_layers", json_integer(m.c.n_layers));
        json_object_set_new(o, "n_heads", json_integer(m.c.n_heads));
        json_object_set_new(o, "n_kv_heads", json_integer(m.c.n_kv_heads));
        json_object_set_new(o, "vocab_size", json_integer(m.c.vocab_size));
        json_object_set_new(o, "seq_len", json_integer(m.c.seq_len));
        json_object_set_new(o, "shared_classifier", json_boolean(m.c.shared_classifier));
        json_object_set_new(o, "n_tensors", json_integer((json_int_t)nv));
        json_object_set_new(o, "parameters", json_integer((json_int_t)params));
        json_object_set_new(o, "bytes", json_integer((json_int_t)m.file_size));
        rc = json_print_line(o, out, d);
        json_decref(o);
    }
    free(views);
    llama2c_close(&m);
    return rc;
}
