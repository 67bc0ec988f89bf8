/*
 * convert.c - format detection, GGUF -> GGUF copies and retyping, and
 * run_convert(), which hands the other directions to convert_hf.c and
 * convert_l2c.c (convert_priv.h).  Every direction streams its tensors
 * through the pipeline of gguf_write.h.  See convert.h.
 */
#include "convert.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "convert_priv.h"
#include "eagle_hf.h"
#include "gguf.h"
#include "gguf_write.h"
#include "qtypes.h"
#include "xio.h"

enum model_fmt
model_fmt_parse(const char *s)
{
    if (!s)
        return FMT_AUTO;
    if (!strcmp(s, "gguf"))
        return FMT_GGUF;
    if (!strcmp(s, "hf") || !strcmp(s, "safetensors"))
        return FMT_HF;
    if (!strcmp(s, "llama2c") || !strcmp(s, "llama2.c"))
        return FMT_LLAMA2C;
    return FMT_AUTO;
}

const char *
model_fmt_name(enum model_fmt f)
{
    switch (f) {
    case FMT_GGUF: return "gguf";
    case FMT_HF: return "hf";
    case FMT_LLAMA2C: return "llama2c";
    default: return "auto";
    }
}

int
convert_detect(const char *path, enum model_fmt *out, struct diag *d)
{
    FILE *fp;
    uint8_t b[28];
    size_t n;

    *out = FMT_AUTO;
    /* A stream cannot be peeked at and opened again: reading its first
     * bytes here would take them from the reader that follows. */
    if (path_is_stream(path)) {
        *out = FMT_GGUF;
        return 0;
    }
    if (path_is_dir(path)) {
        char *p = path_join(path, "config.json");
        bool ok = p && path_exists(p);
        free(p);
        if (!ok)
            return diag_set(d, ST_FORMAT, "directory has no config.json (not a Hugging Face checkpoint)");
        *out = FMT_HF;
        return 0;
    }
    fp = fopen(path, "rb");
    if (!fp)
        return diag_set(d, ST_IO, "cannot open: %s", strerror(errno));
    n = fread(b, 1, sizeof(b), fp);
    fclose(fp);
    if (n >= 4 && !memcmp(b, "GGUF", 4)) {
        *out = FMT_GGUF;
        return 0;
    }
    if (n == sizeof(b)) {
        /* llama2.c legacy header: seven positive-ish int32 dims. */
        int32_t h[7];
        memcpy(h, b, sizeof(h));
        if (h[0] > 0 && h[1] > 0 && h[2] > 0 && h[3] > 0 && h[4] > 0 && h[5] != 0 && h[6] > 0 &&
            h[0] % h[3] == 0 && h[4] <= h[3]) {
            *out = FMT_LLAMA2C;
            return 0;
        }
    }
    if (n < 4)
        return diag_set(d, ST_FORMAT, "file too short to identify its format");
    return diag_set(d, ST_FORMAT, "unrecognised format (not GGUF, not a llama2.c checkpoint)");
}

/* ---- GGUF -> GGUF ---- */

struct gguf_fetch {
    struct gguf *in;
    void *buf;
    uint64_t cap;
};

/* Tensor i of a streamed GGUF, read in file order into one reused buffer
 * (the writer names the input in messages). */
static int
fetch_gguf(void *ctx, size_t i, const void **data, struct diag *d)
{
    struct gguf_fetch *f = ctx;
    uint64_t nb = f->in->t[i].nbytes;

    if (nb > f->cap) {
        free(f->buf);
        f->buf = nb <= SIZE_MAX ? malloc(nb ? (size_t)nb : 1) : NULL;
        f->cap = f->buf ? nb : 0;
        if (!f->buf)
            return diag_set(d, ST_NOMEM, "tensor '%s': out of memory for its %llu bytes",
                            f->in->t[i].name.p, (unsigned long long)nb);
    }
    *data = gguf_tensor_bytes(f->in, i, f->buf, d);
    if (!*data) {
        const struct src *s = f->in->src;
        return s && s->fp && ferror(s->fp) ? -ST_IO : -ST_FORMAT;
    }
    return 0;
}

static int
gguf_to_gguf(const struct convert_opts *o, struct diag *d)
{
    struct gguf in, outg;
    struct gguf_fetch f = {0};
    struct out_tensor *ts = NULL;
    struct gguf_write_opts wo = CONVERT_WRITE_OPTS(o);
    bool lossy_warned = false;
    int rc;

    rc = gguf_open(&in, o->input, d);
    if (rc) {
        diag_prefix(d, "'%s'", o->input);
        return rc;
    }
    gguf_init(&outg);
    outg.version = in.version;
    for (uint64_t i = 0; i < in.n_kv; i++)
        if (gguf_set_kv_copy(&outg, &in.kv[i])) {
            rc = diag_set(d, ST_NOMEM, "'%s': out of memory copying its metadata", o->input);
            goto out;
        }
    if (o->out_type >= 0 && gguf_find(&outg, "general.file_type") >= 0 &&
        gguf_set_u32(&outg, "general.file_type", ftype_for_type(o->out_type))) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory copying its metadata", o->input);
        goto out;
    }
    ts = calloc(in.n_tensors ? in.n_tensors : 1, sizeof(*ts));
    if (!ts) {
        rc = diag_set(d, ST_NOMEM, "'%s': out of memory for its %llu tensors", o->input,
                      (unsigned long long)in.n_tensors);
        goto out;
    }
    for (uint64_t i = 0; i < in.n_tensors; i++) {
        const struct gguf_tensor *t = &in.t[i];
        const struct qtype *qt = qtype_get(t->type);
        struct out_tensor *ot = &ts[i];
        snprintf(ot->name, sizeof(ot->name), "%s", t->name.p);
        ot->n_dims = t->n_dims;
        memcpy(ot->ne, t->ne, sizeof(ot->ne));
        ot->type = retype_for(t->name.p, t->ne, t->type, o->out_type);
        ot->src.data = t->data;
        ot->src.type = t->type;
        memcpy(ot->src.ne, t->ne, sizeof(ot->src.ne));
        if (ot->type != t->type && !qt->to_float) {
            rc = diag_set(d, ST_RANGE, "'%s': tensor '%s': cannot convert from type %s", o->input,
                          t->name.p, qt->name);
            goto out;
        }
        if (ot->type != t->type && qt->blck > 1 && !lossy_warned) {
            runcb_warn(&o->cb, "dequantizing quantized tensors: the output keeps the quantization error");
            lossy_warned = true;
        }
    }
    f.in = &in;
    rc = write_gguf_out(&outg, ts, in.n_tensors, fetch_gguf, &f, &wo, d);
out:
    free(f.buf);
    free(ts);
    gguf_release(&outg);
    gguf_release(&in);
    return rc;
}

/* 1 when the GGUF at path is an EAGLE head (general.architecture "eagle"
 * or "eagle3") */
static int
gguf_is_eagle(const char *path, struct diag *d)
{
    struct gguf g;
    const char *arch = NULL;
    int rc;

    if (path_is_stream(path))
        return 0;       /* read once, by the conversion (which refuses it for HF) */
    if ((rc = gguf_open(&g, path, d)) < 0) {
        diag_prefix(d, "'%s'", path);
        return rc;
    }
    rc = gguf_get_str(&g, "general.architecture", &arch, NULL) == 0 && arch &&
         (!strcmp(arch, "eagle") || !strcmp(arch, "eagle3"));
    gguf_release(&g);
    return rc;
}

/* the EAGLE head directions, or 0 when the conversion is not of a head */
static int
convert_eagle(const struct convert_opts *o, enum model_fmt from, enum model_fmt to, bool *done,
              struct diag *d)
{
    int head = 0;

    *done = false;
    if (from == FMT_GGUF && to == FMT_HF)
        head = gguf_is_eagle(o->input, d);
    else if (from == FMT_HF && to == FMT_GGUF)
        head = eagle_hf_detect(o->input, d);
    if (head < 0) {
        if (from == FMT_HF)
            diag_prefix(d, "'%s'", o->input);
        return head;
    }
    if (!head && o->base)
        return diag_set(d, ST_RANGE, "--base goes with an EAGLE head's HF directory "
                        "converted to GGUF");
    if (o->verifier && (!o->layout || strcmp(o->layout, "speculators")))
        return diag_set(d, ST_RANGE, "--verifier goes with --layout speculators");
    if ((!head || from != FMT_GGUF) && o->layout)
        return diag_set(d, ST_RANGE, "--layout goes with an EAGLE head GGUF converted to "
                        "an HF directory");
    if (!head)
        return 0;
    *done = true;
    if (o->shard_size)
        return diag_set(d, ST_RANGE, "--shard-size: an EAGLE head is written as one file");
    if (from == FMT_HF && o->out_type >= 0)
        return diag_set(d, ST_RANGE, "--type: EAGLE head GGUFs are f32");
    int layout = o->layout ? eagle_hf_layout_parse(o->layout) : EAGLE_HF_EAGLE;
    if (layout < 0)
        return diag_set(d, ST_RANGE, "--layout: unknown layout '%s' (eagle, speculators)",
                        o->layout);
    if (from == FMT_GGUF)
        return eagle_hf_export(o->input, o->output, o->out_type, layout, o->verifier, o->force,
                               d);
    if (!o->base)
        return diag_set(d, ST_RANGE, "'%s' is an EAGLE head: give the model it drafts for "
                        "with --base BASE.gguf", o->input);
    return eagle_hf_import(o->input, o->base, o->output, o->force, d);
}

int
run_convert(const struct convert_opts *o, struct diag *d)
{
    bool done;
    enum model_fmt from = o->from, to = o->to;
    int rc;

    if (o->info)
        return convert_info(o->input, o->from, o->json, o->info, d);

    if (from == FMT_AUTO) {
        rc = convert_detect(o->input, &from, d);
        if (rc) {
            diag_prefix(d, "'%s'", o->input);
            return rc;
        }
    }
    if (to == FMT_AUTO) {
        size_t n = strlen(o->output);
        to = (!strcmp(o->output, "-") || (n > 5 && !strcmp(o->output + n - 5, ".gguf"))) ? FMT_GGUF : FMT_HF;
    }
    if (to == FMT_LLAMA2C)
        return diag_set(d, ST_RANGE, "writing llama2.c checkpoints is not supported; use --to gguf or hf");
    if (to == FMT_HF && !strcmp(o->output, "-"))
        return diag_set(d, ST_RANGE, "a Hugging Face directory cannot be written to stdout");
    if (from != FMT_GGUF && path_is_stream(o->input))
        return diag_set(d, ST_RANGE, "'%s': only GGUF can be read from a pipe or device, "
                        "not --from %s", o->input, model_fmt_name(from));
    if (from == FMT_HF && (rc = hf_dir_check_files(o->input, d)) < 0) {
        diag_prefix(d, "'%s'", o->input);
        return rc;
    }
    /* an existing GGUF output is refused before any work (the GPTQ/AWQ
     * import and the EAGLE head import open theirs last) */
    if (to == FMT_GGUF && !o->out && (rc = xout_check(o->output, o->force, d)) < 0) {
        diag_prefix_output(d, o->output);
        return rc;
    }
    rc = convert_eagle(o, from, to, &done, d);
    if (rc || done)
        return rc;
    switch (from) {
    case FMT_GGUF:
        return to == FMT_GGUF ? gguf_to_gguf(o, d) : convert_gguf_to_hf(o, d);
    case FMT_HF:
        return to == FMT_GGUF ? convert_hf_to_gguf(o, d)
                              : diag_set(d, ST_RANGE, "HF to HF: nothing to convert");
    case FMT_LLAMA2C:
        return to == FMT_GGUF ? convert_l2c_to_gguf(o, d)
                              : diag_set(d, ST_RANGE, "llama2.c converts to GGUF only");
    default:
        return diag_set(d, ST_RANGE, "unknown input format");
    }
}
