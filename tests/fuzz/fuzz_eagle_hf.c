/*
 * fuzz_eagle_hf.c - libFuzzer harness for EAGLE heads in the HF layouts
 * (eagle_hf.h: EAGLE-1, EAGLE-3 in the EAGLE authors' and in speculators'
 * layout, told apart by config.json): a u16 length (little-endian), that many bytes of
 * config.json, the rest model.safetensors, read against a fixed base
 * configuration (the corpus's: width 16, 2 heads, 1 KV head of 8, SwiGLU
 * 24, 12 tokens, interleaved RoPE).  A head that reads must have finite
 * weights and an ascending draft vocabulary inside the base's.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eagle_hf.h"
#include "xio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct eagle_config c = { 16, 2, 1, 8, 24, 12, 1e-5f,
                              { .n_rot = 8, .freq_base = 10000.0f, .freq_scale = 1.0f,
                                .style = ROPE_NORM }, EAGLE_ARCH_1, 0, { 0, 0, 0 } };
    struct eagle_head h;
    struct eagle_meta mt;
    struct sft_file f;
    struct src s;
    struct diag d;

    if (size < 2)
        return 0;
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    if (n > size - 2)
        return 0;
    src_open_mem(&s, data + 2 + n, size - 2 - n, "model.safetensors");
    if (sft_read(&f, &s, &d) == 0) {
        if (eagle_hf_head_read(&h, &mt, (const char *)data + 2, n, &f, &c, &d) == 0) {
            for (int64_t i = 0; i < h.n_param; i++)
                if (!isfinite(h.param[i]))
                    abort();
            for (int64_t i = 0; i < mt.n_draft; i++)
                if (mt.draft_ids[i] < 0 || mt.draft_ids[i] >= c.n_vocab ||
                    (i && mt.draft_ids[i] <= mt.draft_ids[i - 1]))
                    abort();
            eagle_head_release(&h);
            free(mt.draft_ids);
        }
        sft_close(&f);
    }
    src_close(&s);
    return 0;
}
