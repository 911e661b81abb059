/* Linear layers: Y[p][o] = sum_i X[p][i] * W[o][i] for p in a list of rows,
 * with bias and an epilogue (store, add into the residual, SwiGLU over
 * mlp1's interleaved gate/up outputs, or RoPE and the KV cache write for
 * the qkv projection: rope.h). Rows may be gathered from another
 * array (MoE: a sorted pair reads its token's activations) and grouped by
 * expert through a tile table built on the device (moe_dispatch.hip), so the
 * host launches a fixed grid without knowing how many rows each expert got.
 *
 * Two kernels:
 *  - exact (fp32 mode): float weights and inputs, each output a double
 *    accumulator fed float products, as the golden's matmul: any summation
 *    order rounds to the same float except in rare double-rounding ties.
 *  - matrix (bf16 mode): bf16 weights ([n][k], or tiled: launchers.h) and
 *    inputs on the matrix cores with fp32 accumulators (matrix_core.h), in
 *    one summation order whatever the kernel (below): streaming (blocks of
 *    16 rows by 32 outputs, operands straight into registers) for
 *    decode and the experts at up to 16 rows per expert, staged (32- or
 *    64-row tiles by 128 outputs through a ring of shared-memory stages)
 *    for the experts beyond, for tiled weights at more rows and for dense
 *    GEMMs whose 64-row tiles fill a wave, tiled (16 MT rows by 64, through
 *    shared memory, [n][k] weights only) for the other dense GEMMs of many
 *    rows. */
#include "device.h"
#include "launchers.h"
#include "matrix_core.h"
#include "rope.h"
#include "../src/core/course_math.h"

namespace {

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

/* the bias of outputs o and o + 1 (past n: none) added */
__device__ __forceinline__ void add_bias(const gptoss_gemm_args &a, const row_tile &t, int o, float &v0, float &v1) {
    const float *bias = a.bias ? a.bias + (size_t)t.expert * a.n : nullptr;
    if (bias) {
        v0 += bias[o];
        if (o + 1 < a.n)
            v1 += bias[o + 1];
    }
}

/* One pair of outputs (o, o + 1) of row p; o + 1 may be past n (then v1 is
 * ignored) except for SwiGLU, whose n is even. */
template <class T>
__device__ __forceinline__ void epilogue(const gptoss_gemm_args &a, const row_tile &t, int p, int o,
                                         float v0, float v1) {
    add_bias(a, t, o, v0, v1);
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

/* the row of x that row p reads (MoE: its pair's token) */
__device__ __forceinline__ int x_index(const gptoss_gemm_args &a, int p) { return a.x_rows ? a.x_rows[p] : p; }

/* ---- exact: fp32 in, double accumulators ---------------------------------- */

constexpr int EX_BM = 32, EX_BN = 64, EX_BK = 32, EX_THREADS = 256;

__global__ void __launch_bounds__(EX_THREADS) gemm_exact_kernel(gptoss_gemm_args a) {
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

/* The order of an output's sum. K goes by in chunks of 32 (zero-filled past
 * K); the even chunks accumulate into one sum and the odd ones into another,
 * each in ascending chunk order, one chunk being one call of tile16::mma32
 * with the same pieces in every kernel; the result is even + odd. That order
 * depends on K alone, never on the rows in the step or the kernel their count
 * picked, so a row gets the same bits alone or in any batch. */
constexpr int MX_KC = 32, MX_BN = 64;

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

/* the tile's expert's weights, [n][k] or tiled (launchers.h) */
__device__ __forceinline__ const bf16 *expert_w(const gptoss_gemm_args &a, const row_tile &t) {
    return (const bf16 *)a.w + (size_t)t.expert * (a.w_tiled ? gptoss_tiled_elems(a.n, a.k) : (uint64_t)a.n * a.k);
}

/* Streaming, operands loaded straight into the registers the matrix cores
 * read: a block covers 16 rows by 32 outputs with 4 warps, warp w doing
 * outputs 16 (w / 2).. over the even (w even) or odd chunks, DEPTH chunks
 * in flight. Each weight is read once per block, with many loads
 * outstanding even when the grid is small: decode of the dense layers (also
 * dense GEMMs of a few dozen rows, whose larger tiles would leave the GPU
 * half idle) and the experts' grouped GEMMs at a few rows per expert. The
 * ring's DEPTH sets the blocks a multiprocessor holds (registers): six at
 * DEPTH 3, four at 5, two at 8 (the launcher picks by the grid).
 *
 * With the ROPE_KV epilogue (a qkv projection, heads of 64) block y takes
 * outputs 16 (y % 2).. of head y / 2 and the 16 half a head further, so
 * each rotated pair (i, i + 32) is the block's, whose shared row buffer
 * brings the two halves together. */
constexpr int STREAM_BN = 32;

/* FULL: k a multiple of the chunk and n of the block's outputs, so every
 * load lies in bounds once the chunk is clamped to the last (the ring's
 * loads past the end are never multiplied) and rows past the tile's end
 * read its last row (their sums are never stored): the loads need no
 * checks. The dense GEMMs at 64 rows issued an instruction every other
 * cycle, and the depth-3 kernel spilled; without the checks it does not.
 * H200, B=64, ctx 1024, one build switched: qkv 0.582 -> 0.527 ms a step,
 * o 0.649 -> 0.569, mlp1 6.350 -> 6.193, mlp2 3.372 -> 3.277; 4991.6 ->
 * 5147.2 tok/s. */
template <int DEPTH, bool VEC, bool FULL>
__global__ void __launch_bounds__(STREAM_BN / 8 * GPTOSS_WARP_MAX, DEPTH <= 3 ? 6 : DEPTH <= 5 ? 4 : 2) gemm_stream_kernel(gptoss_gemm_args a) {
    constexpr int P = tile16::PIECES, BN = STREAM_BN;
    row_tile t;
    if (!block_rows(a, blockIdx.x, 16, t))
        return;
    __shared__ float even[16 * BN];
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize, parity = warp & 1;
    const bool rope = a.epilogue == GPTOSS_GEMM_ROPE_KV;
    int n0 = rope ? (blockIdx.y >> 1) * 64 + (blockIdx.y & 1) * 16 + 32 * (warp >> 1)
                  : blockIdx.y * BN + 16 * (warp >> 1);
    const int kofs = tile16::piece_k(lane), chunks = (a.k + MX_KC - 1) / MX_KC;
    const bf16 *W = expert_w(a, t);
    const bf16 *src[2][P]; /* X, then W, at chunk 0 */
#pragma unroll
    for (int j = 0; j < P; j++) {
        int r = tile16::piece_row(lane, j);
        const bf16 *x = x_row(a, t, FULL ? min(t.begin + r, t.end - 1) : t.begin + r);
        src[0][j] = x ? x + kofs : nullptr;
        src[1][j] = n0 + r >= a.n  ? nullptr
                    : a.w_tiled    ? W + gptoss_tiled_at(n0 + r, kofs, chunks)
                                   : W + (size_t)(n0 + r) * a.k + kofs;
    }
    /* tiled weights: a chunk further is a tile further, zeros past k */
    const int w_step = a.w_tiled ? GPTOSS_TILE_ELEMS : MX_KC, w_end = a.w_tiled ? chunks * MX_KC : a.k - kofs;
    auto fetch = [&](int c, uint4 (&buf)[2][P]) {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        if constexpr (FULL) {
            const int cc = min(c, chunks - 1);
#pragma unroll
            for (int j = 0; j < P; j++) {
                buf[0][j] = *(const uint4 *)(src[0][j] + cc * MX_KC);
                buf[1][j] = *(const uint4 *)(src[1][j] + cc * w_step);
            }
        } else {
#pragma unroll
            for (int j = 0; j < P; j++) {
                buf[0][j] = src[0][j] && c < chunks ? load8<VEC>(src[0][j], c * MX_KC, a.k - kofs) : zero;
                buf[1][j] = src[1][j] && c < chunks
                                ? load8<VEC>(src[1][j] + (size_t)c * (w_step - MX_KC), c * MX_KC, w_end)
                                : zero;
            }
        }
    };
    tile16::acc_t acc;
#pragma unroll
    for (int i = 0; i < tile16::N; i++)
        acc[i] = 0.0f;
    uint4 ring[DEPTH][2][P];
#pragma unroll
    for (int d = 0; d < DEPTH; d++)
        fetch(parity + 2 * d, ring[d]);
    for (int c = parity; c < chunks; c += 2 * DEPTH) {
#pragma unroll
        for (int d = 0; d < DEPTH; d++) {
            if (c + 2 * d >= chunks)
                break;
            tile16::mma32(acc, ring[d][0], ring[d][1], lane);
            fetch(c + 2 * (d + DEPTH), ring[d]);
        }
    }
#pragma unroll
    for (int half = 0; half < 2; half++) { /* even, then odd + even */
        if (parity == half)
#pragma unroll
            for (int i = 0; i < tile16::N; i += 2) {
                int row, col;
                if (!tile16::coords(i, lane, row, col))
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
        for (int item = threadIdx.x; item < 16 * 16; item += blockDim.x) {
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

/* Tiled, for more rows: a block covers 16 MT rows by 64 outputs with 4
 * warps, warp w taking the 16 rows 16 (w / (4 / MT)) .. and 16 MT outputs.
 * Chunks go through a ring of STAGES buffers in shared memory, STAGES - 1
 * of them in flight while the block multiplies the oldest (asynchronous
 * copies where the target has them); each warp reads the same pieces the
 * streaming kernel loads and keeps an even and an odd sum. Rows of 64
 * bytes: the 16-byte reads of a quarter warp cover two whole rows, without
 * bank conflicts. Warps whose rows all lie past the end (in the last tile)
 * only help copy. */
template <int MT, bool VEC>
__global__ void __launch_bounds__(4 * GPTOSS_WARP_MAX) gemm_tiled_kernel(gptoss_gemm_args a) {
    constexpr int BM = 16 * MT, WN = MX_BN / (4 / MT), NT = WN / 16, P = tile16::PIECES, STAGES = 4;
    constexpr int ROWS = BM + MX_BN, PIECES = ROWS * (MX_KC / 8), PER = (PIECES + 127) / 128;
    row_tile t;
    if (!block_rows(a, blockIdx.x, BM, t))
        return;
    __shared__ __attribute__((aligned(16))) bf16 stage[STAGES][ROWS * MX_KC];
    int tid = threadIdx.x, threads = blockDim.x, lane = tid % warpSize, warp = tid / warpSize;
    int n0 = blockIdx.y * MX_BN, wm = warp / (4 / MT), wn = warp % (4 / MT);
    const bool active = t.begin + 16 * wm < t.end;
    const int chunks = (a.k + MX_KC - 1) / MX_KC;
    const bf16 *W = expert_w(a, t);

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

/* Staged, for the experts' grouped GEMMs at many rows per expert: a block
 * covers a tile of BM rows (32 or 64) by 128 outputs with 8 warps, warp w taking outputs
 * 32 (w / 2) .. + 31 over the even (w even) or odd chunks, for each 16-row
 * group that holds rows (an expert's tile is sized for the busiest expert;
 * groups past its rows are skipped). Each stage holds one even and one odd
 * chunk of the tile's X rows and W rows in shared memory; a ring of STAGES
 * of them keeps STAGES - 1 in flight (asynchronous copies where the target
 * has them) while the block multiplies the oldest, so each weight is read
 * from memory once per block whatever the expert's row count, and each X
 * piece feeds the 4 warps of its parity. A warp multiplies the pieces the
 * streaming kernel loads and the odd sums join the even ones through shared
 * memory at the end, so both kernels compute the same bits. A stage row is
 * a row's 8 pieces of 16 bytes, swizzled in odd rows (index ^ 4): the 8
 * lanes of a quarter warp, reading 4 pieces of two adjacent rows, then hit
 * distinct banks. */
constexpr int ST_BM = 64, ST_BN = 128, ST_WARPS = 8, ST_THREADS = ST_WARPS * GPTOSS_WARP_MAX;
constexpr int ST_RP = 2 * MX_KC / 8; /* pieces per stage row */
static_assert(ST_THREADS / ST_RP % GPTOSS_TILE_ROWS == 0, "a copy pass covers whole bands of weight tiles");
/* a stage: BM rows of X, then ST_BN rows of W */
__host__ __device__ constexpr size_t staged_stage_bytes(int bm) { return (size_t)(bm + ST_BN) * ST_RP * 16; }

template <int BM, int STAGES, int MIN_BLOCKS, bool VEC, bool TILED, bool FULL>
__global__ void __launch_bounds__(ST_THREADS, MIN_BLOCKS) gemm_staged_kernel(gptoss_gemm_args a) {
    constexpr int P = tile16::PIECES, MT = BM / 16, RP = ST_RP, PASS = ST_THREADS / RP, ST_ROWS = BM + ST_BN;
    constexpr int ODD_LD = ST_BN + 4;
    static_assert(BM * ODD_LD * sizeof(float) <= STAGES * staged_stage_bytes(BM), "the odd sums fit the ring");
    extern __shared__ uint4 ring[]; /* [STAGES][ST_ROWS][RP] */
    /* grouped: blockIdx.x is the column block, blockIdx.y the tile (see the launcher) */
    const bool grouped = a.tiles != nullptr;
    row_tile t;
    if (!block_rows(a, grouped ? blockIdx.y : blockIdx.x, BM, t))
        return;
    const int tid = threadIdx.x, lane = tid % warpSize, warp = tid / warpSize;
    const int parity = warp & 1, wn = warp >> 1, n0 = (grouped ? blockIdx.x : blockIdx.y) * ST_BN;
    const bool computes = warp < ST_WARPS; /* 32-lane warps under 64-lane launch bounds only copy */
    const int groups = (t.end - t.begin + 15) / 16;
    const int chunks = (a.k + MX_KC - 1) / MX_KC, stages = (chunks + 1) / 2;
    const bf16 *W = expert_w(a, t);

    /* The thread copies piece tid % RP of stage rows tid / RP + PASS i, X
     * rows then W rows, each from a source looked up once here: per stage a
     * copy costs an address computation, not the row's lookup (H100, 1024
     * rows: that lookup was most of the loop's instructions). X rows of
     * groups the tile leaves empty are never multiplied and not copied.
     *
     * FULL: every stage is two whole chunks and every offset fits 32 bits.
     * Then rows past the tile read its last row and weight rows past n the
     * last one (their sums are never stored), so no copy needs a check: a
     * copy reads the row's offset plus a fixed step per stage (two chunks;
     * tiled weights: two tiles). Otherwise the thread keeps row numbers
     * (ZEROS past the tile or n) and checks k. */
    constexpr int NI = (ST_ROWS + PASS - 1) / PASS;
    constexpr uint32_t ZEROS = ~0u;
    const int piece = tid % RP, row0 = tid / RP;
    auto is_x = [&](int i) { return BM % PASS == 0 ? PASS * i < BM : row0 + PASS * i < BM; };
    uint32_t from[NI]; /* one register each, not a pointer's two: the 64-row kernel spilled */
    unsigned copies = 0; /* bit i: row i is copied */
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int r = row0 + PASS * i;
        const int p = FULL ? min(t.begin + r, t.end - 1) : t.begin + r;
        const int o = FULL ? min(n0 + r - BM, a.n - 1) : n0 + r - BM;
        from[i] = ZEROS;
        if (r >= ST_ROWS || (is_x(i) && r >= 16 * groups))
            continue;
        copies |= 1u << i;
        if (is_x(i) && p < t.end) {
            const uint32_t row = x_index(a, p);
            from[i] = FULL ? row * (uint32_t)a.k + 8 * piece : row;
        } else if (!is_x(i) && o < a.n) {
            from[i] = !FULL  ? o
                      : TILED ? (uint32_t)gptoss_tiled_at(o, 8 * piece, chunks)
                              : (uint32_t)o * (uint32_t)a.k + 8 * piece;
        }
    }
    auto issue = [&](int s) {
        if (s < stages) {
            uint4 *buf = ring + ((size_t)(s % STAGES) * ST_ROWS + row0) * RP + (piece ^ ((row0 & 1) << 2));
            const int k = s * 2 * MX_KC + 8 * piece;
            const bool k_in = k < a.k, tile_in = 2 * s + piece / 4 < chunks; /* tiled: zeros past k */
#pragma unroll
            for (int i = 0; i < NI; i++) {
                if (!(copies >> i & 1))
                    continue;
                const bool tiled_w = TILED && !is_x(i);
                const bf16 *base = is_x(i) ? (const bf16 *)a.x : W;
                uint4 *dst = buf + PASS * i * RP;
                if (FULL) {
                    copy16_async(dst, base + (from[i] + s * (tiled_w ? 2 * GPTOSS_TILE_ELEMS : 2 * MX_KC)), true);
                    continue;
                }
                const bool valid = from[i] != ZEROS && (tiled_w ? tile_in : k_in);
                const bf16 *row = valid ? base + (size_t)from[i] * a.k : W;
                if (tiled_w)
                    copy16_async(dst, valid ? W + gptoss_tiled_at(from[i], k, chunks) : W, valid);
                else if (VEC)
                    copy16_async(dst, valid ? row + k : W, valid);
                else
                    *dst = valid ? load8<false>(row, k, a.k) : make_uint4(0, 0, 0, 0);
            }
        }
        copy_commit(); /* one group per stage, empty or not */
    };

    tile16::acc_t acc[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int i = 0; i < tile16::N; i++)
                acc[m][n][i] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++)
        issue(s);
    const int q = 4 * parity + tile16::piece_k(lane) / 8; /* the warp's piece in a stage row */
    for (int s = 0; s < stages; s++) {
        copy_wait<STAGES - 2>();
        __syncthreads(); /* stage s is in; everyone is done with stage s - 1's buffer */
        issue(s + STAGES - 1);
        if (!computes || 2 * s + parity >= chunks)
            continue;
        const uint4 *buf = ring + (size_t)(s % STAGES) * ST_ROWS * RP;
        uint4 wp[2][P]; /* the weight pieces, then each group's X pieces and products */
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int j = 0; j < P; j++) {
                int r = BM + 32 * wn + 16 * n + tile16::piece_row(lane, j);
                wp[n][j] = buf[r * RP + (q ^ ((r & 1) << 2))];
            }
#pragma unroll
        for (int m = 0; m < MT; m++)
            if (m < groups) {
                uint4 xp[P];
#pragma unroll
                for (int j = 0; j < P; j++) {
                    int r = 16 * m + tile16::piece_row(lane, j);
                    xp[j] = buf[r * RP + (q ^ ((r & 1) << 2))];
                }
#pragma unroll
                for (int n = 0; n < 2; n++)
                    tile16::mma32(acc[m][n], xp, wp[n], lane);
            }
    }
    copy_wait<0>();
    __syncthreads(); /* the ring is free: the odd sums go through it */
    float *odd = (float *)ring;
#pragma unroll
    for (int half = 1; half >= 0; half--) { /* odd warps store, even warps finish */
        if (computes && parity == half)
#pragma unroll
            for (int m = 0; m < MT; m++) {
                if (m >= groups)
                    break;
#pragma unroll
                for (int n = 0; n < 2; n++)
#pragma unroll
                    for (int i = 0; i < tile16::N; i += 2) {
                        int row, col;
                        if (!tile16::coords(i, lane, row, col))
                            continue;
                        int ocol = 32 * wn + 16 * n + col, p = t.begin + 16 * m + row, o = n0 + ocol;
                        float *e = odd + (16 * m + row) * ODD_LD + ocol;
                        if (half == 1) {
                            e[0] = acc[m][n][i];
                            e[1] = acc[m][n][i + 1];
                        } else if (p < t.end && o < a.n) {
                            epilogue<bf16>(a, t, p, o, acc[m][n][i] + e[0], acc[m][n][i + 1] + e[1]);
                        }
                    }
            }
        if (half == 1)
            __syncthreads();
    }
}

template <int BM, int STAGES, int MIN_BLOCKS, bool VEC, bool TILED, bool FULL = false>
hipError_t launch_staged(const gptoss_gemm_args *a, dim3 grid, hipStream_t stream) {
    const void *kernel = (const void *)gemm_staged_kernel<BM, STAGES, MIN_BLOCKS, VEC, TILED, FULL>;
    size_t bytes = STAGES * staged_stage_bytes(BM);
    if (bytes > 48 * 1024) {
        hipError_t e = hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != hipSuccess)
            return e;
    }
    hipLaunchKernelGGL((gemm_staged_kernel<BM, STAGES, MIN_BLOCKS, VEC, TILED, FULL>), grid, dim3(ST_THREADS), bytes,
                       stream, *a);
    return hipGetLastError();
}

} // namespace

typedef void (*gemm_kernel_t)(gptoss_gemm_args);

template <int DEPTH> static gemm_kernel_t stream_kernel(bool vec, bool full) {
    return full ? gemm_stream_kernel<DEPTH, true, true>
           : vec ? gemm_stream_kernel<DEPTH, true, false> : gemm_stream_kernel<DEPTH, false, false>;
}

int gptoss_gemm_tile_rows(const gptoss_gemm_args *a, int bf16_mode) {
    if (!bf16_mode)
        return EX_BM;
    /* grouped: 16-row streaming tiles up to 16 expected rows per expert (an
     * expert with a few more takes two tiles, its second read of the weights
     * mostly from L2); beyond, staged tiles of 32 rows up to 32 expected rows
     * (H100, 256 rows: 64-row tiles there copied and kept X rows that were
     * not used, 10525 -> 10765 tok/s at ctx 512), then of 64 rows, which read
     * each expert's weights once even when it got several dozen rows */
    if (a->rows_hint > 0)
        return a->rows_hint <= 16 ? 16 : a->rows_hint <= 32 ? 32 : ST_BM;
    /* dense: the largest tile that still gives the GPU a few hundred blocks
     * (any choice computes the same bits) */
    int bm = a->rows <= 16 ? 16 : a->rows <= 32 ? 32 : 64;
    while (bm > 16 && (long)((a->rows + bm - 1) / bm) * ((a->n + MX_BN - 1) / MX_BN) < 256)
        bm /= 2;
    return bm;
}

/* shared memory a block may take, from the multiprocessor's */
static size_t shared_limit(int shared_per_sm) {
    if (shared_per_sm <= 0)
        return 48 * 1024;
    return shared_per_sm > 64 * 1024 ? (size_t)shared_per_sm - 1024 : (size_t)shared_per_sm; /* NVIDIA keeps 1 KB per block */
}

/* two blocks of four stages per multiprocessor where shared memory holds
 * them (measured best on the H100: six stages, or 64-row tiles where 32
 * suffice, were slower), else one of two stages */
template <int BM, bool TILED>
static hipError_t launch_staged_fit(const gptoss_gemm_args *a, dim3 grid, bool vec, size_t limit, hipStream_t stream) {
    /* the kernel's FULL conditions: whole stages (two chunks), 32-bit offsets */
    const uint64_t w_elems = TILED ? gptoss_tiled_elems(a->n, a->k) : (uint64_t)a->n * a->k;
    const bool full = vec && a->k % (2 * MX_KC) == 0 && (uint64_t)a->rows * a->k < UINT32_MAX && w_elems < UINT32_MAX;
    if (2 * 4 * staged_stage_bytes(BM) <= limit)
        return full  ? launch_staged<BM, 4, 2, true, TILED, true>(a, grid, stream)
               : vec ? launch_staged<BM, 4, 2, true, TILED>(a, grid, stream)
                     : launch_staged<BM, 4, 2, false, TILED>(a, grid, stream);
    return full  ? launch_staged<BM, 2, 1, true, TILED, true>(a, grid, stream)
           : vec ? launch_staged<BM, 2, 1, true, TILED>(a, grid, stream)
                 : launch_staged<BM, 2, 1, false, TILED>(a, grid, stream);
}

template <int BM>
static hipError_t launch_staged_rows(const gptoss_gemm_args *a, dim3 grid, bool vec, size_t limit, hipStream_t stream) {
    return a->w_tiled ? launch_staged_fit<BM, true>(a, grid, vec, limit, stream)
                      : launch_staged_fit<BM, false>(a, grid, vec, limit, stream);
}

int gptoss_gemm_takes_rope(const gptoss_gemm_args *a, int bf16_mode) {
    /* the streaming kernel's (bf16, dense, 16-row tiles), heads of 64 */
    const gptoss_rope_kv_args &rope = a->rope;
    return bf16_mode && !a->tiles && gptoss_gemm_tile_rows(a, bf16_mode) == 16 && rope.head_dim == 64 &&
           a->n == (rope.n_heads + 2 * rope.n_kv_heads) * 64;
}

hipError_t gptoss_launch_gemm(const gptoss_gemm_args *a, int bf16_mode, int max_tiles,
                              const gptoss_gpu_shape *dev, hipStream_t stream) {
    int bm = gptoss_gemm_tile_rows(a, bf16_mode);
    if (a->epilogue == GPTOSS_GEMM_ROPE_KV && !gptoss_gemm_takes_rope(a, bf16_mode))
        return hipErrorInvalidValue;
    int row_blocks = a->tiles ? max_tiles : (a->rows + bm - 1) / bm;
    if (row_blocks <= 0)
        return hipSuccess;
    if (!bf16_mode) {
        dim3 grid(row_blocks, (a->n + EX_BN - 1) / EX_BN);
        hipLaunchKernelGGL(gemm_exact_kernel, grid, dim3(EX_THREADS), 0, stream, *a);
        return hipGetLastError();
    }
    bool vec = a->k % 8 == 0;
    /* grouped tiles of 32 or 64 rows are staged, so are such tiles over
     * tiled weights (the tiled kernel reads rows of k), and dense 64-row
     * tiles when the staged grid fills a wave of two blocks per
     * multiprocessor: 8 warps on 128 outputs read a tile's X rows half as
     * often as the tiled kernel's 4 on 64, and a deeper ring keeps more
     * bytes in flight. H100, ctx 64, one build switched (ms a step):
     * unembedding 0.784 -> 0.685 at 128 rows, 5.708 -> 5.321 at 1024,
     * 11.476 -> 10.701 at 2048; qkv 4.293 -> 3.910 at 1024; tok/s 7323.0
     * -> 7374.6 at 128, 20092.5 -> 20757.7 at 1024, 21413.6 -> 22084.7 at
     * 2048. Short of a wave it was slower: the o projection at 512 rows
     * (184 staged blocks on 132 multiprocessors) 2.122 -> 2.384. */
    const int col_blocks = (a->n + ST_BN - 1) / ST_BN;
    const bool dense_wave = !a->tiles && bm == ST_BM && (long)row_blocks * col_blocks >= 2L * dev->multiprocessors;
    if (((a->tiles || a->w_tiled) && bm > 16) || dense_wave) {
        /* Grouped: the column blocks of a tile are dispatched together
         * (blockIdx.x), so its X rows come from memory once and then from
         * L2, and an expert's tiles still start within a few dozen blocks of
         * each other, sharing its weights through L2. Tile by tile down each
         * column block instead, mlp2 at 1024 rows read 1.09 GB a call from
         * DRAM (Nsight Compute, H100) for 0.53 GB of weights: about its X
         * (24 MB) once per column block. H100, ctx 64: mlp2 10.455 -> 9.675
         * ms a step at 1024 rows, 18.509 -> 17.903 at 2048, mlp1 20.573 ->
         * 20.036 and 38.716 -> 38.001. */
        dim3 grid = a->tiles ? dim3(col_blocks, row_blocks) : dim3(row_blocks, col_blocks);
        size_t limit = shared_limit(dev->shared_per_sm);
        return bm == 32 ? launch_staged_rows<32>(a, grid, vec, limit, stream)
                        : launch_staged_rows<ST_BM>(a, grid, vec, limit, stream);
    }
    if (bm == 16) {
        /* Streaming, 32 outputs a block (4 warps): against 64 (8 warps),
         * twice the blocks, each half as long, so a shorter tail after the
         * last full wave. H100, ctx 1024, one build switched: the experts'
         * grouped GEMMs 3691.5 -> 3744.9 tok/s at 64 rows; the dense ones
         * (with RoPE fused into the qkv projection's) 241.7 -> 246.4 tok/s
         * at 1 row, 3849.6 -> 3878.4 at 64.
         *
         * The ring is as deep as the grid lets it be: a grid the
         * multiprocessors hold at once at depth 8 takes it (more loads in
         * flight per warp); a dense one of more than 4 but at most 6 blocks
         * per multiprocessor takes depth 3, which holds 6 (one wave); any
         * other takes depth 5, which holds 4. H200, 64 rows, depth 5
         * against 4: the experts' mlp1 6.20 -> 5.97 ms a step, mlp2 3.28 ->
         * 3.18, the o projection's 0.573 -> 0.540; the qkv projection's 640
         * blocks 0.528 -> 0.786 at depth 4 or 5, so it keeps 3. Earlier, on
         * the H100 at 64 rows with 64-output dense blocks: the o
         * projection's 180 blocks 0.91 -> 0.68 ms a step at two each instead
         * of one, the qkv projection's 320 blocks 0.83 -> 0.69 at three
         * instead of two; the experts' grids at three each were slower
         * (9.24 -> 9.85 ms). */
        const bool grouped = a->tiles != nullptr;
        dim3 grid(row_blocks, (a->n + STREAM_BN - 1) / STREAM_BN);
        long blocks = (long)grid.x * grid.y, fit = 2L * dev->multiprocessors;
        const bool full = vec && a->k % MX_KC == 0 && a->n % STREAM_BN == 0;
        gemm_kernel_t kernel = blocks <= fit                                      ? stream_kernel<8>(vec, full)
                               : !grouped && blocks > 2 * fit && blocks <= 3 * fit ? stream_kernel<3>(vec, full)
                                                                                   : stream_kernel<5>(vec, full);
        hipLaunchKernelGGL(kernel, grid, dim3(STREAM_BN / 8 * dev->warp), 0, stream, *a);
        return hipGetLastError();
    }
    /* tiled: 4 warps */
    dim3 grid(row_blocks, (a->n + MX_BN - 1) / MX_BN);
    gemm_kernel_t kernel;
    if (bm == 32)
        kernel = vec ? gemm_tiled_kernel<2, true> : gemm_tiled_kernel<2, false>;
    else
        kernel = vec ? gemm_tiled_kernel<4, true> : gemm_tiled_kernel<4, false>;
    hipLaunchKernelGGL(kernel, grid, dim3(4 * dev->warp), 0, stream, *a);
    return hipGetLastError();
}
