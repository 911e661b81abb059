/* The Hopper GEMM (bf16 mode, sm_90a), a part of gemm.hip, for the dense
 * GEMMs and the experts' grouped GEMMs of many rows: wgmma fed by TMA and
 * bulk copies through an mbarrier ring, one producer warpgroup issuing the
 * copies and two consumer warpgroups of 64 outputs each (with a storing
 * warpgroup on tiles of up to 64 rows: wg_block), a block covering items
 * of 128 outputs by a tile of up to 128 or 64 rows (dense: a row block;
 * grouped: an entry of the tile table, one expert's pairs) one after
 * another, its ring running on from one item to the next.
 *
 * The weights are the A operand (wgmma's M), from registers: each lane
 * reads the same pieces the other families multiply (matrix_core.h) and
 * gives each instruction the words mma32 gives its two mma.sync, so a
 * chunk's sets of products are those of gemm_common.h's order. A coded
 * format's pieces (MXFP4) are its codes, which the lane turns into the
 * bf16 pieces in registers (mxfp4.h) while the previous stage's
 * instructions run: nothing decoded is stored, and a stage's weights are
 * the codes' 4.25 bits a weight. The rows are the B operand (N: the tile's
 * rows rounded up to 32), from shared memory in wgmma's 128-byte-swizzled
 * K-major layout, where an instruction's 16 k must be 32 contiguous bytes:
 * that is not the case for the order's sets (k % 8 < 4, then the rest), so
 * the rows are first copied with each 32-chunk's 16 words transposed as a
 * 4 x 4 matrix (permute_rows_kernel, which also gathers the experts'
 * pairs). An instruction's sum depends on its set of products only, not on
 * which slot holds which, and wgmma sums a set as mma.sync does (measured
 * bit for bit: tools/hopper_probes), so every output gets the bits of the
 * other families, even and odd chunks in two sums included.
 *
 * A stage's weights arrive as they lie (wg_weights below): bf16 tiles
 * (layout.h) in 1D bulk copies, [n][k] bf16 rows through a tensor map in
 * boxes of one chunk by 128 rows, which land as the tiled layout's 16 x 32
 * tiles one after another, or a coded format's tiles in one box of a map
 * over every expert's bands. This file is the device side (the ring, the
 * producer, the consumers, the epilogue); gemm_wgmma_launch.h picks and
 * launches it. Everything here is NVIDIA only; elsewhere gemm_wgmma_takes
 * is false. */
#ifndef GPTOSS_KERNELS_GEMM_WGMMA_H
#define GPTOSS_KERNELS_GEMM_WGMMA_H

#include "gemm_wgmma_plan.h"

namespace {

#if defined(__HIP_PLATFORM_NVIDIA__)
#if defined(GPTOSS_WGMMA)

/* The lane's weight pieces of one stage (tile16 rows g and g + 8, k
 * 8t..8t+7, of each chunk) as bf16, from the stage's weights as they
 * landed: bf16, each chunk's 8 tiles one after another; a coded format's,
 * each band's two tiles side by side, read as codes (both chunks' loads
 * before either's decode) and decoded here. */
template <class W>
__device__ __forceinline__ void wg_load_a(uint4 (&lo)[2], uint4 (&hi)[2], const uint8_t *ws, int band, int lane) {
    if constexpr (W::CODED) {
        typename W::pieces codes[2];
#pragma unroll
        for (int ch = 0; ch < 2; ch++)
            codes[ch].load(ws + (2 * band + ch) * W::TILE_BYTES, lane);
#pragma unroll
        for (int ch = 0; ch < 2; ch++) {
            uint4 w[tile16::PIECES];
            codes[ch].to_bf16(w);
            lo[ch] = w[0];
            hi[ch] = w[1];
        }
    } else {
        constexpr int ROW_BYTES = GPTOSS_TILE_K * 2, PIECE_BYTES = 16;
        const int g = lane / 4, t = lane % 4;
#pragma unroll
        for (int ch = 0; ch < 2; ch++) {
            const uint8_t *tile = ws + (ch * WG_BLOCK_BANDS + band) * W::TILE_BYTES;
            lo[ch] = *(const uint4 *)(tile + g * ROW_BYTES + t * PIECE_BYTES);
            hi[ch] = *(const uint4 *)(tile + (g + 8) * ROW_BYTES + t * PIECE_BYTES);
        }
    }
}

/* A consumer warpgroup's k loop over a tile of G row groups: acc[c] the
 * sums of the even (c 0) and odd chunks of the warp's 16 outputs; the
 * tile's stages are the ring's from stage `ring_at` on (counted over the
 * block's tiles). One stage's group stays in flight while the next stage's
 * pieces load, so its slot is released a stage late and the pieces are
 * double-buffered; the last slot is released once its group is done. */
template <int G, class W, class B>
__device__ __forceinline__ void wg_consume(float (&acc)[2][64], const uint8_t *w_st, const uint8_t *x_st,
                                           uint64_t *full, uint64_t *empty, int chunks, int band, int lane,
                                           int ring_at) {
    typedef wg_ring<W, B> ring;
    const int stages = (chunks + 1) / 2;
    uint4 lo[2][2] = {}, hi[2][2] = {}; /* [buffer][chunk] */
    auto stage = [&](int st, uint4(&l)[2], uint4(&h)[2], uint4(&l_prev)[2], uint4(&h_prev)[2]) {
        const int slot = (ring_at + st) % ring::STAGES;
        mbar_wait(&full[slot], ((ring_at + st) / ring::STAGES) & 1);
        if (threadIdx.x == WG_STAMPING)
            wg_stamp(WG_EV_FULL, ring_at + st);
        const uint8_t *xs = x_st + slot * B::ROWS_STAGE_BYTES;
        wg_load_a<W>(l, h, w_st + slot * ring::WEIGHTS_STAGE, band, lane);
        if (threadIdx.x == WG_STAMPING)
            wg_stamp(WG_EV_LOADED, ring_at + st);
        wg_fence();
        /* chunk ch's instruction s: the pieces' words 2s and 2s + 1, as mma32 */
        typedef wg_mma<WG_ROW_GROUP * G> mma;
        mma::run(acc[0], l[0].x, h[0].x, l[0].y, h[0].y, swizzled_desc(xs));
        mma::run(acc[0], l[0].z, h[0].z, l[0].w, h[0].w, swizzled_desc(xs + 32));
        if (2 * st + 1 < chunks) {
            mma::run(acc[1], l[1].x, h[1].x, l[1].y, h[1].y, swizzled_desc(xs + 64));
            mma::run(acc[1], l[1].z, h[1].z, l[1].w, h[1].w, swizzled_desc(xs + 96));
        }
        wg_commit();
        wg_wait<1>();
        if (threadIdx.x == WG_STAMPING)
            wg_stamp(WG_EV_PREV_DONE, ring_at + st);
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

/* wg_consume at the tile's row groups, G .. B::TILE_ROWS / WG_ROW_GROUP */
template <int G, class W, class B>
__device__ __forceinline__ void wg_consume_rows(int groups, float (&acc)[2][64], const uint8_t *w_st,
                                                const uint8_t *x_st, uint64_t *full, uint64_t *empty, int chunks,
                                                int band, int lane, int ring_at) {
    if constexpr (G < B::TILE_ROWS / WG_ROW_GROUP)
        if (groups > G)
            return wg_consume_rows<G + 1, W, B>(groups, acc, w_st, x_st, full, empty, chunks, band, lane, ring_at);
    wg_consume<G, W, B>(acc, w_st, x_st, full, empty, chunks, band, lane, ring_at);
}

/* A stage's weights of an item (expert, first output o0): their bytes,
 * and their copies into ws on bar. A map copies whole boxes, zeros past
 * its width: a coded format's map (every expert's bands, a row a band's
 * tiles) one box of the block's 8 bands by the stage's two chunks, each
 * band's two tiles side by side; bf16's ([n][k], every expert's rows) a
 * box of 128 rows a chunk. bf16 tiles come a band and a chunk at a time.
 * bf16's stages hold each chunk's 8 tiles one after another, as a map's
 * box lands. */
template <class W, int COPY> struct wg_stage_weights {
    int chunks_here, bands, bytes;
    __device__ __forceinline__ wg_stage_weights(const gptoss_gemm_args &a, int o0, int st, int chunks)
        : chunks_here(min(2, chunks - 2 * st)), bands(min(WG_BLOCK_BANDS, (a.n - o0 + 15) / GPTOSS_TILE_ROWS)),
          bytes(W::CODED ? wg_weights_stage<W>
                         : (COPY == WG_BY_MAP ? WG_BLOCK_BANDS : bands) * chunks_here * W::TILE_BYTES) {}
    __device__ __forceinline__ void copy(const gptoss_gemm_args &a, int expert, int o0, int st, int chunks, uint8_t *ws,
                                         const CUtensorMap *wmap, uint64_t *bar) const {
        if constexpr (W::CODED) {
            tma_2d(ws, wmap, 2 * st * W::TILE_BYTES / 4,
                   expert * ((a.n + 15) / GPTOSS_TILE_ROWS) + o0 / GPTOSS_TILE_ROWS, bar);
        } else {
            const bf16 *w_tiles = W::matrix(a, expert);
            for (int ch = 0; ch < chunks_here; ch++)
                if (COPY == WG_BY_TILES)
                    for (int b = 0; b < bands; b++)
                        bulk_copy(ws + (ch * WG_BLOCK_BANDS + b) * W::TILE_BYTES,
                                  w_tiles +
                                      ((size_t)(o0 / GPTOSS_TILE_ROWS + b) * chunks + 2 * st + ch) * GPTOSS_TILE_ELEMS,
                                  W::TILE_BYTES, bar);
                else
                    tma_2d(ws + ch * WG_BLOCK_BANDS * W::TILE_BYTES, wmap, (2 * st + ch) * MX_KC, expert * a.n + o0,
                           bar);
        }
    }
};

/* The producer, one thread: for each of the block's items, each stage's
 * copies of the tile's rows (one TMA box per 32-row group, or one for a
 * whole tile) and of the weights, when the consumers have released the
 * stage's slot. */
template <class W, int COPY, class B>
__device__ __forceinline__ void wg_produce(const gptoss_gemm_args &a, const wg_items<B::TILE_ROWS> &items,
                                           uint8_t *w_st, uint8_t *x_st, uint64_t *full, uint64_t *empty, int chunks,
                                           const CUtensorMap *xmap_tile, const CUtensorMap *xmap_group,
                                           const CUtensorMap *wmap) {
    typedef wg_ring<W, B> shape;
    const int stages = (chunks + 1) / 2;
    int at = 0; /* the ring's stage count so far */
    items.each(a, [&](const row_tile &rt, int o0, int groups) {
        for (int st = 0; st < stages; st++, at++) {
            const int slot = at % shape::STAGES;
            if (at >= shape::STAGES)
                mbar_wait(&empty[slot], (at / shape::STAGES - 1) & 1);
            wg_stamp(WG_EV_SLOT_FREE, at);
            const wg_stage_weights<W, COPY> weights(a, o0, st, chunks);
            mbar_expect_tx(&full[slot], groups * WG_ROW_GROUP * WG_STAGE_K * 2 + weights.bytes);
            if (groups * WG_ROW_GROUP == B::TILE_ROWS) /* one box for a whole tile: fewer copies went faster */
                tma_2d(x_st + slot * B::ROWS_STAGE_BYTES, xmap_tile, st * WG_STAGE_K, rt.begin, &full[slot]);
            else
                for (int g = 0; g < groups; g++)
                    tma_2d(x_st + slot * B::ROWS_STAGE_BYTES + g * WG_ROW_GROUP * WG_STAGE_K * 2, xmap_group,
                           st * WG_STAGE_K, rt.begin + g * WG_ROW_GROUP, &full[slot]);
            weights.copy(a, rt.expert, o0, st, chunks, w_st + slot * shape::WEIGHTS_STAGE, wmap, &full[slot]);
            mbar_arrive(&full[slot]);
            wg_stamp(WG_EV_ISSUED, at);
        }
    });
}

/* A pass's epilogue for one of THREADS threads: its rows first, first +
 * step, ... of the pass's `rows`, all at once (epilogue_rows), the pair of
 * outputs o at sums' column 0. Rows past `rows` are read, not stored. */
template <int THREADS>
__device__ __forceinline__ void wg_epilogue_pass(const gptoss_gemm_args &a, int row0, int rows, int o,
                                                 const float *sums, int first, const pair_bias &bias) {
    constexpr int step = THREADS / (WG_BLOCK_OUTPUTS / 2), U = WG_EPILOGUE_ROWS / step;
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

/* The warp's sums of accumulator rows 8 j0 .. 8 (j0 + JS) - 1 (acc: the
 * even and odd chunks' of its 16 outputs) into sums' rows from 0. Element
 * 4j + e holds output 16 band + g (+ 8 from e = 2) of row 8j + 2t + (e & 1). */
template <int JS>
__device__ __forceinline__ void wg_put_sums(const float (&acc)[2][64], float *sums, int j0, int band, int g, int t) {
#pragma unroll
    for (int jj = 0; jj < JS; jj++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            sums[(8 * jj + 2 * t + (e & 1)) * WG_SUMS_STRIDE + 16 * band + g + 8 * (e >> 1)] =
                acc[0][4 * (j0 + jj) + e] + acc[1][4 * (j0 + jj) + e];
}

/* An item's sums through shared memory into the epilogue, by THREADS
 * threads from sums' row 0 (whole item there) or a pass at a time
 * (`put(r0)` writes rows r0 .. r0 + WG_EPILOGUE_ROWS - 1 there first), so
 * that the epilogue is one short loop (unrolled over the registers it was
 * tens of KiB of code) whose consecutive threads store consecutive outputs
 * of a row. Each thread keeps one pair of outputs, so a tile's bias is
 * loaded once; tid: the thread among the THREADS. */
template <int THREADS, int TILE_ROWS, class Put>
__device__ __forceinline__ void wg_store_passes(const gptoss_gemm_args &a, const row_tile &rt, int o0, float *sums,
                                                int tid, Put &&put) {
    constexpr int pairs = WG_BLOCK_OUTPUTS / 2;
    static_assert(THREADS % pairs == 0, "a thread's outputs are the same in every row");
    const int o = o0 + 2 * (tid % pairs);
    const pair_bias bias(a, rt, o < a.n ? o : o0);
#pragma unroll
    for (int pass = 0; pass < TILE_ROWS / WG_EPILOGUE_ROWS; pass++) {
        const int r0 = pass * WG_EPILOGUE_ROWS;
        if (r0 >= rt.end - rt.begin)
            break;
        const float *from = put(r0);
        if (o < a.n)
            wg_epilogue_pass<THREADS>(a, rt.begin + r0, min(WG_EPILOGUE_ROWS, rt.end - rt.begin - r0), o,
                                      from + o - o0, tid / pairs, bias);
    }
}

/* The consumers storing an item themselves, a pass at a time through
 * WG_EPILOGUE_ROWS rows of sums; tid: the thread among the consumers. */
template <int TILE_ROWS>
__device__ __forceinline__ void wg_store_item(const gptoss_gemm_args &a, const row_tile &rt, int o0,
                                              const float (&acc)[2][64], float *sums, int band, int g, int t, int tid) {
    wg_store_passes<WG_CONSUMERS, TILE_ROWS>(a, rt, o0, sums, tid, [&](int r0) {
        /* the previous pass's sums are read */
        asm volatile("bar.sync %0, %1;" ::"n"(WG_EPILOGUE_BARRIER), "n"(WG_CONSUMERS) : "memory");
        wg_put_sums<WG_EPILOGUE_ROWS / 8>(acc, sums, r0 / 8, band, g, t);
        asm volatile("bar.sync %0, %1;" ::"n"(WG_EPILOGUE_BARRIER), "n"(WG_CONSUMERS) : "memory");
        return (const float *)sums;
    });
}

/* The handoff of an item's sums between the consumers and the storers
 * (named barriers of both roles' threads: one arrives, the other waits). */
constexpr int WG_HANDOFF_THREADS = WG_CONSUMERS + 128;
__device__ __forceinline__ void wg_handoff_arrive(int barrier) {
    asm volatile("bar.arrive %0, %1;" ::"r"(barrier), "n"(WG_HANDOFF_THREADS) : "memory");
}
__device__ __forceinline__ void wg_handoff_wait(int barrier) {
    asm volatile("bar.sync %0, %1;" ::"r"(barrier), "n"(WG_HANDOFF_THREADS) : "memory");
}

/* The storing warpgroup: each item's sums, once the consumers have
 * written them, through the epilogue; then the sums are free for the next
 * item's. tid: the thread among the storers. */
template <int TILE_ROWS>
__device__ __forceinline__ void wg_store_items(const gptoss_gemm_args &a, const wg_items<TILE_ROWS> &items,
                                               float *sums, int tid) {
    items.each(a, [&](const row_tile &rt, int o0, int) {
        wg_handoff_wait(WG_SUMS_WRITTEN_BARRIER);
        wg_store_passes<128, TILE_ROWS>(a, rt, o0, sums, tid,
                                        [&](int r0) { return (const float *)sums + r0 * WG_SUMS_STRIDE; });
        wg_handoff_arrive(WG_SUMS_READ_BARRIER);
    });
}
#endif

/* A block over weights of format W that come as COPY says, on tiles of
 * up to ROWS rows: it takes items blockIdx.x, + gridDim.x, ... in turn,
 * and its ring runs on from one to the next, so the copies of an item's
 * first stages overlap the previous item's last products and epilogue.
 * Warpgroup 0 issues the copies (one thread), the others multiply and, on
 * tiles of up to 64 rows, the last stores (wg_block). */
template <class W, int COPY, int ROWS>
__global__ void __launch_bounds__(wg_block<ROWS>::THREADS, 1)
    gemm_wgmma_kernel(gptoss_gemm_args a, int row_blocks, const __grid_constant__ CUtensorMap xmap_tile,
                      const __grid_constant__ CUtensorMap xmap_group, const __grid_constant__ CUtensorMap wmap) {
#if defined(GPTOSS_WGMMA)
    typedef wg_block<ROWS> B;
    typedef wg_ring<W, B> shape;
    extern __shared__ uint8_t wgmma_smem[];
    uint8_t *ring = wgmma_ring(wgmma_smem);
    uint8_t *x_st = ring, *w_st = ring + shape::WEIGHTS_AT;
    uint64_t *full = (uint64_t *)(ring + shape::BARS_AT), *empty = full + shape::STAGES;
    float *sums = (float *)(ring + shape::SUMS_AT);
    const int chunks = (a.k + MX_KC - 1) / MX_KC, stages = (chunks + 1) / 2;
    const int tid = threadIdx.x, wg = tid / 128;
    const wg_items<ROWS> items(a, row_blocks);
    if (tid == 0) {
        for (int s = 0; s < shape::STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {
        warpgroup_registers<B::COPY_REGS, B::LAUNCH_REGS>();
        if (tid == 0)
            wg_produce<W, COPY, B>(a, items, w_st, x_st, full, empty, chunks, &xmap_tile, &xmap_group, &wmap);
        return;
    }
    if constexpr (B::STORER)
        if (tid >= WG_STORERS_AT)
            return wg_store_items<ROWS>(a, items, sums, tid - WG_STORERS_AT);
    warpgroup_registers<B::MMA_REGS, B::LAUNCH_REGS>();
    const int warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int band = (wg - 1) * 4 + warp; /* the warp's 16 outputs within the block */
    int at = 0;
    items.each(a, [&](const row_tile &rt, int o0, int groups) {
        float acc[2][64] = {};
        wg_consume_rows<1, W, B>(groups, acc, w_st, x_st, full, empty, chunks, band, lane, at);
        if constexpr (B::STORER) {
            if (at > 0) /* the storers have read the previous item's sums */
                wg_handoff_wait(WG_SUMS_READ_BARRIER);
            wg_put_sums<ROWS / 8>(acc, sums, 0, band, g, t);
            wg_handoff_arrive(WG_SUMS_WRITTEN_BARRIER);
        } else
            wg_store_item<ROWS>(a, rt, o0, acc, sums, band, g, t, tid - WG_CONSUMERS_AT);
        at += stages;
        if (tid == WG_STAMPING)
            wg_stamp(WG_EV_ITEM_DONE, at - 1);
    });
    if constexpr (B::STORER)
        if (at > 0) /* as many waits as the storers' arrivals */
            wg_handoff_wait(WG_SUMS_READ_BARRIER);
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
