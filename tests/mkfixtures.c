/*
 * mkfixtures - writes the tiny synthetic models the tests use, from a seed.
 *
 *   mkfixtures [--seed N] DIR
 *
 * DIR/tiny-llama-f32.gguf   llama arch, dim 64, 2 layers, 4 heads (2 KV heads),
 *                           ff 128, GPT-2 style byte-level BPE vocabulary of
 *                           256 byte tokens + merges + 3 special tokens, all F32
 * DIR/tiny-llama-f16.gguf   the same weights with 2-D tensors in F16, and an
 *                           untied output.weight
 * DIR/tiny-llama256-f32.gguf  dim 256, 4 layers, 4 heads (1 KV head), ff 512,
 *                           untied output, the GPT-2 vocabulary: rows that
 *                           k-quants (256-element blocks) divide (quantize tests)
 * DIR/tiny-spm-f32.gguf     the same shapes with a SentencePiece-style vocabulary
 *                           (tokenizer.ggml.model "llama": <unk> <s> </s>, byte
 *                           tokens <0x00>..<0xFF>, scored pieces)
 * DIR/tiny-l2c.bin          a llama2.c v0 checkpoint of the same shapes (separate
 * DIR/tokenizer.bin         classifier) and its tokenizer (the SPM vocabulary)
 * Weights are uniform in [-0.5, 0.5) / sqrt(fan_in) from a xorshift64* stream,
 * so the same seed gives the same bytes on every machine.
 */
#include <errno.h>
#include <getopt.h>
#include <sys/stat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool.h"
#include "gguf.h"
#include "llama2c.h"
#include "qtypes.h"
#include "xio.h"

/* Shapes of the model being written: the tiny ones below by default;
 * main() switches to 256-wide rows for tiny-llama256-f32.gguf. */
static struct {
    int n_embd, n_layer, n_head, n_head_kv, n_ff;
} dims = { 64, 2, 4, 2, 128 };
#define N_EMBD dims.n_embd
#define N_LAYER dims.n_layer
#define N_HEAD dims.n_head
#define N_HEAD_KV dims.n_head_kv
#define N_FF dims.n_ff

static uint64_t rng_state;

static double
rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* GPT-2's byte -> code point map (llama.cpp unicode_byte_to_utf8_map), as
 * UTF-8 into out. */
static int
byte_to_utf8(int b, char *out)
{
    int cp, n = 0;

    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else {
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
                n++;
        cp = 0x100 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    out[2] = 0;
    return 2;
}

struct vocab {
    char **tok;
    float *score;
    int32_t *type;
    char **merges;
    int n, n_merges;
};

static void
vocab_add(struct vocab *v, const char *s, float score, int32_t type)
{
    v->tok[v->n] = strdup(s);
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
}

static const char *const words[] = {"Ġt", "he", "Ġa", "in", "er", "on", "Ġthe", "re", "an", "or",
                                    "Ġs", "en", "at", "Ġw", "ll", "Ġhe", "Ġand", "Ġof", "Ġto", "is"};
static const char *const merges[] = {"Ġ t", "h e", "Ġ a", "i n", "e r", "o n", "Ġt he", "r e", "a n", "o r",
                                     "Ġ s", "e n", "a t", "Ġ w", "l l", "Ġ he", "Ġa nd", "Ġ of", "Ġt o", "i s"};

static void
vocab_gpt2(struct vocab *v)
{
    char b[8];

    vocab_add(v, "<|endoftext|>", 0, 3);
    vocab_add(v, "<|im_start|>", 0, 3);
    vocab_add(v, "<|im_end|>", 0, 3);
    for (int i = 0; i < 256; i++) {
        byte_to_utf8(i, b);
        vocab_add(v, b, 0, 1);
    }
    /* "Ġand" and "Ġof" need "nd" and "of": every part of a merge and every
     * merge result is a token, as HF tokenizers requires. */
    vocab_add(v, "nd", 0, 1);
    vocab_add(v, "of", 0, 1);
    for (size_t i = 0; i < sizeof(words) / sizeof(*words); i++)
        vocab_add(v, words[i], 0, 1);
    v->n_merges = (int)(sizeof(merges) / sizeof(*merges)) + 2;
    v->merges[0] = strdup("n d");
    v->merges[1] = strdup("o f");
    for (size_t i = 0; i < sizeof(merges) / sizeof(*merges); i++)
        v->merges[i + 2] = strdup(merges[i]);
}

static void
vocab_spm(struct vocab *v)
{
    char b[16];
    static const char *const pieces[] = {"▁", "▁the", "▁a", "in", "er", "on", "▁t", "he", "re", "an",
                                         "▁of", "▁and", "▁to", "is", "▁w", "en", "at", "or", "es", "▁s"};

    vocab_add(v, "<unk>", 0, 2);
    vocab_add(v, "<s>", 0, 3);
    vocab_add(v, "</s>", 0, 3);
    for (int i = 0; i < 256; i++) {
        snprintf(b, sizeof(b), "<0x%02X>", i);
        vocab_add(v, b, 0, 6);
    }
    for (size_t i = 0; i < sizeof(pieces) / sizeof(*pieces); i++)
        vocab_add(v, pieces[i], -(float)i, 1);
}

/* A weight tensor in GGUF order ne = {in, out}. */
static float *
weight(int64_t in, int64_t out)
{
    float *w = malloc((size_t)(in * out) * sizeof(float));
    double s = 1.0 / sqrt((double)in);

    for (int64_t i = 0; i < in * out; i++)
        w[i] = (float)((rnd() - 0.5) * s);
    return w;
}

static float *
norm(int64_t n)
{
    float *w = malloc((size_t)n * sizeof(float));

    for (int64_t i = 0; i < n; i++)
        w[i] = (float)(1.0 + (rnd() - 0.5) * 0.1);
    return w;
}

struct tdef {
    char name[64];
    int64_t ne[2];
    int nd;
    float *data;
};

static int
write_model(const char *path, const struct vocab *v, bool spm, bool f16, bool untied, uint64_t seed)
{
    struct gguf g;
    struct tdef t[64];
    int nt = 0, rc = 0;
    struct xout xo;
    struct diag d;
    const char *toks[512];
    char name[64];

    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    gguf_init(&g);
    gguf_set_str(&g, "general.architecture", "llama");
    gguf_set_str(&g, "general.type", "model");
    gguf_set_str(&g, "general.name", spm ? "tiny-spm" : "tiny-llama");
    gguf_set_u32(&g, "llama.block_count", N_LAYER);
    gguf_set_u32(&g, "llama.context_length", 256);
    gguf_set_u32(&g, "llama.embedding_length", N_EMBD);
    gguf_set_u32(&g, "llama.feed_forward_length", N_FF);
    gguf_set_u32(&g, "llama.attention.head_count", N_HEAD);
    gguf_set_u32(&g, "llama.attention.head_count_kv", N_HEAD_KV);
    gguf_set_f32(&g, "llama.rope.freq_base", 10000.0f);
    gguf_set_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_set_u32(&g, "general.file_type", f16 ? 1 : 0);
    gguf_set_u32(&g, "llama.vocab_size", (uint32_t)v->n);
    gguf_set_u32(&g, "llama.rope.dimension_count", N_EMBD / N_HEAD);
    gguf_set_u32(&g, "general.quantization_version", 2);
    gguf_set_str(&g, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
    gguf_set_str(&g, "tokenizer.ggml.pre", spm ? "default" : "smollm");
    for (int i = 0; i < v->n; i++)
        toks[i] = v->tok[i];
    gguf_set_arr_str(&g, "tokenizer.ggml.tokens", toks, NULL, (uint64_t)v->n);
    if (spm)
        gguf_set_arr(&g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->score, (uint64_t)v->n);
    gguf_set_arr(&g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->type, (uint64_t)v->n);
    if (!spm)
        gguf_set_arr_str(&g, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL,
                         (uint64_t)v->n_merges);
    gguf_set_u32(&g, "tokenizer.ggml.bos_token_id", spm ? 1 : 1);
    gguf_set_u32(&g, "tokenizer.ggml.eos_token_id", 2);
    if (spm)
        gguf_set_u32(&g, "tokenizer.ggml.unknown_token_id", 0);
    gguf_set_bool(&g, "tokenizer.ggml.add_bos_token", spm);
    gguf_set_str(&g, "tokenizer.chat_template",
                 "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");

#define ADD(nm, a, b, nd_, p) do { snprintf(t[nt].name, 64, "%s", nm); t[nt].ne[0] = a; \
    t[nt].ne[1] = b; t[nt].nd = nd_; t[nt].data = p; nt++; } while (0)
    ADD("token_embd.weight", N_EMBD, v->n, 2, weight(N_EMBD, v->n));
    for (int l = 0; l < N_LAYER; l++) {
        int hd = N_EMBD / N_HEAD;
        snprintf(name, sizeof(name), "blk.%d.attn_norm.weight", l);
        ADD(name, N_EMBD, 1, 1, norm(N_EMBD));
        snprintf(name, sizeof(name), "blk.%d.attn_q.weight", l);
        ADD(name, N_EMBD, N_HEAD * hd, 2, weight(N_EMBD, N_HEAD * hd));
        snprintf(name, sizeof(name), "blk.%d.attn_k.weight", l);
        ADD(name, N_EMBD, N_HEAD_KV * hd, 2, weight(N_EMBD, N_HEAD_KV * hd));
        snprintf(name, sizeof(name), "blk.%d.attn_v.weight", l);
        ADD(name, N_EMBD, N_HEAD_KV * hd, 2, weight(N_EMBD, N_HEAD_KV * hd));
        snprintf(name, sizeof(name), "blk.%d.attn_output.weight", l);
        ADD(name, N_HEAD * hd, N_EMBD, 2, weight(N_HEAD * hd, N_EMBD));
        snprintf(name, sizeof(name), "blk.%d.ffn_norm.weight", l);
        ADD(name, N_EMBD, 1, 1, norm(N_EMBD));
        snprintf(name, sizeof(name), "blk.%d.ffn_gate.weight", l);
        ADD(name, N_EMBD, N_FF, 2, weight(N_EMBD, N_FF));
        snprintf(name, sizeof(name), "blk.%d.ffn_up.weight", l);
        ADD(name, N_EMBD, N_FF, 2, weight(N_EMBD, N_FF));
        snprintf(name, sizeof(name), "blk.%d.ffn_down.weight", l);
        ADD(name, N_FF, N_EMBD, 2, weight(N_FF, N_EMBD));
    }
    ADD("output_norm.weight", N_EMBD, 1, 1, norm(N_EMBD));
    if (untied)
        ADD("output.weight", N_EMBD, v->n, 2, weight(N_EMBD, v->n));
#undef ADD
    for (int i = 0; i < nt; i++) {
        uint32_t ty = (f16 && t[i].nd == 2) ? GGML_TYPE_F16 : GGML_TYPE_F32;
        if (gguf_add_tensor(&g, t[i].name, ty, (uint32_t)t[i].nd, t[i].ne, NULL, &d) < 0) {
            rc = -1;
            goto out;
        }
    }
    if ((rc = xout_open(&xo, path, true, &d)))
        goto out;
    rc = gguf_write_header(&g, xo.fp, &d);
    for (int i = 0; i < nt; i++) {
        int64_t n = t[i].ne[0] * t[i].ne[1];
        if (g.t[i].type == GGML_TYPE_F16) {
            uint16_t *h = malloc((size_t)n * 2);
            for (int64_t k = 0; k < n; k++)
                h[k] = fp32_to_fp16(t[i].data[k]);
            if (!rc)
                rc = gguf_write_tensor(&g, xo.fp, (uint64_t)i, h, &d);
            free(h);
        } else if (!rc) {
            rc = gguf_write_tensor(&g, xo.fp, (uint64_t)i, t[i].data, &d);
        }
    }
    if (rc)
        xout_abort(&xo);
    else
        rc = xout_commit(&xo, &d);
out:
    for (int i = 0; i < nt; i++)
        free(t[i].data);
    gguf_release(&g);
    if (rc) {
        fprintf(stderr, "mkfixtures: '%s': %s\n", path, d.msg);
        return 1;
    }
    return 0;
}

/* A llama2.c v0 checkpoint with the SPM vocabulary (spaces for U+2581, as
 * llama2.c's export writes) and a separate classifier. */
static int
write_l2c(const char *dir, const struct vocab *v, uint64_t seed)
{
    struct llama2c_model m;
    struct llama2c_layer layers[N_LAYER];
    struct llama2c_vocab tv;
    struct diag d;
    char path[4096];
    float *blobs[16 * N_LAYER + 4];
    int nb = 0, rc = 0, hd = N_EMBD / N_HEAD;

    rng_state = seed * 0x9E3779B97F4A7C15ull + 7;
    memset(&m, 0, sizeof(m));
    m.c.dim = N_EMBD;
    m.c.hidden_dim = N_FF;
    m.c.n_layers = N_LAYER;
    m.c.n_heads = N_HEAD;
    m.c.n_kv_heads = N_HEAD_KV;
    m.c.vocab_size = v->n;
    m.c.seq_len = 64;
    m.c.shared_classifier = false;
    m.head_size = hd;
    m.kv_dim = N_HEAD_KV * hd;
    m.layers = layers;
    m.token_embedding = blobs[nb++] = weight(N_EMBD, v->n);
    for (int l = 0; l < N_LAYER; l++) {
        layers[l].rms_att = blobs[nb++] = norm(N_EMBD);
        layers[l].wq = blobs[nb++] = weight(N_EMBD, N_EMBD);
        layers[l].wk = blobs[nb++] = weight(N_EMBD, N_HEAD_KV * hd);
        layers[l].wv = blobs[nb++] = weight(N_EMBD, N_HEAD_KV * hd);
        layers[l].wo = blobs[nb++] = weight(N_EMBD, N_EMBD);
        layers[l].rms_ffn = blobs[nb++] = norm(N_EMBD);
        layers[l].w1 = blobs[nb++] = weight(N_EMBD, N_FF);
        layers[l].w2 = blobs[nb++] = weight(N_FF, N_EMBD);
        layers[l].w3 = blobs[nb++] = weight(N_EMBD, N_FF);
    }
    m.rms_final = blobs[nb++] = norm(N_EMBD);
    m.wcls = blobs[nb++] = weight(N_EMBD, v->n);
    snprintf(path, sizeof(path), "%s/tiny-l2c.bin", dir);
    if (llama2c_write(path, true, &m, &d)) {
        fprintf(stderr, "mkfixtures: '%s': %s\n", path, d.msg);
        rc = 1;
    }
    memset(&tv, 0, sizeof(tv));
    tv.n = v->n;
    tv.text = calloc((size_t)v->n, sizeof(char *));
    tv.len = calloc((size_t)v->n, sizeof(int32_t));
    tv.score = v->score;
    for (int i = 0; i < v->n; i++) {
        /* U+2581 -> ' ', byte tokens stay "<0xXX>" */
        const char *t = v->tok[i];
        char *o = tv.text[i] = malloc(strlen(t) + 1);
        int k = 0;
        for (size_t j = 0; t[j];) {
            if (!strncmp(t + j, "\xe2\x96\x81", 3)) {
                o[k++] = ' ';
                j += 3;
            } else {
                o[k++] = t[j++];
            }
        }
        o[k] = 0;
        tv.len[i] = k;
        if ((uint32_t)k > tv.max_token_length)
            tv.max_token_length = (uint32_t)k;
    }
    snprintf(path, sizeof(path), "%s/tokenizer.bin", dir);
    if (llama2c_tokenizer_write(path, true, &tv, &d)) {
        fprintf(stderr, "mkfixtures: '%s': %s\n", path, d.msg);
        rc = 1;
    }
    for (int i = 0; i < v->n; i++)
        free(tv.text[i]);
    free(tv.text);
    free(tv.len);
    for (int i = 0; i < nb; i++)
        free(blobs[i]);
    return rc;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"seed", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    static const char usage[] = "usage: mkfixtures [--seed N] dir";
    uint64_t seed = 1;
    struct vocab v;
    char path[4096];
    int c, rc = 0;

    cli_init(argv[0]);
    while ((c = cli_getopt(argc, argv, "s:", longopts, usage)) != -1) {
        if (c == 's')
            seed = (uint64_t)cli_parse_i64(optarg, 0, INT64_MAX, "--seed", false);
        else
            cli_exit_usage(usage);
    }
    if (optind != argc - 1)
        cli_exit_usage(usage);
    cli_path(usage, "dir", argv[optind]);
    if (mkdir(argv[optind], 0755) != 0 && errno != EEXIST)
        die(RC_IO, "cannot create '%s':", argv[optind]);
    memset(&v, 0, sizeof(v));
    v.tok = calloc(512, sizeof(char *));
    v.score = calloc(512, sizeof(float));
    v.type = calloc(512, sizeof(int32_t));
    v.merges = calloc(64, sizeof(char *));
    vocab_gpt2(&v);
    snprintf(path, sizeof(path), "%s/tiny-llama-f32.gguf", argv[optind]);
    rc |= write_model(path, &v, false, false, false, seed);
    snprintf(path, sizeof(path), "%s/tiny-llama-f16.gguf", argv[optind]);
    rc |= write_model(path, &v, false, true, true, seed);
    dims.n_embd = 256;
    dims.n_layer = 4;
    dims.n_head = 4;
    dims.n_head_kv = 1;
    dims.n_ff = 512;
    snprintf(path, sizeof(path), "%s/tiny-llama256-f32.gguf", argv[optind]);
    rc |= write_model(path, &v, false, false, true, seed);
    dims.n_embd = 64;
    dims.n_layer = 2;
    dims.n_head = 4;
    dims.n_head_kv = 2;
    dims.n_ff = 128;
    for (int i = 0; i < v.n; i++)
        free(v.tok[i]);
    v.n = 0;
    vocab_spm(&v);
    snprintf(path, sizeof(path), "%s/tiny-spm-f32.gguf", argv[optind]);
    rc |= write_model(path, &v, true, false, false, seed);
    rc |= write_l2c(argv[optind], &v, seed);
    for (int i = 0; i < v.n; i++)
        free(v.tok[i]);
    for (int i = 0; i < v.n_merges; i++)
        free(v.merges[i]);
    free(v.tok);
    free(v.score);
    free(v.type);
    free(v.merges);
    return rc ? RC_FAIL : RC_OK;
}
