/* The device's weight formats, one list: a GEMM's weights (their layout in
 * device_contract.h) map onto the format type the kernel families are
 * templates over (bf16.h says what a format gives). A new format is its
 * codec header and a line here. */
#ifndef GPTOSS_KERNELS_WEIGHT_FORMATS_H
#define GPTOSS_KERNELS_WEIGHT_FORMATS_H

#include "bf16.h"
#include "mxfp4.h"

namespace {

/* f(format) with the matrix-core format of weights that lie as `layout`
 * says (a value of its type); fp32 rows are the exact GEMM's, no such format */
template <class F> auto with_weight_format(int layout, F &&f) {
    if (layout == GPTOSS_W_MXFP4_TILES)
        return f(mxfp4_weights());
    return f(bf16_weights());
}

/* whether a GEMM's weights are codes decoded in registers */
static bool weights_coded(const gptoss_gemm_args *a) {
    return with_weight_format(a->w_layout, [](auto format) { return decltype(format)::CODED; });
}

} // namespace

#endif
