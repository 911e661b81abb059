/* Linear layers: Y[p][o] = sum_i X[p][i] * W[o][i] for p in a list of rows,
 * with bias and an epilogue (store, add into the residual, or SwiGLU over
 * mlp1's interleaved gate/up outputs). Rows may be gathered from another
 * array (MoE: a sorted pair reads its token's activations) and grouped by
 * expert through a tile table built on the device (moe_dispatch.hip), so the
 * host launches a fixed grid without knowing how many rows each expert got.
 *
 * Two kernels:
 *  - exact (fp32 mode): float weights and inputs, each output a double
 *    accumulator fed float products, as the golden's matmul: any summation
 *    order rounds to the same float except in rare double-rounding ties.
 *  - matrix (bf16 mode): bf16 weights and inputs on the matrix cores with
 *    fp32 accumulators (matrix_core.h); a block covers 16 rows by 16 outputs
 *    (few rows: decode, each weight read once for up to 16 rows) or 32 by 32
 *    (prefill and large batches), and splits K over its warps in a fixed
 *    way (below), so that small grids still keep many loads in flight. */
#include "device.h"
#include "launchers.h"
#include "matrix_core.h"
#include "../src/core/course_math.h"

namespace {

/* the rows a block covers: [begin, end) of the pair space, and its expert */
struct row_tile {
    int expert, begin, end;
};

__device__ __forceinline__ bool block_rows(const gptoss_gemm_args &a, int bm, row_tile &t) {
    if (a.tiles) {
        if ((int)blockIdx.x >= *a.tile_count)
            return false;
        const int *e = a.tiles + 4 * blockIdx.x;
        t.expert = e[0];
        t.begin = e[1];
        t.end = e[2];
        return true;
    }
    t.expert = 0;
    t.begin = blockIdx.x * bm;
    t.end = min(a.rows, t.begin + bm);
    return t.begin < t.end;
}

/* One pair of outputs (o, o + 1) of row p; o + 1 may be past n (then v1 is
 * ignored) except for SwiGLU, whose n is even. */
template <class T>
__device__ __forceinline__ void epilogue(const gptoss_gemm_args &a, const row_tile &t, int p, int o,
                                         float v0, float v1) {
    const float *bias = a.bias ? a.bias + (size_t)t.expert * a.n : nullptr;
    if (bias) {
        v0 += bias[o];
        if (o + 1 < a.n)
            v1 += bias[o + 1];
    }
    if (a.epilogue == GPTOSS_GEMM_SWIGLU) {
        T *act = (T *)a.act + (size_t)p * (a.n / 2) + o / 2;
        *act = from_float<T>(gptoss_swiglu(v0, v1, a.swiglu_limit));
        return;
    }
    float *y = a.y + (size_t)p * a.n + o;
    if (a.epilogue == GPTOSS_GEMM_RESIDUAL) {
        y[0] += v0;
        if (o + 1 < a.n)
            y[1] += v1;
    } else {
        y[0] = v0;
        if (o + 1 < a.n)
            y[1] = v1;
    }
}

/* ---- exact: fp32 in, double accumulators ---------------------------------- */

constexpr int EX_BM = 32, EX_BN = 64, EX_BK = 32, EX_THREADS = 256;

__global__ void __launch_bounds__(EX_THREADS) gemm_exact_kernel(gptoss_gemm_args a) {
    row_tile t;
    if (!block_rows(a, EX_BM, t))
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
                int src = a.x_rows ? a.x_rows[p] : p;
                v = X[(size_t)src * a.k + k];
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

/* ---- matrix cores: bf16 in, fp32 accumulators ------------------------------ */

/* K goes by in chunks of 32; chunk c belongs to segment c % MX_SEGMENTS, and
 * warp w of a block runs segment w: its chunks in ascending order, the
 * operands loaded straight into the registers the matrix cores read
 * (matrix_core.h), up to DEPTH chunks in flight. The segments' sums are then added
 * in segment order. An output's arithmetic thus depends on K alone, never on
 * the tile shape the row count picked: a row gets the same bits alone or in
 * any batch. */
constexpr int MX_KC = 32, MX_SEGMENTS = 8;

/* 8 consecutive bf16 of a row starting at k, zero past k_end */
template <bool VEC> __device__ __forceinline__ uint4 load8(const bf16 *row, int k, int k_end);
template <> __device__ __forceinline__ uint4 load8<true>(const bf16 *row, int k, int k_end) {
    return k < k_end ? *(const uint4 *)(row + k) : make_uint4(0, 0, 0, 0);
}
template <> __device__ __forceinline__ uint4 load8<false>(const bf16 *row, int k, int k_end) {
    uint16_t h[8];
    for (int j = 0; j < 8; j++)
        h[j] = k + j < k_end ? row[k + j].bits : 0;
    return make_uint4(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16,
                      h[4] | (uint32_t)h[5] << 16, h[6] | (uint32_t)h[7] << 16);
}

/* A block computes 16 MT rows by 16 NT outputs. */
template <int MT, int NT, int DEPTH, bool VEC>
__global__ void __launch_bounds__(MX_SEGMENTS * GPTOSS_WARP_MAX) gemm_matrix_kernel(gptoss_gemm_args a) {
    constexpr int BM = 16 * MT, BN = 16 * NT, P = tile16::PIECES, T = MT + NT;
    row_tile t;
    if (!block_rows(a, BM, t))
        return;
    __shared__ float sum[BM * BN];
    const bf16 *W = (const bf16 *)a.w + (size_t)t.expert * a.n * a.k;
    const bf16 *X = (const bf16 *)a.x;
    int n0 = blockIdx.y * BN, lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    const int kofs = tile16::piece_k(lane), chunks = (a.k + MX_KC - 1) / MX_KC;

    /* the rows of this lane's pieces: tiles 0..MT-1 of X, then NT of W */
    const bf16 *src[T][P];
#pragma unroll
    for (int m = 0; m < T; m++)
#pragma unroll
        for (int j = 0; j < P; j++) {
            int r = tile16::piece_row(lane, j);
            src[m][j] = nullptr;
            if (m < MT) {
                int p = t.begin + 16 * m + r;
                if (p < t.end)
                    src[m][j] = X + (size_t)(a.x_rows ? a.x_rows[p] : p) * a.k + kofs;
            } else if (n0 + 16 * (m - MT) + r < a.n) {
                src[m][j] = W + (size_t)(n0 + 16 * (m - MT) + r) * a.k + kofs;
            }
        }
    auto fetch = [&](int c, uint4 (&buf)[T][P]) {
#pragma unroll
        for (int m = 0; m < T; m++)
#pragma unroll
            for (int j = 0; j < P; j++)
                buf[m][j] = src[m][j] && c < chunks ? load8<VEC>(src[m][j], c * MX_KC, a.k - kofs)
                                                    : make_uint4(0, 0, 0, 0);
    };

    tile16::acc_t acc[MT][NT];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < tile16::N; i++)
                acc[m][n][i] = 0.0f;
    uint4 ring[DEPTH][T][P];
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        fetch(warp + d * MX_SEGMENTS, ring[d]);
    for (int c = warp; c < chunks; c += DEPTH * MX_SEGMENTS) {
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            if (c + d * MX_SEGMENTS >= chunks)
                break;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NT; n++)
                    tile16::mma32(acc[m][n], ring[d][m], ring[d][MT + n], lane);
            fetch(c + (d + DEPTH) * MX_SEGMENTS, ring[d]);
        }
    }

    /* the segments in order: sum = s0, += s1, ...; the last warp adds its own
     * and runs the epilogue */
    for (int w = 0; w < MX_SEGMENTS; w++) {
        if (warp == w)
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int i = 0; i < tile16::N; i += 2) {
                        int row, col;
                        if (!tile16::coords(i, lane, row, col))
                            continue;
                        float *s = sum + (16 * m + row) * BN + 16 * n + col;
                        float v0 = w ? s[0] + acc[m][n][i] : acc[m][n][i];
                        float v1 = w ? s[1] + acc[m][n][i + 1] : acc[m][n][i + 1];
                        int p = t.begin + 16 * m + row, o = n0 + 16 * n + col;
                        if (w < MX_SEGMENTS - 1) {
                            s[0] = v0;
                            s[1] = v1;
                        } else if (p < t.end && o < a.n) {
                            epilogue<bf16>(a, t, p, o, v0, v1);
                        }
                    }
        if (w < MX_SEGMENTS - 1)
            __syncthreads();
    }
}

} // namespace

int gptoss_gemm_tile_rows(const gptoss_gemm_args *a, int bf16_mode) {
    if (!bf16_mode)
        return EX_BM;
    /* rows per block: enough for the expected rows of a tile, no more */
    int expect = a->rows_hint > 0 ? a->rows_hint : a->rows;
    return expect <= 16 ? 16 : 32;
}

hipError_t gptoss_launch_gemm(const gptoss_gemm_args *a, int bf16_mode, int max_tiles, int warp,
                              hipStream_t stream) {
    int bm = gptoss_gemm_tile_rows(a, bf16_mode);
    int row_blocks = a->tiles ? max_tiles : (a->rows + bm - 1) / bm;
    if (row_blocks <= 0)
        return hipSuccess;
    if (!bf16_mode) {
        dim3 grid(row_blocks, (a->n + EX_BN - 1) / EX_BN);
        hipLaunchKernelGGL(gemm_exact_kernel, grid, dim3(EX_THREADS), 0, stream, *a);
        return hipGetLastError();
    }
    dim3 block(MX_SEGMENTS * warp);
    bool vec = a->k % 8 == 0;
#define GPTOSS_GEMM_LAUNCH(MT, NT, DEPTH)                                                          \
    do {                                                                                           \
        dim3 grid(row_blocks, (a->n + 16 * NT - 1) / (16 * NT));                                   \
        if (vec)                                                                                   \
            hipLaunchKernelGGL(HIP_KERNEL_NAME(gemm_matrix_kernel<MT, NT, DEPTH, true>), grid,     \
                               block, 0, stream, *a);                                              \
        else                                                                                       \
            hipLaunchKernelGGL(HIP_KERNEL_NAME(gemm_matrix_kernel<MT, NT, DEPTH, false>), grid,    \
                               block, 0, stream, *a);                                              \
    } while (0)
    /* few rows stream weights (deep prefetch); more rows reuse them */
    if (bm == 16)
        GPTOSS_GEMM_LAUNCH(1, 1, 4);
    else
        GPTOSS_GEMM_LAUNCH(2, 2, 2);
#undef GPTOSS_GEMM_LAUNCH
    return hipGetLastError();
}
