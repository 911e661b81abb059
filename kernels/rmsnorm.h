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
/* elements a thread loads before it uses them: a row's loads overlap
 * instead of waiting one after another (the order of the sums is kept) */
constexpr int RMS_BATCH = 4;

/* call from every thread of the block; scratch holds a double per warp */
__device__ __forceinline__ double rms_row_scale(const float *row, int hidden, double *scratch) {
    double ss = 0.0;
    if (threadIdx.x < RMS_THREADS)
        for (int i0 = threadIdx.x; i0 < hidden; i0 += RMS_BATCH * RMS_THREADS) {
            float v[RMS_BATCH];
#pragma unroll
            for (int u = 0; u < RMS_BATCH; u++)
                v[u] = i0 + u * RMS_THREADS < hidden ? row[i0 + u * RMS_THREADS] : 0.0f;
#pragma unroll
            for (int u = 0; u < RMS_BATCH; u++)
                if (i0 + u * RMS_THREADS < hidden)
                    ss += (double)(v[u] * v[u]);
        }
    return gptoss_rms_scale(block_all(ss, op_add(), scratch), hidden);
}

/* store(i, v) for every element i of the normalized row; each element is
 * read before its own store, so the outputs may be the row itself */
template <class Store>
__device__ __forceinline__ void rms_row_apply(const float *row, const float *w, double scale, int hidden,
                                              Store store) {
    const int step = blockDim.x;
    for (int i0 = threadIdx.x; i0 < hidden; i0 += RMS_BATCH * step) {
        float wv[RMS_BATCH], rv[RMS_BATCH];
#pragma unroll
        for (int u = 0; u < RMS_BATCH; u++)
            if (i0 + u * step < hidden) {
                wv[u] = w[i0 + u * step];
                rv[u] = row[i0 + u * step];
            }
#pragma unroll
        for (int u = 0; u < RMS_BATCH; u++)
            if (i0 + u * step < hidden)
                store(i0 + u * step, gptoss_rms_apply(wv[u], scale, rv[u]));
    }
}

#endif
