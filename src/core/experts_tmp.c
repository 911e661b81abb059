#include "experts_tmp.h"
#include <stdlib.h>
#include "mxfp4.h"
gptoss_status gptoss_model_experts_mxfp4(gptoss_model *m, char *err) {
    if (m->synthetic)
        return GPTOSS_OK;
    int ts[2] = {GPTOSS_T_W_MLP1, GPTOSS_T_W_MLP2};
    for (int i = 0; i < 2; i++) {
        const gptoss_tensor_desc *d = &m->layout.t[ts[i]];
        int64_t k = d->dims[d->ndim - 1], rows = (int64_t)(d->count / (uint64_t)k), b = gptoss_mxfp4_blocks(k);
        float *w = malloc(sizeof(float) * (size_t)k);
        uint8_t *c = malloc((size_t)b * 16), *s = malloc((size_t)b);
        for (int64_t r = 0; r < rows; r++) {
            gptoss_model_read(m, ts[i], (uint64_t)(r * k), (uint64_t)k, w);
            int64_t bad = gptoss_mxfp4_encode_row(w, k, c, s);
            if (bad >= 0) {
                free(w); free(c); free(s);
                return gptoss_fail(err, GPTOSS_E_UNSUPPORTED, "%s row %lld input %lld (%g) is not MXFP4", d->name,
                                   (long long)r, (long long)bad, w[bad]);
            }
        }
        free(w); free(c); free(s);
    }
    return GPTOSS_OK;
}
void gptoss_model_read_mxfp4(const gptoss_model *m, int tensor, uint64_t first, uint64_t rows, uint8_t *codes,
                             uint8_t *scales) {
    const gptoss_tensor_desc *d = &m->layout.t[tensor];
    int64_t k = d->dims[d->ndim - 1], b = gptoss_mxfp4_blocks(k);
    float *w = malloc(sizeof(float) * (size_t)k);
    for (uint64_t r = 0; r < rows; r++) {
        gptoss_model_read(m, tensor, (first + r) * (uint64_t)k, (uint64_t)k, w);
        gptoss_mxfp4_encode_row(w, k, codes + r * (uint64_t)b * 16, scales + r * (uint64_t)b);
    }
    free(w);
}
