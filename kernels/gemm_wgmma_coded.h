/* The Hopper GEMM over a coded weight format's experts (MXFP4), a part of
 * gemm.hip beside gemm_wgmma.h, whose items, rows and epilogue it shares.
 * A block decodes each weight tile once for all the rows of its item, into
 * shared memory, and both wgmma operands come from there:
 *
 *   warpgroup 0  two copying threads: the codes of a stage (the block's 8
 *                bands by two chunks) in one tensor-map box into a deep
 *                ring of their own, and the tile's rows into the rows' ring;
 *   warpgroup 1  decodes a stage's codes (each warp 2 bands by 2 chunks,
 *                the pieces the other families decode) into bf16, stored
 *                where the rows' permuted copy keeps the same k (below);
 *   warpgroups 2, 3  wgmma over 64 outputs each, A and B by descriptor,
 *                one instruction group in flight while the next is issued.
 *
 * So the decode runs beside the products instead of in front of them, and
 * the codes' copies are large (the earlier kernel copied 544 bytes a band).
 *
 * The bf16 operand lies as wgmma reads a 128-byte-swizzled K-major one:
 * output o's 64 k of a stage in 128 bytes, 16-byte unit u at u ^ (o % 8).
 * Within a chunk, word w (k 2w, 2w + 1) goes to position (w % 4) * 4 + w / 4
 * as permute_rows_kernel places the rows' words, so each instruction's 16 k
 * are the set that gemm_common.h's order gives it (k % 8 < 4, then the
 * rest) on both sides: the products, and so the bits, of the other
 * families. A lane's decoded piece (k 8t .. 8t + 7: words 4t .. 4t + 3)
 * goes word by word to positions t, 4 + t, 8 + t, 12 + t; the 8 rows g of a
 * warp's store land in 8 different units, so the 32 lanes hit 32 banks. */
#ifndef GPTOSS_KERNELS_GEMM_WGMMA_CODED_H
#define GPTOSS_KERNELS_GEMM_WGMMA_CODED_H

#include "gemm_wgmma.h"

namespace {

/* The rings: decoded stages (bf16, 128 outputs by 64 k; 6, so that the
 * decoding warps run on while the consumers store an item: 4 and 2 ran
 * slower), rows' stages (as many as fit), codes' stages (8: they are small
 * and wait on memory), then the barriers (two a stage) and the epilogue's
 * sums. */
template <class W> struct wc_ring {
    static constexpr int A_STAGES = 6, CODE_STAGES = 8;
    static constexpr int A_STAGE = WG_BO * WG_KS * 2, CODE_STAGE = WG_BO / 16 * 2 * W::TILE_BYTES,
                         SUMS = WG_EPI_ROWS * WG_SUMS_STRIDE * 4;
    /* less 1 KiB of slack to align the ring */
    static constexpr int X_STAGES =
        (WG_SMEM_MAX - 1024 - SUMS - A_STAGES * (A_STAGE + 16) - CODE_STAGES * (CODE_STAGE + 16)) / (WG_X_STAGE + 16);
    static constexpr int X_AT = A_STAGES * A_STAGE, CODES_AT = X_AT + X_STAGES * WG_X_STAGE,
                         BARS_AT = CODES_AT + CODE_STAGES * CODE_STAGE,
                         SUMS_AT = BARS_AT + 16 * (A_STAGES + X_STAGES + CODE_STAGES), SMEM = SUMS_AT + SUMS + 1024;
    static_assert(SMEM <= WG_SMEM_MAX && X_STAGES >= 2, "the rings fit a block's shared memory");
};

/* The block: warpgroup 0 copies, 1 decodes, 2 and 3 multiply; their
 * registers a thread (setmaxnreg) within what the launch gives the block */
struct wc_roles {
    static constexpr int THREADS = 2 * 128 + WG_CONSUMERS, LAUNCH_REGS = launch_registers<THREADS>, COPY_REGS = 24,
                         DECODE_REGS = 96, MMA_REGS = 192;
    static_assert(COPY_REGS + DECODE_REGS + 2 * MMA_REGS <= 4 * LAUNCH_REGS,
                  "the roles' registers fit the block's pool");
};

/* a ring's slot and the parity of its barriers' phase, at the ring's stage `at` */
struct ring_pos {
    int slot, parity;
    __device__ __forceinline__ ring_pos(int at, int stages) : slot(at % stages), parity((at / stages) & 1) {}
};

/* the block's barriers, at BARS_AT: each ring's full (its writer's) and empty (its readers') */
template <class W> struct wc_bars {
    typedef wc_ring<W> shape;
    uint64_t *base;
    __device__ __forceinline__ uint64_t *a_full(int s) const { return base + s; }
    __device__ __forceinline__ uint64_t *a_empty(int s) const { return base + shape::A_STAGES + s; }
    __device__ __forceinline__ uint64_t *x_full(int s) const { return base + 2 * shape::A_STAGES + s; }
    __device__ __forceinline__ uint64_t *x_empty(int s) const {
        return base + 2 * shape::A_STAGES + shape::X_STAGES + s;
    }
    __device__ __forceinline__ uint64_t *code_full(int s) const {
        return base + 2 * (shape::A_STAGES + shape::X_STAGES) + s;
    }
    __device__ __forceinline__ uint64_t *code_empty(int s) const {
        return base + 2 * (shape::A_STAGES + shape::X_STAGES) + shape::CODE_STAGES + s;
    }
};

#if defined(__HIP_PLATFORM_NVIDIA__) && defined(GPTOSS_WGMMA)

/* Copying thread `role` (0: rows, 1: codes) of warpgroup 0: every stage of
 * the block's items, each into its ring when the readers freed the slot.
 * A stage's codes are one box of the map over all experts' tiles (a row: a
 * band's chunks; 8 bands by 2 chunks), zeros past its end. */
template <class W>
__device__ __forceinline__ void wc_produce(int role, const gptoss_gemm_args &a, const wg_items &items,
                                           uint8_t *ring, const wc_bars<W> b, int chunks, const CUtensorMap *xmap_tile,
                                           const CUtensorMap *xmap_group, const CUtensorMap *code_map) {
    typedef wc_ring<W> shape;
    const int stages = (chunks + 1) / 2, bands = (a.n + 15) / 16;
    int at = 0;
    items.each(a, [&](const row_tile &rt, int o0, int groups) {
        for (int st = 0; st < stages; st++, at++) {
            if (role == 0) {
                const ring_pos p(at, shape::X_STAGES);
                if (at >= shape::X_STAGES)
                    mbar_wait(b.x_empty(p.slot), p.parity ^ 1);
                uint8_t *xs = ring + shape::X_AT + p.slot * WG_X_STAGE;
                mbar_expect_tx(b.x_full(p.slot), groups * WG_GROUP * WG_KS * 2);
                if (groups * WG_GROUP == WG_BT)
                    tma_2d(xs, xmap_tile, st * WG_KS, rt.begin, b.x_full(p.slot));
                else
                    for (int g = 0; g < groups; g++)
                        tma_2d(xs + g * WG_GROUP * WG_KS * 2, xmap_group, st * WG_KS, rt.begin + g * WG_GROUP,
                               b.x_full(p.slot));
                mbar_arrive(b.x_full(p.slot));
            } else {
                const ring_pos p(at, shape::CODE_STAGES);
                if (at >= shape::CODE_STAGES)
                    mbar_wait(b.code_empty(p.slot), p.parity ^ 1);
                mbar_expect_tx(b.code_full(p.slot), shape::CODE_STAGE);
                tma_2d(ring + shape::CODES_AT + p.slot * shape::CODE_STAGE, code_map,
                       2 * st * W::TILE_BYTES / 4, rt.expert * bands + o0 / 16, b.code_full(p.slot));
                mbar_arrive(b.code_full(p.slot));
            }
        }
    });
}

/* One decoding warp: for every stage, its 2 bands' tiles of the two chunks
 * into the decoded ring (the layout above), once the consumers freed the
 * slot; then the codes' slot is free and the decoded one full. */
template <class W>
__device__ __forceinline__ void wc_decode(const gptoss_gemm_args &a, const wg_items &items, uint8_t *ring,
                                          const wc_bars<W> b, int chunks, int warp, int lane) {
    typedef wc_ring<W> shape;
    const int stages = (chunks + 1) / 2, g = lane / 4, t = lane % 4;
    int at = 0;
    items.each(a, [&](const row_tile &rt, int o0, int groups) {
        for (int st = 0; st < stages; st++, at++) {
            const ring_pos pc(at, shape::CODE_STAGES), pa(at, shape::A_STAGES);
            mbar_wait(b.code_full(pc.slot), pc.parity);
            if (at >= shape::A_STAGES)
                mbar_wait(b.a_empty(pa.slot), pa.parity ^ 1);
            const uint8_t *codes = ring + shape::CODES_AT + pc.slot * shape::CODE_STAGE;
            uint8_t *out = ring + pa.slot * shape::A_STAGE;
            /* the 4 tiles' loads first: stored between them, the loads would wait for the stores */
            typename W::pieces mp[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                mp[j].load(codes + (2 * (2 * warp + j / 2) + j % 2) * W::TILE_BYTES, lane);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int band = 2 * warp + j / 2, ch = j % 2;
                uint4 w[2];
                mp[j].to_bf16(w);
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    /* row 16 band + g (+ 8): 128 bytes a row, 8 rows a 1 KiB swizzle group */
                    uint8_t *row = out + (16 * band + g + 8 * half) * 128 + 4 * t;
                    const uint32_t words[4] = {w[half].x, w[half].y, w[half].z, w[half].w};
#pragma unroll
                    for (int q = 0; q < 4; q++)
                        *(uint32_t *)(row + (((4 * ch + q) ^ g) << 4)) = words[q];
                }
            }
            fence_proxy_async();
            __syncwarp();
            if (lane == 0) {
                mbar_arrive(b.code_empty(pc.slot));
                mbar_arrive(b.a_full(pa.slot));
            }
        }
    });
}

/* A consumer warpgroup's k loop over a tile of G row groups (acc as
 * wg_consume's): each stage's 4 instructions once its rows and decoded
 * weights are in; a stage's slots are freed when its group is done, which
 * the next stage's wait (at most one group in flight) tells. */
template <int G, class W>
__device__ __forceinline__ void wc_consume(float (&acc)[2][64], uint8_t *ring, const wc_bars<W> b, int chunks,
                                           int half, int ring_at) {
    typedef wc_ring<W> shape;
    typedef wg_mma<WG_GROUP * G> mma;
    const int stages = (chunks + 1) / 2;
    const bool leader = threadIdx.x % 128 == 0;
    for (int st = 0; st < stages; st++) {
        const ring_pos px(ring_at + st, shape::X_STAGES), pa(ring_at + st, shape::A_STAGES);
        mbar_wait(b.x_full(px.slot), px.parity);
        mbar_wait(b.a_full(pa.slot), pa.parity);
        const uint8_t *xs = ring + shape::X_AT + px.slot * WG_X_STAGE;
        const uint8_t *as = ring + pa.slot * shape::A_STAGE + half * (64 * 128);
        wg_fence();
        mma::run_ss(acc[0], swizzled_desc(as), swizzled_desc(xs));
        mma::run_ss(acc[0], swizzled_desc(as + 32), swizzled_desc(xs + 32));
        if (2 * st + 1 < chunks) {
            mma::run_ss(acc[1], swizzled_desc(as + 64), swizzled_desc(xs + 64));
            mma::run_ss(acc[1], swizzled_desc(as + 96), swizzled_desc(xs + 96));
        }
        wg_commit();
        wg_wait<1>();
        if (st > 0 && leader) {
            const ring_pos qx(ring_at + st - 1, shape::X_STAGES), qa(ring_at + st - 1, shape::A_STAGES);
            mbar_arrive(b.x_empty(qx.slot));
            mbar_arrive(b.a_empty(qa.slot));
        }
    }
    wg_wait<0>();
    if (leader) {
        const ring_pos qx(ring_at + stages - 1, shape::X_STAGES), qa(ring_at + stages - 1, shape::A_STAGES);
        mbar_arrive(b.x_empty(qx.slot));
        mbar_arrive(b.a_empty(qa.slot));
    }
}

/* wc_consume at the tile's row groups, G .. WG_BT / 32 */
template <int G, class W>
__device__ __forceinline__ void wc_consume_rows(int groups, float (&acc)[2][64], uint8_t *ring, const wc_bars<W> b,
                                                int chunks, int half, int ring_at) {
    if constexpr (G < WG_BT / WG_GROUP)
        if (groups > G)
            return wc_consume_rows<G + 1, W>(groups, acc, ring, b, chunks, half, ring_at);
    wc_consume<G, W>(acc, ring, b, chunks, half, ring_at);
}
#endif

#if defined(__HIP_PLATFORM_NVIDIA__)
/* A persistent block over items blockIdx.x, + gridDim.x, ... (wg_items),
 * its rings running on from one item to the next. */
template <class W>
__global__ void __launch_bounds__(wc_roles::THREADS, 1)
    gemm_wgmma_coded_kernel(gptoss_gemm_args a, int row_blocks, const __grid_constant__ CUtensorMap xmap_tile,
                            const __grid_constant__ CUtensorMap xmap_group,
                            const __grid_constant__ CUtensorMap code_map) {
#if defined(__HIP_PLATFORM_NVIDIA__) && defined(GPTOSS_WGMMA)
    typedef wc_ring<W> shape;
    extern __shared__ uint8_t wgmma_smem[];
    uint8_t *ring = wgmma_ring(wgmma_smem);
    const wc_bars<W> b = {(uint64_t *)(ring + shape::BARS_AT)};
    const int chunks = (a.k + MX_KC - 1) / MX_KC, stages = (chunks + 1) / 2;
    const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
    const wg_items items(a, row_blocks);
    if (tid == 0) {
        /* full: the writer's one arrival (and the copies' bytes) or the 4 decoding warps'; empty: the readers' */
        for (int s = 0; s < shape::A_STAGES; s++) {
            mbar_init(b.a_full(s), 4);
            mbar_init(b.a_empty(s), 2);
        }
        for (int s = 0; s < shape::X_STAGES; s++) {
            mbar_init(b.x_full(s), 1);
            mbar_init(b.x_empty(s), 2);
        }
        for (int s = 0; s < shape::CODE_STAGES; s++) {
            mbar_init(b.code_full(s), 1);
            mbar_init(b.code_empty(s), 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 0) {
        warpgroup_registers<wc_roles::COPY_REGS, wc_roles::LAUNCH_REGS>();
        if (lane == 0 && warp < 2)
            wc_produce<W>(warp, a, items, ring, b, chunks, &xmap_tile, &xmap_group, &code_map);
        return;
    }
    if (wg == 1) {
        warpgroup_registers<wc_roles::DECODE_REGS, wc_roles::LAUNCH_REGS>();
        wc_decode<W>(a, items, ring, b, chunks, warp, lane);
        return;
    }
    warpgroup_registers<wc_roles::MMA_REGS, wc_roles::LAUNCH_REGS>();
    const int half = wg - 2, band = half * 4 + warp; /* the warp's 16 outputs within the block */
    float *sums = (float *)(ring + shape::SUMS_AT);
    int at = 0;
    items.each(a, [&](const row_tile &rt, int o0, int groups) {
        float acc[2][64] = {};
        wc_consume_rows<1, W>(groups, acc, ring, b, chunks, half, at);
        at += stages;
        wg_store_item(a, rt, o0, acc, sums, band, lane / 4, lane % 4,
                      tid - (wc_roles::THREADS - WG_CONSUMERS));
    });
#endif
}
#endif

} // namespace

#endif
