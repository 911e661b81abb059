/* The Hopper GEMM (bf16 mode, sm_90a), a part of gemm.hip, for the dense
 * GEMMs and the experts' grouped GEMMs of many rows: wgmma fed by TMA and
 * bulk copies through an mbarrier ring, one producer warpgroup issuing the
 * copies and two consumer warpgroups of 64 outputs each, a block covering
 * items of 128 outputs by a tile of up to 128 rows (dense: a row block;
 * grouped: an entry of the tile table, one expert's pairs) one after
 * another, its ring running on from one item to the next.
 *
 * The weights are the A operand (wgmma's M), from registers: each lane
 * reads the same 16-byte pieces the other families multiply (matrix_core.h)
 * and gives each instruction the words mma32 gives its two mma.sync, so a
 * chunk's sets of
 * products are those of gemm_common.h's order. The rows are the B operand
 * (N: the tile's rows rounded up to 32), from shared memory in wgmma's
 * 128-byte-swizzled K-major layout, where an instruction's 16 k must be 32
 * contiguous bytes: that is not the case for the order's sets (k % 8 < 4,
 * then the rest), so the rows are first copied with each 32-chunk's 16
 * words transposed as a 4 x 4 matrix (permute_rows_kernel, which also
 * gathers the experts' pairs). An instruction's sum depends on its set of
 * products only, not on which slot holds which, and wgmma sums a set as
 * mma.sync does (measured bit for bit: tools/hopper_probes), so every
 * output gets the bits of the other families, even and odd chunks in two
 * sums included.
 *
 * bf16 weights come as they lie: tiles (layout.h) in 1D bulk copies, or
 * [n][k] through a tensor map in boxes of one chunk by
 * 128 rows, which lands as the tiled layout's 16 x 32 tiles one after
 * another, whose 64-byte rows the lanes read without bank conflicts.
 *
 * A coded format's experts (MXFP4) run on gemm_wgmma_coded.h's kernel,
 * which decodes a tile once for all its rows into shared memory and shares
 * this file's items and epilogue. This file is the device side (the ring,
 * the producer, the consumers, the epilogue); gemm_wgmma_launch.h picks and
 * launches both. Everything here is
 * NVIDIA only; elsewhere gemm_wgmma_takes is false. */
#ifndef GPTOSS_KERNELS_GEMM_WGMMA_H
#define GPTOSS_KERNELS_GEMM_WGMMA_H

#include "gemm_common.h"
#include "hopper.h"
#include "wgmma.h"

namespace {

constexpr int WG_BO = 128;     /* outputs per block: two consumer warpgroups of 64 */
constexpr int WG_BT = 128;     /* rows per tile at most */
constexpr int WG_GROUP = 32;   /* rows per TMA box; a tile's N is a multiple */
constexpr int WG_BAND = 8;     /* grouped: column blocks per band (see the launcher; 4 and 16 measured no better) */
constexpr int WG_KS = 64;      /* k per stage: an even and an odd chunk */
constexpr int WG_X_STAGE = WG_BT * WG_KS * 2;
/* the sums' row stride in the epilogue (floats): a warp's stores (rows 2t, outputs g) hit 32 banks */
constexpr int WG_SUMS_STRIDE = WG_BO + 4;

/* how the weights reach shared memory: [n][k] bf16 rows through a tensor
 * map, or tiles (bf16 or a coded format's) by bulk copies */
enum wg_weight_copy { WG_BY_MAP, WG_BY_TILES };

/* rows of sums per pass of the epilogue through shared memory */
constexpr int WG_EPI_ROWS = 32;
/* the consumers' threads (two warpgroups of 64 outputs each), a block's last */
constexpr int WG_CONSUMERS = 256;

/* The dense kernel's block: warpgroup 0 copies, 1 and 2 multiply; their
 * registers a thread (setmaxnreg) within what the launch gives the block */
struct wg_roles {
    static constexpr int THREADS = 128 + WG_CONSUMERS, LAUNCH_REGS = launch_registers<THREADS>, COPY_REGS = 40,
                         MMA_REGS = 232;
    static_assert(COPY_REGS + 2 * MMA_REGS <= 3 * LAUNCH_REGS, "the roles' registers fit the block's pool");
};

/* The ring: a stage's weights (two chunks of 8 bands of bf16 tiles, 16
 * KiB), their stages 1 KiB-aligned as the rows' swizzle wants, then the
 * rows' stages, the stages' barriers and the epilogue's sums, with as many
 * stages as fit in the 227 KiB a block may have (6). */
constexpr int WG_SMEM_MAX = 227 * 1024;
struct wg_ring {
    static constexpr int W_STAGE = WG_BO / 16 * 2 * GPTOSS_TILE_ELEMS * 2, SUMS = WG_EPI_ROWS * WG_SUMS_STRIDE * 4;
    /* 1 KiB of slack to align the ring */
    static constexpr int STAGES = (WG_SMEM_MAX - SUMS - 1024) / (W_STAGE + WG_X_STAGE + 16);
    static constexpr int X_AT = STAGES * W_STAGE, BARS_AT = X_AT + STAGES * WG_X_STAGE, SUMS_AT = BARS_AT + STAGES * 16,
                         SMEM = SUMS_AT + SUMS + 1024;
    static_assert(W_STAGE % 1024 == 0, "the rows' stages are 1 KiB-aligned as their swizzle wants");
};

#if defined(GPTOSS_WGMMA)
/* the block's shared memory from its first 1 KiB boundary on (the rows'
 * swizzle wants it), by pointer arithmetic: through an integer the compiler
 * loses that it is shared memory and makes every access a generic one */
__device__ __forceinline__ uint8_t *wgmma_ring(uint8_t *smem) {
    return smem + ((1024 - (smem_addr(smem) & 1023)) & 1023);
}
#endif

/* k rounded up to whole chunks: the permuted rows' width */
__host__ __device__ __forceinline__ int wgmma_k_padded(int k) { return (k + MX_KC - 1) / MX_KC * MX_KC; }

/* A launch's items: its row tiles (dense: the row blocks; grouped: the
 * entries of the tile table that the device filled, of the table's
 * `row_blocks`), each with every column block. Item i's row tile and
 * column block: dense, the row blocks of a column block one after another;
 * grouped, bands of WG_BAND column blocks, tile by tile within a band. */
struct wg_items {
    int tiles, col_blocks;
    __device__ __forceinline__ wg_items(const gptoss_gemm_args &a, int row_blocks)
        : tiles(a.tiles ? min(*a.tile_count, row_blocks) : row_blocks), col_blocks((a.n + WG_BO - 1) / WG_BO) {}
    __device__ __forceinline__ int count() const { return tiles * col_blocks; }
    /* item i's rows, first output and 32-row groups; false if the tile has no rows */
    __device__ __forceinline__ bool at(const gptoss_gemm_args &a, int i, row_tile &rt, int &o0, int &groups) const {
        int tile, col_block;
        if (a.tiles) {
            const int band = i / (tiles * WG_BAND), in_band = min(WG_BAND, col_blocks - band * WG_BAND);
            const int r = i % (tiles * WG_BAND);
            tile = r / in_band;
            col_block = band * WG_BAND + r % in_band;
        } else {
            tile = i % tiles;
            col_block = i / tiles;
        }
        o0 = col_block * WG_BO;
        if (!block_rows(a, tile, WG_BT, rt))
            return false;
        groups = (rt.end - rt.begin + WG_GROUP - 1) / WG_GROUP;
        return true;
    }
    /* f(rows, first output, 32-row groups) for each of the block's items
     * that has rows (blockIdx.x, + gridDim.x, ...): every role of a block
     * walks them alike, so their ring positions agree */
    template <class F> __device__ __forceinline__ void each(const gptoss_gemm_args &a, F &&f) const {
        for (int i = blockIdx.x; i < count(); i += gridDim.x) {
            row_tile rt;
            int o0, groups;
            if (at(a, i, rt, o0, groups))
                f(rt, o0, groups);
        }
    }
};

#if defined(__HIP_PLATFORM_NVIDIA__)

/* Row x_rows[p] of x (p without x_rows), natural, into out[p] permuted:
 * within each 32-chunk, word w (k 2w, 2w + 1) goes to word (w % 4) * 4 +
 * w / 4; zeros past k. One thread per 16-byte piece (8 k) of the output. */
__global__ void permute_rows_kernel(const bf16 *x, const int *x_rows, int rows, int k, bf16 *out) {
    const int kp = wgmma_k_padded(k), pieces = kp / 8;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)rows * pieces)
        return;
    const int p = (int)(i / pieces), q = (int)(i % pieces), c = q / 4, t = q % 4;
    const bf16 *row = x + (size_t)(x_rows ? x_rows[p] : p) * k;
    /* output piece t of chunk c holds words t, 4 + t, 8 + t, 12 + t */
    uint32_t w[4];
    for (int j = 0; j < 4; j++) {
        const int kk = 32 * c + 2 * (4 * j + t);
        const uint32_t lo = kk < k ? row[kk].bits : 0, hi = kk + 1 < k ? row[kk + 1].bits : 0;
        w[j] = lo | hi << 16;
    }
    *(uint4 *)(out + (size_t)p * kp + 8 * q) = make_uint4(w[0], w[1], w[2], w[3]);
}

#if defined(GPTOSS_WGMMA)

/* The lane's weight pieces of one stage: tile16 rows g and g + 8, k 8t..8t+7, of each chunk */
__device__ __forceinline__ void wg_load_a(uint4 (&lo)[2], uint4 (&hi)[2], const uint8_t *ws, int band, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ch = 0; ch < 2; ch++) {
        const uint8_t *tile = ws + ch * 8192 + band * 1024;
        lo[ch] = *(const uint4 *)(tile + g * 64 + t * 16);
        hi[ch] = *(const uint4 *)(tile + (g + 8) * 64 + t * 16);
    }
}

/* A consumer warpgroup's k loop over a tile of G row groups: acc[c] the
 * sums of the even (c 0) and odd chunks of the warp's 16 outputs; the
 * tile's stages are the ring's from stage `ring_at` on (counted over the
 * block's tiles). One stage's group stays in flight while the next stage's
 * pieces load, so its slot is released a stage late and the pieces are
 * double-buffered; the last slot is released once its group is done. */
template <int G>
__device__ __forceinline__ void wg_consume(float (&acc)[2][64], const uint8_t *w_st, const uint8_t *x_st,
                                           uint64_t *full, uint64_t *empty, int chunks, int band, int lane,
                                           int ring_at) {
    typedef wg_ring ring;
    const int stages = (chunks + 1) / 2;
    uint4 lo[2][2] = {}, hi[2][2] = {}; /* [buffer][chunk] */
    auto stage = [&](int st, uint4(&l)[2], uint4(&h)[2], uint4(&l_prev)[2], uint4(&h_prev)[2]) {
        const int slot = (ring_at + st) % ring::STAGES;
        mbar_wait(&full[slot], ((ring_at + st) / ring::STAGES) & 1);
        const uint8_t *xs = x_st + slot * WG_X_STAGE;
        wg_load_a(l, h, w_st + slot * ring::W_STAGE, band, lane);
        wg_fence();
        /* chunk ch's instruction s: the pieces' words 2s and 2s + 1, as mma32 */
        typedef wg_mma<WG_GROUP * G> mma;
        mma::run(acc[0], l[0].x, h[0].x, l[0].y, h[0].y, swizzled_desc(xs));
        mma::run(acc[0], l[0].z, h[0].z, l[0].w, h[0].w, swizzled_desc(xs + 32));
        if (2 * st + 1 < chunks) {
            mma::run(acc[1], l[1].x, h[1].x, l[1].y, h[1].y, swizzled_desc(xs + 64));
            mma::run(acc[1], l[1].z, h[1].z, l[1].w, h[1].w, swizzled_desc(xs + 96));
        }
        wg_commit();
        wg_wait<1>();
        wg_hold(l_prev);
        wg_hold(h_prev);
        if (st > 0 && threadIdx.x % 128 == 0)
            mbar_arrive(&empty[(ring_at + st - 1) % ring::STAGES]);
    };
    for (int st = 0; st < stages; st += 2) {
        stage(st, lo[0], hi[0], lo[1], hi[1]);
        if (st + 1 < stages)
            stage(st + 1, lo[1], hi[1], lo[0], hi[0]);
    }
    wg_wait<0>();
    wg_hold(lo[0]);
    wg_hold(hi[0]);
    wg_hold(lo[1]);
    wg_hold(hi[1]);
    if (threadIdx.x % 128 == 0)
        mbar_arrive(&empty[(ring_at + stages - 1) % ring::STAGES]);
}
/* The producer, one thread: for each of the block's items, each stage's
 * copies of the tile's rows (one TMA box per 32-row group, or one for a
 * whole tile) and of the weights, when the consumers have released the
 * stage's slot. A coded format's stage holds band b's tiles of its two
 * chunks side by side; bf16's holds each chunk's 16-row tiles one after
 * another (as a tensor map box of 128 rows lands). */
template <int COPY>
__device__ __forceinline__ void wg_produce(const gptoss_gemm_args &a, const wg_items &items, uint8_t *w_st,
                                           uint8_t *x_st, uint64_t *full, uint64_t *empty, int chunks,
                                           const CUtensorMap *xmap_tile, const CUtensorMap *xmap_group,
                                           const CUtensorMap *wmap) {
    typedef wg_ring shape;
    const int stages = (chunks + 1) / 2;
    int at = 0; /* the ring's stage count so far */
    items.each(a, [&](const row_tile &rt, int o0, int groups) {
        const int bands = min(WG_BO / 16, (a.n - o0 + 15) / 16);
        const bf16 *w_tiles = bf16_weights::matrix(a, rt.expert);
        for (int st = 0; st < stages; st++, at++) {
            const int slot = at % shape::STAGES, nc = min(2, chunks - 2 * st);
            uint8_t *ws = w_st + slot * shape::W_STAGE;
            if (at >= shape::STAGES)
                mbar_wait(&empty[slot], (at / shape::STAGES - 1) & 1);
            /* a map copies whole boxes, zeros past its rows */
            const int w_bytes = (COPY == WG_BY_MAP ? WG_BO / 16 : bands) * nc * GPTOSS_TILE_ELEMS * 2;
            mbar_expect_tx(&full[slot], groups * WG_GROUP * WG_KS * 2 + w_bytes);
            if (groups * WG_GROUP == WG_BT) /* one box for a whole tile: fewer copies went faster */
                tma_2d(x_st + slot * WG_X_STAGE, xmap_tile, st * WG_KS, rt.begin, &full[slot]);
            else
                for (int g = 0; g < groups; g++)
                    tma_2d(x_st + slot * WG_X_STAGE + g * WG_GROUP * WG_KS * 2, xmap_group, st * WG_KS,
                           rt.begin + g * WG_GROUP, &full[slot]);
            for (int ch = 0; ch < nc; ch++)
                if (COPY == WG_BY_TILES)
                    for (int b = 0; b < bands; b++)
                        bulk_copy(ws + ch * 8192 + b * 1024,
                                  w_tiles + ((size_t)(o0 / 16 + b) * chunks + 2 * st + ch) * GPTOSS_TILE_ELEMS, 1024,
                                  &full[slot]);
                else /* the map holds every expert's rows, one after another */
                    tma_2d(ws + ch * 8192, wmap, (2 * st + ch) * MX_KC, rt.expert * a.n + o0, &full[slot]);
            mbar_arrive(&full[slot]);
        }
    });
}

/* A pass's epilogue for one consumer thread: its rows first, first + 4,
 * ... of the pass's `rows`, all at once (epilogue_rows), the pair of
 * outputs o at sums' column 0. Rows past `rows` are read, not stored. */
__device__ __forceinline__ void wg_epilogue_pass(const gptoss_gemm_args &a, int row0, int rows, int o,
                                                 const float *sums, int first, const pair_bias &bias) {
    constexpr int step = WG_CONSUMERS / (WG_BO / 2), U = WG_EPI_ROWS / step;
    int at[U];
    float v0[U], v1[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const float2 v = *(const float2 *)&sums[(first + u * step) * WG_SUMS_STRIDE];
        at[u] = row0 + first + u * step;
        v0[u] = v.x;
        v1[u] = v.y;
    }
    epilogue_rows<bf16, U>(a, at, rows > first ? (rows - first + step - 1) / step : 0, o, v0, v1, bias);
}

/* An item's sums (acc: the even and odd chunks' of the warp's 16 outputs)
 * through shared memory into the epilogue, WG_EPI_ROWS rows a pass, so that
 * the epilogue is one short loop (unrolled over the registers it was tens
 * of KiB of code) whose consecutive threads store consecutive outputs of a
 * row. Element 4j + e holds output 16 band + g (+ 8 from e = 2) of row
 * 8j + 2t + (e & 1). Each thread keeps one pair of outputs, so a tile's bias
 * is loaded once; tid: the thread among the consumers' WG_CONSUMERS. */
__device__ __forceinline__ void wg_store_item(const gptoss_gemm_args &a, const row_tile &rt, int o0,
                                              const float (&acc)[2][64], float *sums, int band, int g, int t,
                                              int tid) {
    constexpr int pairs = WG_BO / 2;
    static_assert(WG_CONSUMERS % pairs == 0, "a consumer thread's outputs are the same in every row");
    const int o = o0 + 2 * (tid % pairs);
    const pair_bias bias(a, rt, o < a.n ? o : o0);
    constexpr int JS = WG_EPI_ROWS / 8; /* accumulator rows j a pass */
#pragma unroll
    for (int pass = 0; pass < WG_BT / WG_EPI_ROWS; pass++) {
        const int r0 = pass * WG_EPI_ROWS;
        if (r0 >= rt.end - rt.begin)
            break;
        asm volatile("bar.sync 1, %0;" ::"n"(WG_CONSUMERS) : "memory"); /* the previous pass's sums are read */
#pragma unroll
        for (int jj = 0; jj < JS; jj++) {
            const int j = pass * JS + jj;
#pragma unroll
            for (int e = 0; e < 4; e++)
                sums[(8 * jj + 2 * t + (e & 1)) * WG_SUMS_STRIDE + 16 * band + g + 8 * (e >> 1)] =
                    acc[0][4 * j + e] + acc[1][4 * j + e];
        }
        asm volatile("bar.sync 1, %0;" ::"n"(WG_CONSUMERS) : "memory");
        if (o < a.n)
            wg_epilogue_pass(a, rt.begin + r0, min(WG_EPI_ROWS, rt.end - rt.begin - r0), o, sums + o - o0,
                             tid / pairs, bias);
    }
}
#endif

/* A persistent block: it takes items blockIdx.x, + gridDim.x, ... in turn,
 * and its ring runs on from one to the next, so the copies of an item's
 * first stages overlap the previous item's last products and epilogue.
 * Warpgroup 0 issues the copies (one thread), 1 and 2 multiply 64 outputs
 * each. */
template <int COPY>
__global__ void __launch_bounds__(wg_roles::THREADS, 1)
    gemm_wgmma_kernel(gptoss_gemm_args a, int row_blocks, const __grid_constant__ CUtensorMap xmap_tile,
                      const __grid_constant__ CUtensorMap xmap_group, const __grid_constant__ CUtensorMap wmap) {
#if defined(GPTOSS_WGMMA)
    typedef wg_ring shape;
    extern __shared__ uint8_t wgmma_smem[];
    uint8_t *ring = wgmma_ring(wgmma_smem);
    uint8_t *w_st = ring, *x_st = ring + shape::X_AT;
    uint64_t *full = (uint64_t *)(ring + shape::BARS_AT), *empty = full + shape::STAGES;
    float *sums = (float *)(ring + shape::SUMS_AT);
    const int chunks = (a.k + MX_KC - 1) / MX_KC, stages = (chunks + 1) / 2;
    const int tid = threadIdx.x, wg = tid / 128;
    const wg_items items(a, row_blocks);
    if (tid == 0) {
        for (int s = 0; s < shape::STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {
        warpgroup_registers<wg_roles::COPY_REGS, wg_roles::LAUNCH_REGS>();
        if (tid == 0)
            wg_produce<COPY>(a, items, w_st, x_st, full, empty, chunks, &xmap_tile, &xmap_group, &wmap);
        return;
    }
    warpgroup_registers<wg_roles::MMA_REGS, wg_roles::LAUNCH_REGS>();
    const int warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int band = (wg - 1) * 4 + warp; /* the warp's 16 outputs within the block */
    int at = 0;
    items.each(a, [&](const row_tile &rt, int o0, int groups) {
        float acc[2][64] = {};
        switch (groups) {
        case 1:
            wg_consume<1>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
            break;
        case 2:
            wg_consume<2>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
            break;
        case 3:
            wg_consume<3>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
            break;
        default:
            wg_consume<4>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
        }
        at += stages;
        wg_store_item(a, rt, o0, acc, sums, band, g, t, tid - (wg_roles::THREADS - WG_CONSUMERS));
    });
#endif
}

__global__ void wgmma_built_kernel(int *out) {
#if defined(GPTOSS_WGMMA)
    *out = 1;
#else
    *out = 0;
#endif
}

#endif /* __HIP_PLATFORM_NVIDIA__ */

} // namespace

#endif
