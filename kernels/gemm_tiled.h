/* The tiled GEMM (bf16 mode), a part of gemm.hip, for the dense GEMMs of
 * more than 16 rows over [n][k] weights that the staged kernel does not
 * take: a
 * block covers 16 MT rows (32 or 64) by 64 outputs with 4 warps, warp w
 * taking the 16 rows 16 (w / (4 / MT)) .. and 16 MT outputs. Chunks go
 * through a ring of STAGES buffers in shared memory, STAGES - 1 of them in
 * flight while the block multiplies the oldest (asynchronous copies where
 * the target has them); each warp reads the same pieces the streaming
 * kernel loads and keeps an even and an odd sum. Rows of 64 bytes: the
 * 16-byte reads of a quarter warp cover two whole rows, without bank
 * conflicts. Warps whose rows all lie past the end (in the last tile) only
 * help copy. */
#ifndef GPTOSS_KERNELS_GEMM_TILED_H
#define GPTOSS_KERNELS_GEMM_TILED_H

#include "gemm_common.h"
#include "matrix_core.h"

namespace {

constexpr int MX_BN = 64; /* outputs per block */

template <int MT, bool VEC>
__global__ void __launch_bounds__(4 * GPTOSS_WARP_MAX) gemm_tiled_kernel(gptoss_gemm_args a) {
    constexpr int BM = 16 * MT, WN = MX_BN / (4 / MT), NT = WN / 16, P = tile16::PIECES, STAGES = 4;
    constexpr int ROWS = BM + MX_BN, PIECES = ROWS * (MX_KC / 8), PER = (PIECES + 127) / 128;
    pdl_wait();
    row_tile t;
    if (!block_rows(a, blockIdx.x, BM, t))
        return;
    __shared__ __attribute__((aligned(16))) bf16 stage[STAGES][ROWS * MX_KC];
    int tid = threadIdx.x, threads = blockDim.x, lane = tid % warpSize, warp = tid / warpSize;
    int n0 = blockIdx.y * MX_BN, wm = warp / (4 / MT), wn = warp % (4 / MT);
    const bool active = t.begin + 16 * wm < t.end;
    const int chunks = (a.k + MX_KC - 1) / MX_KC;
    const bf16 *W = bf16_weights::matrix(a, t.expert);

    const bf16 *src[PER]; /* piece q: row q / 4 (X rows, then W rows), k 8 (q % 4) */
#pragma unroll
    for (int j = 0; j < PER; j++) {
        int q = tid + j * threads, r = q / 4;
        src[j] = nullptr;
        if (q < PIECES && r < BM)
            src[j] = x_row(a, t, t.begin + r);
        else if (q < PIECES && n0 + r - BM < a.n)
            src[j] = W + (size_t)(n0 + r - BM) * a.k;
        if (src[j])
            src[j] += 8 * (q % 4);
    }
    /* chunk c into its ring buffer; always one group, empty or not */
    auto issue = [&](int c) {
        bf16 *buf = stage[c % STAGES];
#pragma unroll
        for (int j = 0; j < PER; j++) {
            int q = tid + j * threads, k = c * MX_KC + 8 * (q % 4);
            if (q >= PIECES || c >= chunks)
                continue;
            bool valid = src[j] && k < a.k;
            if (VEC)
                copy16_async(buf + q * 8, valid ? src[j] + c * MX_KC : W, valid);
            else
                *(uint4 *)(buf + q * 8) = valid ? load8<false>(src[j], c * MX_KC, a.k - 8 * (q % 4))
                                                : make_uint4(0, 0, 0, 0);
        }
        copy_commit();
    };

    tile16::acc_t acc[2][NT];
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < tile16::N; i++)
                acc[h][n][i] = 0.0f;
#pragma unroll
    for (int c = 0; c < STAGES - 1; c++)
        issue(c);
    const int kofs = tile16::piece_k(lane);
    for (int c0 = 0; c0 < chunks; c0 += 2) {
#pragma unroll
        for (int h = 0; h < 2; h++) { /* chunk c0 + h: even or odd */
            int c = c0 + h;
            if (c >= chunks)
                break;
            copy_wait<STAGES - 2>();
            __syncthreads(); /* chunk c is in; everyone is done with chunk c - 1's buffer */
            issue(c + STAGES - 1);
            if (!active)
                continue;
            const bf16 *buf = stage[c % STAGES];
            uint4 xp[P], wp[NT][P];
#pragma unroll
            for (int j = 0; j < P; j++) {
                int r = tile16::piece_row(lane, j);
                xp[j] = *(const uint4 *)(buf + (16 * wm + r) * MX_KC + kofs);
#pragma unroll
                for (int n = 0; n < NT; n++)
                    wp[n][j] = *(const uint4 *)(buf + (BM + WN * wn + 16 * n + r) * MX_KC + kofs);
            }
#pragma unroll
            for (int n = 0; n < NT; n++)
                tile16::mma32(acc[h][n], xp, wp[n], lane);
        }
    }
    pdl_launch_dependents();
    if (!active)
        return;
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int i = 0; i < tile16::N; i += 2) {
            int row, col;
            if (!tile16::coords(i, lane, row, col))
                continue;
            int p = t.begin + 16 * wm + row, o = n0 + WN * wn + 16 * n + col;
            if (p < t.end && o < a.n)
                epilogue<bf16>(a, t, p, o, acc[0][n][i] + acc[1][n][i], acc[0][n][i + 1] + acc[1][n][i + 1]);
        }
}

/* row_blocks tiles of bm rows, 32 or 64 */
hipError_t launch_gemm_tiled(const gptoss_gemm_args *a, int row_blocks, int bm, const gptoss_gpu_shape *dev,
                             hipStream_t stream) {
    const bool vec = a->k % 8 == 0;
    dim3 grid(row_blocks, (a->n + MX_BN - 1) / MX_BN);
    gemm_kernel_t kernel;
    if (bm == 32)
        kernel = vec ? gemm_tiled_kernel<2, true> : gemm_tiled_kernel<2, false>;
    else
        kernel = vec ? gemm_tiled_kernel<4, true> : gemm_tiled_kernel<4, false>;
    return launch_kernel(kernel, grid, dim3(4 * dev->warp), 0, stream, dev->programmatic, *a);
}

} // namespace

#endif
