/* Device-side helpers shared by the kernel files: the bf16 storage type,
 * typed loads that widen to float, and warp/block reductions that make no
 * assumption about the warp size (32 on NVIDIA, 64 on gfx90a). */
#ifndef GPTOSS_KERNELS_DEVICE_H
#define GPTOSS_KERNELS_DEVICE_H

#include <stdint.h>

#include "../src/core/bf16.h"
#include "../src/hip/hip_runtime_compat.h"

/* bf16 in memory: the upper half of a float's bits, rounded to nearest even */
struct bf16 {
    uint16_t bits;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return gptoss_bf16_float(v.bits); }

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) { return bf16{gptoss_bf16_bits(v)}; }

/* Sums over the whole warp; every lane gets the result. */
template <class T> __device__ __forceinline__ T warp_sum(T v) {
    for (int off = warpSize / 2; off > 0; off /= 2)
        v += __shfl_xor(v, off);
    return v;
}

template <class T> __device__ __forceinline__ T warp_max(T v) {
    for (int off = warpSize / 2; off > 0; off /= 2) {
        T o = __shfl_xor(v, off);
        v = o > v ? o : v;
    }
    return v;
}

/* Block-wide sum; every thread gets the result. scratch holds one T per
 * warp (blockDim.x / 32 at most, the smallest warp). */
template <class T> __device__ T block_sum(T v, T *scratch) {
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    int warps = (blockDim.x + warpSize - 1) / warpSize;
    v = warp_sum(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    T total = 0;
    for (int w = 0; w < warps; w++)
        total += scratch[w];
    return total;
}

#endif
