/* The RMSNorm of one row by the block that owns it, in the one order every
 * kernel uses, so a row normalizes to the same bits in the RMSNorm kernel
 * and in the kernels that fuse it (the MoE combine, which owns the residual
 * row it has just updated, and the router, which normalizes its own input):
 * threads 0 .. 255 sum the float squares of elements t, t + 256, .. in
 * double, the block folds those sums (block_all), and the scale and the
 * products follow the course's formulas (src/core/course_math.h). */
#ifndef GPTOSS_KERNELS_RMSNORM_H
#define GPTOSS_KERNELS_RMSNORM_H

#include "device.h"
#include "../src/core/course_math.h"

constexpr int RMS_THREADS = 256; /* the block size of rmsnorm.hip; larger blocks leave the rest idle */

/* call from every thread of the block; scratch holds a double per warp */
__device__ __forceinline__ double rms_row_scale(const float *row, int hidden, double *scratch) {
    double ss = 0.0;
    if (threadIdx.x < RMS_THREADS)
        for (int i = threadIdx.x; i < hidden; i += RMS_THREADS)
            ss += (double)(row[i] * row[i]);
    return gptoss_rms_scale(block_all(ss, op_add(), scratch), hidden);
}

/* store(i, v) for every element i of the normalized row; each element is
 * read before its own store, so the outputs may be the row itself */
template <class Store>
__device__ __forceinline__ void rms_row_apply(const float *row, const float *w, double scale, int hidden,
                                              Store store) {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        store(i, gptoss_rms_apply(w[i], scale, row[i]));
}

#endif
