/* The streaming GEMM (bf16 mode), a part of gemm.hip, for decode of the
 * dense layers (also dense GEMMs of a few dozen rows, whose larger tiles
 * would leave the GPU half idle) and the experts' grouped GEMMs at a few
 * rows per expert: operands loaded straight into the registers the matrix
 * cores read, a block covering 16 rows by 32 outputs with 4 warps, warp w
 * doing outputs 16 (w / 2).. over the even (w even) or odd chunks, DEPTH
 * chunks in flight. Each weight is read once per block, with many loads
 * outstanding even when the grid is small. The ring's DEPTH sets the blocks
 * a multiprocessor holds (registers): six at DEPTH 3, four at 5, two at 8
 * (the launcher picks by the grid).
 *
 * F is the product's fragment policy (matrix_core.h): tile16 for tiles of
 * 16 rows, or on NVIDIA tile8w for tiles of up to 8, the weights on the
 * mma's 16-row side and the rows on its 8-wide one: half the products and
 * X loads a chunk, and no empty rows multiplied in a decode step or an
 * expert's few pairs. Either gives the same bits.
 *
 * With a coded weight format W (MXFP4: the experts' tiles, mxfp4.h) a
 * lane's ring holds its code words and scales, a quarter of the bytes, and
 * turns them into the same bf16 pieces just before they are multiplied.
 *
 * With the ROPE_KV epilogue (a qkv projection, heads of 64) block y takes
 * outputs 16 (y % 2).. of head y / 2 and the 16 half a head further, so
 * each rotated pair (i, i + 32) is the block's, whose shared row buffer
 * brings the two halves together. */
#ifndef GPTOSS_KERNELS_GEMM_STREAM_H
#define GPTOSS_KERNELS_GEMM_STREAM_H

#include "gemm_common.h"
#include "matrix_core.h"
#include "rope.h"

namespace {

/* 32 outputs a block (4 warps) rather than 64 (8 warps): twice the blocks,
 * each half as long, so a shorter tail after the last full wave */
constexpr int STREAM_BN = 32;

/* The block's sums into the epilogue: the even warps' through shared
 * memory (even) to the odd ones, which store; with ROPE_KV the outputs
 * stay there and the block rotates and stores each pair (i, i + 32) of its
 * head's half. n0: the warp's first output. */
template <class F>
__device__ __forceinline__ void stream_store(const gptoss_gemm_args &a, const row_tile &t, const typename F::acc_t &acc,
                                             float *even, int n0, bool rope) {
    constexpr int BN = STREAM_BN;
    const int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, parity = warp & 1;
#pragma unroll
    for (int half = 0; half < 2; half++) { /* even, then odd + even */
        if (parity == half)
#pragma unroll
            for (int i = 0; i < F::N; i += 2) {
                int row, col;
                if (!F::coords(i, lane, row, col))
                    continue;
                float *e = even + row * BN + 16 * (warp >> 1) + col;
                int p = t.begin + row, o = n0 + col;
                if (half == 0) {
                    e[0] = acc[i];
                    e[1] = acc[i + 1];
                } else if (rope) { /* the outputs as a STORE would write them, for the pairs below */
                    float v0 = e[0] + acc[i], v1 = e[1] + acc[i + 1];
                    add_bias(a, t, o, v0, v1);
                    e[0] = v0;
                    e[1] = v1;
                } else if (p < t.end && o < a.n) {
                    epilogue<bf16>(a, t, p, o, e[0] + acc[i], e[1] + acc[i + 1]);
                }
            }
        if (half == 0)
            __syncthreads();
    }
    if (rope) {
        __syncthreads();
        const int head = blockIdx.y >> 1, i0 = (blockIdx.y & 1) * 16;
        for (int item = threadIdx.x; item < F::ROWS * 16; item += blockDim.x) {
            const int row = item / 16, c = item % 16, p = t.begin + row;
            if (p >= t.end)
                continue;
            const float x0 = even[row * BN + c], x1 = even[row * BN + 16 + c];
            if (a.rope.kv_bf16)
                rope_store_head_pair<bf16>(a.rope, p, head, i0 + c, x0, x1);
            else
                rope_store_head_pair<float>(a.rope, p, head, i0 + c, x0, x1);
        }
    }
}

/* FULL: k a multiple of the chunk and n of the block's outputs, so every
 * load of a chunk lies in bounds (the ring skips chunks past the end,
 * which are never multiplied) and rows past the tile's end read its last
 * row (their sums are never stored): the loads need no checks. With them
 * the dense GEMMs at 64 rows issued an instruction every other cycle, and
 * the depth-3 kernel spilled; without them it does not. */
template <class W, class F, int DEPTH, bool VEC, bool FULL>
__global__ void GPTOSS_LAUNCH_BOUNDS(STREAM_BN / 8 * GPTOSS_WARP_MAX, DEPTH <= 3 ? 6 : DEPTH <= 5 ? 4 : 2) gemm_stream_kernel(gptoss_gemm_args a) {
    constexpr int P = tile16::PIECES, BN = STREAM_BN;
    constexpr bool CODED = W::CODED;
    typedef typename W::pieces WP;
    /* a dense GEMM's first weights are loaded before the kernel before it
     * ends (launch.h); a grouped one learns its expert, and gathered rows
     * their index, from what that kernel wrote */
    const bool weights_first = !a.tiles && !a.x_rows;
    if (!weights_first)
        pdl_wait();
    row_tile t;
    if (!block_rows(a, blockIdx.x, F::ROWS, t)) /* grouped tiles past the table's count only */
        return;
    __shared__ float even[F::ROWS * BN];
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, parity = warp & 1;
    const bool rope = a.epilogue == GPTOSS_GEMM_ROPE_KV;
    int n0 = rope ? (blockIdx.y >> 1) * 64 + (blockIdx.y & 1) * 16 + 32 * (warp >> 1)
                  : blockIdx.y * BN + 16 * (warp >> 1);
    const int kofs = tile16::piece_k(lane), chunks = (a.k + MX_KC - 1) / MX_KC;
    const bf16 *w_rows = CODED ? nullptr : bf16_weights::matrix(a, t.expert);
    const bool w_tiled = gptoss_layout_tiled(a.w_layout);
    constexpr int XP = F::X_PIECES;
    const bf16 *src[2][P]; /* X, then W, at chunk 0 */
#pragma unroll
    for (int j = 0; j < P; j++) {
        if (j < XP) {
            const int xr = F::x_piece_row(lane, j);
            const bf16 *x = x_row(a, t, FULL ? min(t.begin + xr, t.end - 1) : t.begin + xr);
            src[0][j] = x ? x + kofs : nullptr;
        }
        const int r = tile16::piece_row(lane, j);
        src[1][j] = CODED || n0 + r >= a.n ? nullptr
                    : w_tiled              ? w_rows + gptoss_tiled_at(n0 + r, kofs, chunks)
                                           : w_rows + (size_t)(n0 + r) * a.k + kofs;
    }
    /* coded: the warp's 16 rows are one band of tiles, a chunk a tile further */
    const uint8_t *w_tiles = nullptr;
    if constexpr (CODED)
        w_tiles = n0 < a.n ? W::tile(W::matrix(a, t.expert), n0 / 16, 0, chunks) : nullptr;
    /* tiled weights: a chunk further is a tile further, zeros past k */
    const int w_step = w_tiled ? GPTOSS_TILE_ELEMS : MX_KC, w_end = w_tiled ? chunks * MX_KC : a.k - kofs;
    /* chunk c0 + ahead of X, then of W, ahead known when the ring is
     * unrolled: FULL loads then address from one offset per round of the
     * ring, and skip the ring's fetches past the end (never multiplied) */
    const uint4 zero = make_uint4(0, 0, 0, 0);
    auto fetch_x = [&](int c0, int ahead, uint4 (&xb)[XP]) {
        const int c = c0 + ahead;
        if constexpr (FULL) {
            if (c >= chunks)
                return;
#pragma unroll
            for (int j = 0; j < XP; j++)
                xb[j] = *(const uint4 *)(src[0][j] + (size_t)c0 * MX_KC + ahead * MX_KC);
        } else {
#pragma unroll
            for (int j = 0; j < XP; j++)
                xb[j] = src[0][j] && c < chunks ? load8<VEC>(src[0][j], c * MX_KC, a.k - kofs) : zero;
        }
    };
    auto fetch_w = [&](int c0, int ahead, WP &wb) {
        const int c = c0 + ahead;
        if constexpr (FULL) {
            if (c >= chunks)
                return;
            if constexpr (CODED)
                wb.load(w_tiles + (size_t)c0 * W::TILE_BYTES + ahead * W::TILE_BYTES, lane);
            else
#pragma unroll
                for (int j = 0; j < P; j++)
                    wb.v[j] = *(const uint4 *)(src[1][j] + (size_t)c * w_step);
        } else {
            if constexpr (CODED) {
                if (w_tiles && c < chunks)
                    wb.load(w_tiles + (size_t)c * W::TILE_BYTES, lane);
                else
                    wb.zero();
            } else {
#pragma unroll
                for (int j = 0; j < P; j++)
                    wb.v[j] = src[1][j] && c < chunks
                                  ? load8<VEC>(src[1][j] + (size_t)c * (w_step - MX_KC), c * MX_KC, w_end)
                                  : zero;
            }
        }
    };
    typename F::acc_t acc;
#pragma unroll
    for (int i = 0; i < F::N; i++)
        acc[i] = 0.0f;
    uint4 x_ring[DEPTH][XP];
    WP w_ring[DEPTH];
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        fetch_w(parity, 2 * d, w_ring[d]);
    if (weights_first)
        pdl_wait();
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        fetch_x(parity, 2 * d, x_ring[d]);
    for (int c = parity; c < chunks; c += 2 * DEPTH) {
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            if (c + 2 * d >= chunks)
                break;
            uint4 w[P];
            w_ring[d].to_bf16(w);
            F::mma32(acc, x_ring[d], w, lane);
            fetch_x(c, 2 * (d + DEPTH), x_ring[d]);
            fetch_w(c, 2 * (d + DEPTH), w_ring[d]);
        }
    }
    pdl_launch_dependents();
    F::pair(acc, lane);
    stream_store<F>(a, t, acc, even, n0, rope);
}

template <class W, class F, int DEPTH> gemm_kernel_t stream_kernel(bool vec, bool full) {
    return full  ? gemm_stream_kernel<W, F, DEPTH, true, true>
           : vec ? gemm_stream_kernel<W, F, DEPTH, true, false> : gemm_stream_kernel<W, F, DEPTH, false, false>;
}

/* row_blocks tiles of F::ROWS rows (grouped: entries of the tile table) */
template <class W, class F>
hipError_t launch_gemm_stream(const gptoss_gemm_args *a, int row_blocks, const gptoss_gpu_shape *dev,
                              hipStream_t stream) {
    /* The ring is as deep as the grid lets it be: a grid the
     * multiprocessors hold at once at depth 8 takes it (more loads in
     * flight per warp); a dense one of more than 4 but at most 6 blocks
     * per multiprocessor takes depth 3, which holds 6 (one wave, where a
     * deeper ring would need two); any other takes depth 5, which holds 4
     * (the experts' grids were slower at 3). Coded formats are the
     * exception: MXFP4 experts' kernel is bound by issuing the
     * dequantization rather than by memory, so beyond one wave of depth 8
     * six blocks of depth 3 hide more latency than four of depth 5. On
     * 8-row tiles a coded ring of 5 fits in 72 registers (seven blocks a
     * multiprocessor), which beat 3, 8 and 12 at every grid. */
    const bool grouped = a->tiles != nullptr, vec = a->k % 8 == 0;
    dim3 grid(row_blocks, (a->n + STREAM_BN - 1) / STREAM_BN);
    long blocks = (long)grid.x * grid.y, fit = 2L * dev->multiprocessors;
    const bool full = vec && a->k % MX_KC == 0 && a->n % STREAM_BN == 0;
    gemm_kernel_t kernel;
    if constexpr (W::CODED)
        kernel = F::ROWS < 16    ? stream_kernel<W, F, 5>(vec, full)
                 : blocks <= fit ? stream_kernel<W, F, 8>(vec, full)
                                 : stream_kernel<W, F, 3>(vec, full);
    else
        kernel = blocks <= fit                                        ? stream_kernel<W, F, 8>(vec, full)
                 : !grouped && blocks > 2 * fit && blocks <= 3 * fit ? stream_kernel<W, F, 3>(vec, full)
                                                                      : stream_kernel<W, F, 5>(vec, full);
    return launch_kernel(kernel, grid, dim3(STREAM_BN / 8 * dev->warp), 0, stream, dev->programmatic, *a);
}

} // namespace

#endif
