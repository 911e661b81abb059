/* The exact GEMM (fp32 mode), a part of gemm.hip: float weights and inputs,
 * each output a double accumulator fed float products, as the golden's
 * matmul (src/core/golden_forward.c): any summation order rounds to the same float
 * except in rare double-rounding ties. Blocks of 32 rows by 64 outputs,
 * operands staged through shared memory in steps of 32 k. */
#ifndef GPTOSS_KERNELS_GEMM_EXACT_H
#define GPTOSS_KERNELS_GEMM_EXACT_H

#include "gemm_common.h"

namespace {

constexpr int EX_BM = 32, EX_BN = 64, EX_BK = 32, EX_THREADS = 256;

__global__ void __launch_bounds__(EX_THREADS) gemm_exact_kernel(gptoss_gemm_args a) {
    pdl_wait();
    row_tile t;
    if (!block_rows(a, blockIdx.x, EX_BM, t))
        return;
    __shared__ float xs[EX_BM][EX_BK + 1];
    __shared__ float ws[EX_BN][EX_BK + 1];
    const float *W = (const float *)a.w + (size_t)t.expert * a.n * a.k;
    const float *X = (const float *)a.x;
    int n0 = blockIdx.y * EX_BN, tid = threadIdx.x;
    int ty = tid / 16, tx = tid % 16; /* rows ty, ty + 16; columns 4tx .. 4tx + 3 */
    double acc[2][4] = {};
    for (int k0 = 0; k0 < a.k; k0 += EX_BK) {
        for (int e = tid; e < EX_BM * EX_BK; e += EX_THREADS) {
            int r = e / EX_BK, k = k0 + e % EX_BK, p = t.begin + r;
            float v = 0.0f;
            if (p < t.end && k < a.k) {
                v = X[(size_t)x_index(a, p) * a.k + k];
            }
            xs[r][e % EX_BK] = v;
        }
        for (int e = tid; e < EX_BN * EX_BK; e += EX_THREADS) {
            int r = e / EX_BK, k = k0 + e % EX_BK, o = n0 + r;
            ws[r][e % EX_BK] = o < a.n && k < a.k ? W[(size_t)o * a.k + k] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < EX_BK; k++) {
            float x0 = xs[ty][k], x1 = xs[ty + 16][k];
            for (int j = 0; j < 4; j++) {
                float w = ws[4 * tx + j][k];
                acc[0][j] += (double)(x0 * w);
                acc[1][j] += (double)(x1 * w);
            }
        }
        __syncthreads();
    }
    pdl_launch_dependents();
    for (int i = 0; i < 2; i++) {
        int p = t.begin + ty + 16 * i;
        if (p >= t.end)
            continue;
        for (int j = 0; j < 4; j += 2) {
            int o = n0 + 4 * tx + j;
            if (o < a.n)
                epilogue<float>(a, t, p, o, (float)acc[i][j], (float)acc[i][j + 1]);
        }
    }
}

/* row_blocks tiles of EX_BM rows (grouped: entries of the tile table) */
hipError_t launch_gemm_exact(const gptoss_gemm_args *a, int row_blocks, const gptoss_gpu_shape *dev,
                             hipStream_t stream) {
    dim3 grid(row_blocks, (a->n + EX_BN - 1) / EX_BN);
    return launch_kernel(gemm_exact_kernel, grid, dim3(EX_THREADS), 0, stream, dev->programmatic, *a);
}

} // namespace

#endif
