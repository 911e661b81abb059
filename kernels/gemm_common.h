/* The device code the GEMM's kernel families (gemm_exact.h, gemm_stream.h,
 * gemm_tiled.h, gemm_staged.h) run alike: a tile's rows, the bias and the
 * epilogues, the bf16 row loads and the order of a bf16 output's sum, so
 * that whichever family gemm.hip picks, an output gets the same bits. Like
 * the families, a part of gemm.hip's translation unit. */
#ifndef GPTOSS_KERNELS_GEMM_COMMON_H
#define GPTOSS_KERNELS_GEMM_COMMON_H

#include "bf16.h"
#include "device.h"
#include "launch.h"
#include "../contract/launchers.h"
#include "mxfp4.h"
#include "../src/core/course_math.h"

namespace {

/* The order of an output's sum in bf16 mode. K goes by in chunks of 32
 * (zero-filled past K); the even chunks accumulate into one sum and the odd
 * ones into another, each in ascending chunk order, one chunk being one call
 * of tile16::mma32 with the same pieces in every kernel; the result is
 * even + odd. That order depends on K alone, never on the rows in the step
 * or the kernel their count picked, so a row gets the same bits alone or in
 * any batch. */
constexpr int MX_KC = 32;

typedef void (*gemm_kernel_t)(gptoss_gemm_args);

/* the rows a block covers: [begin, end) of the pair space, and its expert */
struct row_tile {
    int expert, begin, end;
};

/* the rows of row tile `tile` (grouped: entry `tile` of the table); false if it has none */
__device__ __forceinline__ bool block_rows(const gptoss_gemm_args &a, int tile, int bm, row_tile &t) {
    if (a.tiles) {
        if (tile >= *a.tile_count)
            return false;
        const int *e = a.tiles + 4 * tile;
        t.expert = e[0];
        t.begin = e[1];
        t.end = e[2];
        return true;
    }
    t.expert = 0;
    t.begin = tile * bm;
    t.end = min(a.rows, t.begin + bm);
    return t.begin < t.end;
}

/* The bias of outputs o and o + 1 (past n, or without a bias: none),
 * loaded once where a thread keeps its outputs over many rows. */
struct pair_bias {
    float b0 = 0.0f, b1 = 0.0f;
    bool on0 = false, on1 = false;
    __device__ __forceinline__ pair_bias(const gptoss_gemm_args &a, const row_tile &t, int o) {
        const float *bias = a.bias ? a.bias + (size_t)t.expert * a.n : nullptr;
        if (bias) {
            on0 = true;
            b0 = bias[o];
            on1 = o + 1 < a.n;
            if (on1)
                b1 = bias[o + 1];
        }
    }
    __device__ __forceinline__ void add(float &v0, float &v1) const {
        if (on0)
            v0 += b0;
        if (on1)
            v1 += b1;
    }
};

/* the bias of outputs o and o + 1 added */
__device__ __forceinline__ void add_bias(const gptoss_gemm_args &a, const row_tile &t, int o, float &v0, float &v1) {
    pair_bias(a, t, o).add(v0, v1);
}

/* Pairs of outputs (o, o + 1) of U rows, rows[u] for u < count, their bias
 * given; o + 1 may be past n (then v1 is ignored) except for SwiGLU, whose
 * n is even. Every row's loads and arithmetic come before the stores, so
 * the rows' latencies (SwiGLU's double exponential, a residual's loads)
 * overlap where a thread stores several rows. */
template <class T, int U>
__device__ __forceinline__ void epilogue_rows(const gptoss_gemm_args &a, const int (&rows)[U], int count, int o,
                                              float (&v0)[U], float (&v1)[U], const pair_bias &bias) {
#pragma unroll
    for (int u = 0; u < U; u++)
        bias.add(v0[u], v1[u]);
    if (a.epilogue == GPTOSS_GEMM_SWIGLU) {
        T act[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            act[u] = from_float<T>(gptoss_swiglu(v0[u], v1[u], a.swiglu_limit));
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u < count)
                ((T *)a.act)[(size_t)rows[u] * (a.n / 2) + o / 2] = act[u];
        return;
    }
    const bool second = o + 1 < a.n;
    if (a.epilogue == GPTOSS_GEMM_RESIDUAL)
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u < count) {
                const float *y = a.y + (size_t)rows[u] * a.n + o;
                v0[u] += y[0];
                if (second)
                    v1[u] += y[1];
            }
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < count) {
            float *y = a.y + (size_t)rows[u] * a.n + o;
            y[0] = v0[u];
            if (second)
                y[1] = v1[u];
        }
}
/* the same for one row p */
template <class T>
__device__ __forceinline__ void epilogue(const gptoss_gemm_args &a, int p, int o, float v0, float v1,
                                         const pair_bias &bias) {
    const int rows[1] = {p};
    float v0s[1] = {v0}, v1s[1] = {v1};
    epilogue_rows<T, 1>(a, rows, 1, o, v0s, v1s, bias);
}
template <class T>
__device__ __forceinline__ void epilogue(const gptoss_gemm_args &a, const row_tile &t, int p, int o,
                                         float v0, float v1) {
    epilogue<T>(a, p, o, v0, v1, pair_bias(a, t, o));
}

/* the row of x that row p reads (MoE: its pair's token) */
__device__ __forceinline__ int x_index(const gptoss_gemm_args &a, int p) { return a.x_rows ? a.x_rows[p] : p; }

/* the matrix-core families' operands (bf16 mode) */

/* 8 consecutive bf16 of a row starting at k, zero past k_end (device.h) */
template <bool VEC> __device__ __forceinline__ uint4 load8(const bf16 *row, int k, int k_end) {
    return load_bf16x8(row, k, k_end, VEC);
}

/* row p's input row, or NULL past the tile */
__device__ __forceinline__ const bf16 *x_row(const gptoss_gemm_args &a, const row_tile &t, int p) {
    if (p >= t.end)
        return nullptr;
    return (const bf16 *)a.x + (size_t)x_index(a, p) * a.k;
}

} // namespace

#endif
