/* The device's weight formats, one list: a GEMM's weights (their layout in
 * device_contract.h) map onto the format type the kernel families are
 * templates over (bf16.h says what a format gives). A new format is its
 * codec header and a line here. */
#ifndef GPTOSS_KERNELS_WEIGHT_FORMATS_H
#define GPTOSS_KERNELS_WEIGHT_FORMATS_H

#include "bf16.h"
#include "mxfp4.h"

namespace {

/* f(format) with the format of a's weights (a value of its type) */
template <class F> hipError_t with_weight_format(const gptoss_gemm_args *a, F &&f) {
    if (a->w_mxfp4)
        return f(mxfp4_weights());
    return f(bf16_weights());
}

} // namespace

#endif
