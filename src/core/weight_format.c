#include "weight_format.h"

#include <string.h>

#include "../../contract/device_contract.h"
#include "mxfp4.h"

static const gptoss_block_codec mxfp4 = {
    GPTOSS_MXFP4_BLOCK,
    GPTOSS_MXFP4_BLOCK_BYTES,
    gptoss_mxfp4_encode_row,
    gptoss_mxfp4_decode,
    gptoss_mxfp4_kernels_take,
    "is not exactly MXFP4 (an e2m1 value times a power of two shared by its block of 32 inputs)",
    1,
};
_Static_assert(GPTOSS_MXFP4_BLOCK <= GPTOSS_MAX_CODEC_BLOCK, "a block of inputs fits GPTOSS_MAX_CODEC_BLOCK");

static const gptoss_weight_format formats[GPTOSS_N_WEIGHT_FORMATS] = {
    [GPTOSS_WEIGHTS_FP32] = {"fp32", "fp32", 32.0, 0, 0, NULL, 0, "the model's fp32 values; float GEMMs (the golden's)"},
    [GPTOSS_WEIGHTS_BF16] = {"bf16", "bf16", 16.0, 1, 1, NULL, 0,
                             "matrices in bf16, GEMM inputs rounded to bf16, fp32 sums"},
    [GPTOSS_WEIGHTS_MXFP4] = {"mxfp4", "MXFP4", 4.25, 1, 1, &mxfp4, GPTOSS_W_MXFP4_TILES,
                              "as bf16, the experts' matrices in MXFP4 (the same values and bits)"},
};

const gptoss_weight_format *gptoss_weight_format_of(int weights) {
    return weights >= 0 && weights < GPTOSS_N_WEIGHT_FORMATS ? &formats[weights] : NULL;
}

int gptoss_weight_format_find(const char *name) {
    for (int f = 0; f < GPTOSS_N_WEIGHT_FORMATS; f++)
        if (strcmp(formats[f].name, name) == 0)
            return f;
    return GPTOSS_WEIGHTS_UNSET;
}

int gptoss_weight_format_block(const gptoss_weight_format *f) { return f->experts ? f->experts->block : 1; }
