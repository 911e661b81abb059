/* The staged GEMM (bf16 mode), a part of gemm.hip, for the experts' grouped
 * GEMMs at many rows per expert, for tiled weights beyond 16 rows and for
 * dense GEMMs whose 64-row tiles fill a wave: a block covers a tile of BM
 * rows (32 or 64) by 128 outputs with 8 warps, warp w taking outputs
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
 * distinct banks. With a coded weight format W (MXFP4) a stage holds the
 * 16 tiles of the block's 8 bands at its two chunks as they lie in memory
 * (a quarter of the bytes), which each warp turns into the same bf16
 * pieces. */
#ifndef GPTOSS_KERNELS_GEMM_STAGED_H
#define GPTOSS_KERNELS_GEMM_STAGED_H

#include "gemm_common.h"
#include "matrix_core.h"

namespace {

constexpr int ST_BM = 64, ST_BN = 128, ST_WARPS = 8, ST_THREADS = ST_WARPS * GPTOSS_WARP_MAX;
constexpr int ST_ROW_PIECES = 2 * MX_KC / 8; /* pieces per stage row */
static_assert(ST_THREADS / ST_ROW_PIECES % GPTOSS_TILE_ROWS == 0, "a copy pass covers whole bands of weight tiles");
constexpr int ST_ODD_LD = ST_BN + 4; /* the odd sums' row stride, in floats */
/* a coded format's bytes of a stage's weights, two tiles of each band */
template <class W> __host__ __device__ constexpr int staged_coded_bytes() { return ST_BN / GPTOSS_TILE_ROWS * 2 * W::TILE_BYTES; }
/* a stage: BM rows of X, then ST_BN rows of W (or a coded format's tiles) */
template <class W> __host__ __device__ constexpr size_t staged_stage_bytes(int bm) {
    return (size_t)bm * ST_ROW_PIECES * 16 +
           (W::CODED ? (size_t)staged_coded_bytes<W>() : (size_t)ST_BN * ST_ROW_PIECES * 16);
}
/* the ring, which also holds the odd sums at the end */
template <class W> __host__ __device__ constexpr size_t staged_ring_bytes(int bm, int stages) {
    return stages * staged_stage_bytes<W>(bm) > (size_t)bm * ST_ODD_LD * 4 ? stages * staged_stage_bytes<W>(bm)
                                                                           : (size_t)bm * ST_ODD_LD * 4;
}

/* Which stage rows a thread copies, and from where. The thread copies
 * piece tid % ROW_PIECES of stage rows tid / ROW_PIECES + PASS i, X rows then W rows (a
 * coded format's tiles are copied apart), each from a source looked up once
 * here: per stage a copy costs an address computation, not the row's lookup
 * (which would be most of the loop's instructions). X rows of groups the
 * tile leaves empty are never multiplied and not copied.
 *
 * FULL: every stage is two whole chunks and every offset fits 32 bits.
 * Then rows past the tile read its last row and weight rows past n the
 * last one (their sums are never stored), so no copy needs a check: a copy
 * reads the row's offset plus a fixed step per stage (two chunks; tiled
 * weights: two tiles). Otherwise the thread keeps row numbers (ZEROS past
 * the tile or n) and checks k. */
template <class W, int BM> struct staged_copy {
    static constexpr int ROW_PIECES = ST_ROW_PIECES, PASS = ST_THREADS / ROW_PIECES;
    static constexpr int ROWS = W::CODED ? BM : BM + ST_BN; /* rows copied as rows */
    static constexpr int NI = (ROWS + PASS - 1) / PASS;
    static constexpr uint32_t ZEROS = ~0u;

    /* whether the thread's row i is an X row */
    __device__ static __forceinline__ bool is_x(int row0, int i) {
        return BM % PASS == 0 ? PASS * i < BM : row0 + PASS * i < BM;
    }

    /* from[i]: row i's source; returns the rows copied (bit i: row i) */
    template <bool TILED, bool FULL>
    __device__ static __forceinline__ unsigned sources(const gptoss_gemm_args &a, const row_tile &t, int n0, int groups,
                                                       int chunks, uint32_t (&from)[NI]) {
        const int piece = threadIdx.x % ROW_PIECES, row0 = threadIdx.x / ROW_PIECES;
        unsigned copies = 0;
#pragma unroll
        for (int i = 0; i < NI; i++) {
            const int r = row0 + PASS * i;
            const int p = FULL ? min(t.begin + r, t.end - 1) : t.begin + r;
            const int o = FULL ? min(n0 + r - BM, a.n - 1) : n0 + r - BM;
            from[i] = ZEROS;
            if (r >= ROWS || (is_x(row0, i) && r >= 16 * groups))
                continue;
            copies |= 1u << i;
            if (is_x(row0, i) && p < t.end) {
                const uint32_t row = x_index(a, p);
                from[i] = FULL ? row * (uint32_t)a.k + 8 * piece : row;
            } else if (!is_x(row0, i) && o < a.n) {
                from[i] = !FULL  ? o
                          : TILED ? (uint32_t)gptoss_tiled_at(o, 8 * piece, chunks)
                                  : (uint32_t)o * (uint32_t)a.k + 8 * piece;
            }
        }
        return copies;
    }
};

/* The block's sums into the epilogue: the odd warps' through shared
 * memory (odd, the ring's bytes) to the even ones, which store. */
template <int BM>
__device__ __forceinline__ void staged_store(const gptoss_gemm_args &a, const row_tile &t,
                                             const tile16::acc_t (&acc)[BM / 16][2], float *odd, int groups, int n0,
                                             int wn, int parity, int lane, bool computes) {
    constexpr int MT = BM / 16, ODD_LD = ST_ODD_LD;
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

template <class W, int BM, int STAGES, int MIN_BLOCKS, bool VEC, bool TILED, bool FULL>
__global__ void GPTOSS_LAUNCH_BOUNDS(ST_THREADS, MIN_BLOCKS) gemm_staged_kernel(gptoss_gemm_args a) {
    constexpr int P = tile16::PIECES, MT = BM / 16, ROW_PIECES = ST_ROW_PIECES, PASS = ST_THREADS / ROW_PIECES;
    constexpr bool CODED = W::CODED;
    constexpr int STAGE = (int)(staged_stage_bytes<W>(BM) / 16);
    /* [STAGES][STAGE]: X rows [BM][ROW_PIECES], then W rows [ST_BN][ROW_PIECES] or tiles */
    extern __shared__ uint4 ring[];
    /* grouped: blockIdx.x is the column block, blockIdx.y the tile (see the launcher) */
    const bool grouped = a.tiles != nullptr;
    pdl_wait();
    row_tile t;
    if (!block_rows(a, grouped ? blockIdx.y : blockIdx.x, BM, t))
        return;
    const int tid = threadIdx.x, lane = tid % warpSize, warp = tid / warpSize;
    const int parity = warp & 1, wn = warp >> 1, n0 = (grouped ? blockIdx.x : blockIdx.y) * ST_BN;
    const bool computes = warp < ST_WARPS; /* 32-lane warps under 64-lane launch bounds only copy */
    const int groups = (t.end - t.begin + 15) / 16;
    const int chunks = (a.k + MX_KC - 1) / MX_KC, stages = (chunks + 1) / 2;
    /* bf16 rows, or the base of a coded format's tiles; either also the
     * address an empty copy names */
    const bf16 *w_rows = CODED ? (const bf16 *)a.w : bf16_weights::matrix(a, t.expert);
    const uint8_t *w_coded = nullptr;
    if constexpr (CODED)
        w_coded = W::matrix(a, t.expert);
    const int bands = (a.n + GPTOSS_TILE_ROWS - 1) / GPTOSS_TILE_ROWS;
    constexpr int NI = staged_copy<W, BM>::NI;
    constexpr uint32_t ZEROS = staged_copy<W, BM>::ZEROS;
    const int piece = tid % ROW_PIECES, row0 = tid / ROW_PIECES;
    auto is_x = [&](int i) { return staged_copy<W, BM>::is_x(row0, i); };
    uint32_t from[NI]; /* one register each, not a pointer's two: the 64-row kernel spilled */
    const unsigned copies = staged_copy<W, BM>::template sources<TILED, FULL>(a, t, n0, groups, chunks, from);
    /* stage s's copies into its ring buffer (none past the last stage), one group */
    auto issue = [&](int s) {
        if (s < stages) {
            uint4 *buf = ring + (size_t)(s % STAGES) * STAGE + row0 * ROW_PIECES + (piece ^ ((row0 & 1) << 2));
            const int k = s * 2 * MX_KC + 8 * piece;
            const bool k_in = k < a.k, tile_in = 2 * s + piece / 4 < chunks; /* tiled: zeros past k */
#pragma unroll
            for (int i = 0; i < NI; i++) {
                if (!(copies >> i & 1))
                    continue;
                const bool tiled_w = TILED && !is_x(i);
                const bf16 *base = is_x(i) ? (const bf16 *)a.x : w_rows;
                uint4 *dst = buf + PASS * i * ROW_PIECES;
                if (FULL) {
                    copy16_async(dst, base + (from[i] + s * (tiled_w ? 2 * GPTOSS_TILE_ELEMS : 2 * MX_KC)), true);
                    continue;
                }
                const bool valid = from[i] != ZEROS && (tiled_w ? tile_in : k_in);
                const bf16 *row = valid ? base + (size_t)from[i] * a.k : w_rows;
                if (tiled_w)
                    copy16_async(dst, valid ? w_rows + gptoss_tiled_at(from[i], k, chunks) : w_rows, valid);
                else if (VEC)
                    copy16_async(dst, valid ? row + k : w_rows, valid);
                else
                    *dst = valid ? load8<false>(row, k, a.k) : make_uint4(0, 0, 0, 0);
            }
            if constexpr (CODED) { /* band b's tiles 2s and 2s + 1, adjacent in memory */
                constexpr int PER_BAND = 2 * W::TILE_BYTES / 16;
                uint4 *w_stage = ring + (size_t)(s % STAGES) * STAGE + BM * ROW_PIECES;
                for (int i = tid; i < staged_coded_bytes<W>() / 16; i += ST_THREADS) {
                    const int band = n0 / GPTOSS_TILE_ROWS + i / PER_BAND, part = i % PER_BAND;
                    const bool valid = band < bands && 2 * s + part / (PER_BAND / 2) < chunks;
                    const uint8_t *src = valid ? W::tile(w_coded, band, 2 * s, chunks) + 16 * part : w_coded;
                    copy16_async(w_stage + i, src, valid);
                }
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
        const uint4 *buf = ring + (size_t)(s % STAGES) * STAGE;
        uint4 wp[2][P]; /* the weight pieces, then each group's X pieces and products */
#pragma unroll
        for (int n = 0; n < 2; n++) {
            if constexpr (W::CODED) {
                typename W::pieces mp;
                mp.load((const uint8_t *)(buf + BM * ROW_PIECES) + ((2 * wn + n) * 2 + parity) * W::TILE_BYTES, lane);
                mp.to_bf16(wp[n]);
            } else {
#pragma unroll
                for (int j = 0; j < P; j++) {
                    int r = BM + 32 * wn + 16 * n + tile16::piece_row(lane, j);
                    wp[n][j] = buf[r * ROW_PIECES + (q ^ ((r & 1) << 2))];
                }
            }
        }
#pragma unroll
        for (int m = 0; m < MT; m++)
            if (m < groups) {
                uint4 xp[P];
#pragma unroll
                for (int j = 0; j < P; j++) {
                    int r = 16 * m + tile16::piece_row(lane, j);
                    xp[j] = buf[r * ROW_PIECES + (q ^ ((r & 1) << 2))];
                }
#pragma unroll
                for (int n = 0; n < 2; n++)
                    tile16::mma32(acc[m][n], xp, wp[n], lane);
            }
    }
    pdl_launch_dependents();
    copy_wait<0>();
    __syncthreads(); /* the ring is free: the odd sums go through it */
    staged_store<BM>(a, t, acc, (float *)ring, groups, n0, wn, parity, lane, computes);
}

template <class W, int BM, int STAGES, int MIN_BLOCKS, bool VEC, bool TILED, bool FULL>
hipError_t launch_staged(const gptoss_gemm_args *a, dim3 grid, bool programmatic, hipStream_t stream) {
    const void *kernel = (const void *)gemm_staged_kernel<W, BM, STAGES, MIN_BLOCKS, VEC, TILED, FULL>;
    size_t bytes = staged_ring_bytes<W>(BM, STAGES);
    if (bytes > 48 * 1024) {
        hipError_t e = hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != hipSuccess)
            return e;
    }
    return launch_kernel(gemm_staged_kernel<W, BM, STAGES, MIN_BLOCKS, VEC, TILED, FULL>, grid, dim3(ST_THREADS), bytes,
                         stream, programmatic, *a);
}

/* shared memory a block may take, from the multiprocessor's */
size_t shared_limit(int shared_per_sm) {
    if (shared_per_sm <= 0)
        return 48 * 1024;
    return shared_per_sm > 64 * 1024 ? (size_t)shared_per_sm - 1024 : (size_t)shared_per_sm; /* NVIDIA keeps 1 KB per block */
}

/* two blocks of four stages per multiprocessor where shared memory holds
 * them (six stages, or 64-row tiles where 32 suffice, were slower), else
 * one of two stages */
template <class W, int BM, bool TILED>
hipError_t launch_staged_fit(const gptoss_gemm_args *a, dim3 grid, bool vec, size_t limit, bool programmatic,
                             hipStream_t stream) {
    /* the kernel's FULL conditions: whole stages (two chunks), 32-bit offsets */
    const uint64_t w_elems = TILED ? gptoss_tiled_elems(a->n, a->k) : (uint64_t)a->n * a->k;
    const bool full = vec && a->k % (2 * MX_KC) == 0 && (uint64_t)a->rows * a->k < UINT32_MAX && w_elems < UINT32_MAX;
    if (2 * staged_ring_bytes<W>(BM, 4) <= limit)
        return full  ? launch_staged<W, BM, 4, 2, true, TILED, true>(a, grid, programmatic, stream)
               : vec ? launch_staged<W, BM, 4, 2, true, TILED, false>(a, grid, programmatic, stream)
                     : launch_staged<W, BM, 4, 2, false, TILED, false>(a, grid, programmatic, stream);
    return full  ? launch_staged<W, BM, 2, 1, true, TILED, true>(a, grid, programmatic, stream)
           : vec ? launch_staged<W, BM, 2, 1, true, TILED, false>(a, grid, programmatic, stream)
                 : launch_staged<W, BM, 2, 1, false, TILED, false>(a, grid, programmatic, stream);
}

/* a coded format's matrices lie in tiles only */
template <class W, int BM>
hipError_t launch_staged_rows(const gptoss_gemm_args *a, dim3 grid, bool vec, size_t limit, bool programmatic,
                             hipStream_t stream) {
    if constexpr (W::CODED)
        return launch_staged_fit<W, BM, true>(a, grid, vec, limit, programmatic, stream);
    else
        return gptoss_layout_tiled(a->w_layout)
                   ? launch_staged_fit<W, BM, true>(a, grid, vec, limit, programmatic, stream)
                   : launch_staged_fit<W, BM, false>(a, grid, vec, limit, programmatic, stream);
}

/* row_blocks tiles of bm rows, 32 or ST_BM (grouped: entries of the tile table) */
template <class W>
hipError_t launch_gemm_staged(const gptoss_gemm_args *a, int row_blocks, int bm, const gptoss_gpu_shape *dev,
                              hipStream_t stream) {
    /* Grouped: the column blocks of a tile are dispatched together
     * (blockIdx.x), so its X rows come from memory once and then from L2,
     * and an expert's tiles still start within a few dozen blocks of each
     * other, sharing its weights through L2. Tile by tile down each column
     * block instead, X would come from memory once per column block. */
    const int col_blocks = (a->n + ST_BN - 1) / ST_BN;
    dim3 grid = a->tiles ? dim3(col_blocks, row_blocks) : dim3(row_blocks, col_blocks);
    const bool vec = a->k % 8 == 0;
    size_t limit = shared_limit(dev->shared_per_sm);
    return bm == 32 ? launch_staged_rows<W, 32>(a, grid, vec, limit, dev->programmatic, stream)
                    : launch_staged_rows<W, ST_BM>(a, grid, vec, limit, dev->programmatic, stream);
}

} // namespace

#endif
