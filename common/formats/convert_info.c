/*
 * convert_info.c - `convert --info`: what a model file holds.
 *
 * Text: a header line, the metadata (arrays summarised by their first
 * elements), the tensor table and totals.  JSON Lines: one object per
 * metadata key ("type":"kv"), per tensor ("type":"tensor") and a final
 * summary, each with "schema":"convert-info/1".
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "convert_priv.h"
#include "escape.h"
#include "gguf.h"
#include "json.h"
#include "qtypes.h"
#include "xio.h"

#define INFO_SCHEMA "convert-info/1"
#define ARR_SHOW 4        /* array elements shown in text */
#define STR_SHOW 60       /* string bytes shown in text */

/* Prints a string in double quotes, escaped (escape.h), cut at max bytes. */
static void
print_escaped(FILE *out, const char *p, uint64_t n, uint64_t max)
{
    fputc('"', out);
    esc_fwrite(out, p, (size_t)n, (size_t)max, ESC_DQUOTE);
    fputc('"', out);
    if (n > max)
        fprintf(out, "...(%" PRIu64 " bytes)", n);
}

/* A scalar record for the value at raw (an array element or a scalar). */
static struct gguf_kv
scalar_kv(enum gguf_type t, const uint8_t *raw)
{
    struct gguf_kv kv;

    memset(&kv, 0, sizeof(kv));
    kv.type = t;
    memcpy(kv.v.raw, raw, gguf_type_size(t));
    return kv;
}

static void
print_scalar(FILE *out, enum gguf_type t, const uint8_t *raw)
{
    struct gguf_kv tmp = scalar_kv(t, raw);
    int64_t i;
    uint64_t u;
    double f;

    if (t == GGUF_TYPE_BOOL)
        fputs(raw[0] ? "true" : "false", out);
    else if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64)
        fprintf(out, "%.9g", (gguf_kv_float(&tmp, &f), f));
    else if (gguf_kv_uint(&tmp, &u))
        fprintf(out, "%" PRIu64, u);
    else if (gguf_kv_int(&tmp, &i))
        fprintf(out, "%" PRId64, i);
}

static json_t *
scalar_json(enum gguf_type t, const uint8_t *raw)
{
    struct gguf_kv tmp = scalar_kv(t, raw);
    int64_t i;
    uint64_t u;
    double f;

    if (t == GGUF_TYPE_BOOL)
        return json_boolean(raw[0]);
    if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) {
        gguf_kv_float(&tmp, &f);
        return json_real(f);
    }
    if (gguf_kv_int(&tmp, &i))
        return json_integer(i);
    if (gguf_kv_uint(&tmp, &u))
        return json_real((double)u);
    return json_null();
}

static void
kv_text(FILE *out, const struct gguf_kv *kv)
{
    fprintf(out, "  %-44s %-10s ", ESC(kv->key.p),
            kv->type == GGUF_TYPE_ARRAY ? "array" : gguf_type_name(kv->type));
    if (kv->type == GGUF_TYPE_STRING) {
        print_escaped(out, kv->v.str.p, kv->v.str.n, STR_SHOW);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        uint64_t show = kv->n < ARR_SHOW ? kv->n : ARR_SHOW;
        fprintf(out, "[%s x %" PRIu64 "] ", gguf_type_name(kv->arr_type), kv->n);
        for (uint64_t i = 0; i < show; i++) {
            if (i)
                fputs(", ", out);
            if (kv->arr_type == GGUF_TYPE_STRING)
                print_escaped(out, kv->v.strs[i].p, kv->v.strs[i].n, 24);
            else
                print_scalar(out, kv->arr_type,
                             (const uint8_t *)kv->v.arr + i * gguf_type_size(kv->arr_type));
        }
        if (kv->n > show)
            fputs(", ...", out);
    } else {
        print_scalar(out, kv->type, kv->v.raw);
    }
    fputc('\n', out);
}

static json_t *
kv_json(const struct gguf_kv *kv)
{
    json_t *o = json_object(), *v;

    json_object_set_new(o, "schema", json_string(INFO_SCHEMA));
    json_object_set_new(o, "type", json_string("kv"));
    json_object_set_new(o, "key", json_stringn(kv->key.p, kv->key.n));
    json_object_set_new(o, "value_type", json_string(gguf_type_name(kv->type)));
    if (kv->type == GGUF_TYPE_STRING) {
        v = json_stringn(kv->v.str.p, kv->v.str.n);
        if (!v) /* not UTF-8: give the length only */
            v = json_null();
        json_object_set_new(o, "value", v);
    } else if (kv->type == GGUF_TYPE_ARRAY) {
        uint64_t show = kv->n < 16 ? kv->n : 16;
        json_t *a = json_array();
        json_object_set_new(o, "element_type", json_string(gguf_type_name(kv->arr_type)));
        json_object_set_new(o, "count", json_integer((json_int_t)kv->n));
        for (uint64_t i = 0; i < show; i++) {
            if (kv->arr_type == GGUF_TYPE_STRING) {
                v = json_stringn(kv->v.strs[i].p, kv->v.strs[i].n);
                json_array_append_new(a, v ? v : json_null());
            } else {
                json_array_append_new(a, scalar_json(kv->arr_type, (const uint8_t *)kv->v.arr +
                                                                       i * gguf_type_size(kv->arr_type)));
            }
        }
        json_object_set_new(o, "head", a);
    } else {
        json_object_set_new(o, "value", scalar_json(kv->type, kv->v.raw));
    }
    return o;
}

static int
info_gguf(const char *path, bool json, FILE *out, struct diag *d)
{
    struct gguf g;
    uint64_t params = 0, bytes = 0;
    int rc = gguf_open(&g, path, d);

    if (rc)
        return rc;
    if (!json) {
        fprintf(out, "%s: GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64 " tensors, alignment %u, data at offset %" PRIu64 "\n",
                ESC(path), g.version, g.n_kv, g.n_tensors, g.alignment, g.data_offset);
        fputs("metadata:\n", out);
        for (uint64_t i = 0; i < g.n_kv; i++)
            kv_text(out, &g.kv[i]);
        fputs("tensors:\n", out);
        fprintf(out, "  %-5s %-40s %-8s %-24s %14s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
    } else {
        for (uint64_t i = 0; i < g.n_kv; i++) {
            json_t *o = kv_json(&g.kv[i]);
            rc = json_print_line(o, out, d);
            json_decref(o);
            if (rc)
                goto out;
        }
    }
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const struct gguf_tensor *t = &g.t[i];
        const struct qtype *qt = qtype_get(t->type);
        params += (uint64_t)gguf_tensor_nelements(t);
        bytes += t->nbytes;
        if (!json) {
            char shape[64];
            int k = 0;
            shape[0] = '\0';
            for (uint32_t j = 0; j < t->n_dims && k < (int)sizeof(shape); j++)
                k += snprintf(shape + k, sizeof(shape) - (size_t)k, "%s%" PRId64, j ? " x " : "", t->ne[j]);
            fprintf(out, "  %-5" PRIu64 " %-40s %-8s %-24s %14" PRIu64 " %12" PRIu64 "\n", i, ESC(t->name.p),
                    qt->name, shape, t->offset, t->nbytes);
        } else {
            json_t *o = json_object(), *sh = json_array();
            for (uint32_t j = 0; j < t->n_dims; j++)
                json_array_append_new(sh, json_integer(t->ne[j]));
            json_object_set_new(o, "schema", json_string(INFO_SCHEMA));
            json_object_set_new(o, "type", json_string("tensor"));
            json_object_set_new(o, "index", json_integer((json_int_t)i));
            json_object_set_new(o, "name", json_string(t->name.p));
            json_object_set_new(o, "ggml_type", json_string(qt->name));
            json_object_set_new(o, "ggml_type_id", json_integer(t->type));
            json_object_set_new(o, "shape", sh);
            json_object_set_new(o, "offset", json_integer((json_int_t)t->offset));
            json_object_set_new(o, "file_offset", json_integer((json_int_t)(g.data_offset + t->offset)));
            json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
            rc = json_print_line(o, out, d);
            json_decref(o);
            if (rc)
                goto out;
        }
    }
    if (!json) {
        fprintf(out, "totals: %" PRIu64 " tensors, %" PRIu64 " parameters, %" PRIu64 " bytes of tensor data, %.4f bits per weight\n",
                g.n_tensors, params, bytes, params ? 8.0 * (double)bytes / (double)params : 0.0);
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "schema", json_string(INFO_SCHEMA));
        json_object_set_new(o, "type", json_string("summary"));
        json_object_set_new(o, "format", json_string("gguf"));
        json_object_set_new(o, "version", json_integer(g.version));
        json_object_set_new(o, "alignment", json_integer(g.alignment));
        json_object_set_new(o, "data_offset", json_integer((json_int_t)g.data_offset));
        json_object_set_new(o, "n_kv", json_integer((json_int_t)g.n_kv));
        json_object_set_new(o, "n_tensors", json_integer((json_int_t)g.n_tensors));
        json_object_set_new(o, "parameters", json_integer((json_int_t)params));
        json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(o, "bits_per_weight", json_real(params ? 8.0 * (double)bytes / (double)params : 0.0));
        rc = json_print_line(o, out, d);
        json_decref(o);
    }
out:
    gguf_release(&g);
    return rc;
}

int
convert_info(const char *path, enum model_fmt fmt, bool json, FILE *out, struct diag *d)
{
    int rc;

    if (fmt == FMT_AUTO && (rc = convert_detect(path, &fmt, d)))
        return rc;
    if (fmt != FMT_GGUF && path_is_stream(path))
        return diag_set(d, ST_RANGE, "only GGUF can be read from a pipe or device, not --from %s",
                        model_fmt_name(fmt));
    if (fmt == FMT_HF && (rc = hf_dir_check_files(path, d)) < 0)
        return rc;
    switch (fmt) {
    case FMT_GGUF: return info_gguf(path, json, out, d);
    case FMT_HF: return info_hf(path, json, out, d);
    case FMT_LLAMA2C: return info_l2c(path, json, out, d);
    default: return diag_set(d, ST_RANGE, "unknown format");
    }
}
