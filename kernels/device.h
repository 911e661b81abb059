/* Device-side helpers shared by the kernel files: the bf16 storage type,
 * typed loads that widen to float, and warp/block reductions that make no
 * assumption about the warp size (32 on NVIDIA, 64 on gfx90a). */
#ifndef GPTOSS_KERNELS_DEVICE_H
#define GPTOSS_KERNELS_DEVICE_H

#include <stdint.h>

#include "../src/core/bf16.h"
#include "../contract/platform.h"

/* bf16 in memory: the upper half of a float's bits, rounded to nearest even */
struct bf16 {
    uint16_t bits;
};

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return gptoss_bf16_float(v.bits); }

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) { return bf16{gptoss_bf16_bits(v)}; }

/* The values of a 16-byte load as floats: 8 bf16 or 4 float (the type
 * pointer only picks the overload). */
__device__ __forceinline__ void unpack16(uint4 v, float *out, const bf16 *) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        out[2 * j] = gptoss_bf16_float((uint16_t)(w[j] & 0xffff));
        out[2 * j + 1] = gptoss_bf16_float((uint16_t)(w[j] >> 16));
    }
}
__device__ __forceinline__ void unpack16(uint4 v, float *out, const float *) {
    out[0] = __uint_as_float(v.x);
    out[1] = __uint_as_float(v.y);
    out[2] = __uint_as_float(v.z);
    out[3] = __uint_as_float(v.w);
}

/* 8 consecutive bf16 of a row from k on, zeros from k_end on; vec: row + k
 * is 16-byte aligned and k_end a multiple of 8, so one load does */
__device__ __forceinline__ uint4 load_bf16x8(const bf16 *row, int k, int k_end, bool vec) {
    if (vec)
        return k < k_end ? *(const uint4 *)(row + k) : make_uint4(0, 0, 0, 0);
    uint16_t h[8];
    for (int j = 0; j < 8; j++)
        h[j] = k + j < k_end ? row[k + j].bits : 0;
    return make_uint4(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16,
                      h[4] | (uint32_t)h[5] << 16, h[6] | (uint32_t)h[7] << 16);
}

/* The widest warp of the platform, for launch bounds (the code itself reads
 * warpSize) */
#if defined(__HIP_PLATFORM_NVIDIA__)
#define GPTOSS_WARP_MAX 32
#else
#define GPTOSS_WARP_MAX 64
#endif

/* __launch_bounds__ with CUDA's meaning on every platform: at most `threads`
 * threads a block, registers for `blocks` resident blocks a multiprocessor.
 * HIP on AMD reads the second number as waves per SIMD (a compute unit has 4
 * SIMDs of 64-lane waves), so there it is converted: taken as is, 6 blocks
 * of 128 threads capped a gfx90a kernel at 80 registers, and it spilled. */
#if defined(__HIP_PLATFORM_NVIDIA__)
#define GPTOSS_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#else
#define GPTOSS_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads, ((blocks) * (threads) + 255) / 256)
#endif

/* 16-byte copies from global to shared memory that complete in the
 * background (cp.async, sm_80+), in groups: copy16_async issues, then
 * copy_commit closes the group, and copy_wait<N>() waits until at most N of
 * this thread's groups are still in flight. Without valid the copy writes
 * zeros and reads nothing (src must still be a global address). Elsewhere
 * the copy happens at once and the group calls do nothing. */
#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GPTOSS_ASYNC_COPY 1
#endif

__device__ __forceinline__ void copy16_async(void *dst, const void *src, bool valid) {
#if defined(GPTOSS_ASYNC_COPY)
    unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to), "l"(src), "r"(valid ? 16 : 0));
#else
    *(uint4 *)dst = valid ? *(const uint4 *)src : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void copy_commit() {
#if defined(GPTOSS_ASYNC_COPY)
    asm volatile("cp.async.commit_group;");
#endif
}

template <int N> __device__ __forceinline__ void copy_wait() {
#if defined(GPTOSS_ASYNC_COPY)
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}

/* Reduction operators for warp_all and block_all. */
struct op_add {
    template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct op_max {
    template <class T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};
struct op_min {
    template <class T> __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
struct op_or {
    template <class T> __device__ T operator()(T a, T b) const { return a | b; }
};

/* op over the whole warp; every lane gets the result. */
template <class T, class Op> __device__ __forceinline__ T warp_all(T v, Op op) {
    for (int off = warpSize / 2; off > 0; off /= 2)
        v = op(v, __shfl_xor(v, off));
    return v;
}

template <class T> __device__ __forceinline__ T warp_sum(T v) { return warp_all(v, op_add()); }
template <class T> __device__ __forceinline__ T warp_max(T v) { return warp_all(v, op_max()); }

/* the sum of v over this lane and the lanes below it */
template <class T> __device__ __forceinline__ T warp_inclusive_sum(T v) {
    const int lane = threadIdx.x % warpSize;
    for (int o = 1; o < warpSize; o *= 2) {
        T below = __shfl_up(v, o);
        if (lane >= o)
            v += below;
    }
    return v;
}

/* (v, i) becomes (ov, oi) when that is the higher value, or the same with a
 * lower id (-0 and +0 are the same): the golden's order for top-k and argmax;
 * NaN never wins, and i = INT_MAX means "nothing yet" */
__device__ __forceinline__ void take_better(float &v, int &i, float ov, int oi) {
    if (ov > v || (ov == v && oi < i)) {
        v = ov;
        i = oi;
    }
}

/* take_better over the warp; every lane gets the winner */
__device__ __forceinline__ void warp_best(float &v, int &i) {
    for (int o = warpSize / 2; o > 0; o /= 2) {
        float ov = __shfl_xor(v, o);
        int oi = __shfl_xor(i, o);
        take_better(v, i, ov, oi);
    }
}

/* op over the block, the same value in every thread, the warps folded in a
 * fixed order (so sums are reproducible). slots holds one T per warp
 * (blockDim.x / 32 at most, the smallest warp); calls may follow each other
 * with the same slots. */
template <class T, class Op> __device__ T block_all(T v, Op op, T *slots) {
    v = warp_all(v, op);
    if (threadIdx.x % warpSize == 0)
        slots[threadIdx.x / warpSize] = v;
    __syncthreads();
    T r = slots[0];
    for (int w = 1; w < (int)((blockDim.x + warpSize - 1) / warpSize); w++)
        r = op(r, slots[w]);
    __syncthreads();
    return r;
}

#endif
