/* The Hopper GEMM (bf16 mode, sm_90a), a part of gemm.hip, for the dense
 * GEMMs and the experts' grouped GEMMs of many rows: wgmma fed by TMA and
 * bulk copies through an mbarrier ring, one producer warpgroup issuing the
 * copies and two consumer warpgroups of 64 outputs each, a block covering
 * items of 128 outputs by a tile of up to 128 rows (dense: a row block;
 * grouped: an entry of the tile table, one expert's pairs) one after
 * another, its ring running on from one item to the next.
 *
 * The weights are the A operand (wgmma's M), from registers: each lane
 * reads the same 16-byte pieces the other families multiply (matrix_core.h;
 * MXFP4 tiles turned into them as gemm_staged.h does) and gives each
 * instruction the words mma32 gives its two mma.sync, so a chunk's sets of
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
 * Weights come as they lie: tiled bf16 (layout.h) or MXFP4 tiles in 1D bulk
 * copies, or [n][k] through a tensor map in boxes of one chunk by 128 rows,
 * which lands as the tiled layout's 16 x 32 tiles one after another, whose
 * 64-byte rows the lanes read without bank conflicts. Tensor maps are
 * encoded per launch on the host with the driver's cuTensorMapEncodeTiled,
 * reached through the runtime, so nothing links libcuda. Everything here is
 * NVIDIA only; elsewhere gemm_wgmma_takes is false. */
#ifndef GPTOSS_KERNELS_GEMM_WGMMA_H
#define GPTOSS_KERNELS_GEMM_WGMMA_H

#include "gemm_common.h"
#include "hopper.h"

#include <string.h>

namespace {

constexpr int WG_BO = 128;     /* outputs per block: two consumer warpgroups of 64 */
constexpr int WG_BT = 128;     /* rows per tile at most */
constexpr int WG_GROUP = 32;   /* rows per TMA box; a tile's N is a multiple */
constexpr int WG_BAND = 8;     /* grouped: column blocks per band (see the launcher; 4 and 16 measured no better) */
constexpr int WG_KS = 64;      /* k per stage: an even and an odd chunk */
constexpr int WG_X_STAGE = WG_BT * WG_KS * 2;
/* the sums' row stride in the epilogue (floats): a warp's stores (rows 2t, outputs g) hit 32 banks */
constexpr int WG_SUMS_STRIDE = WG_BO + 4;

/* how the weights lie: [n][k] (a tensor map), bf16 tiles, MXFP4 tiles */
enum wg_weights { WG_W_ROWS, WG_W_TILED, WG_W_MXFP4 };

/* rows of sums per pass of the epilogue through shared memory */
constexpr int WG_EPI_ROWS = 32;

/* The ring of a weight format: a stage's weights (the bf16 ones 16 KiB,
 * MXFP4 tiles 4.25), their stages 1 KiB-aligned as the rows' swizzle
 * wants, then the rows' stages, the stages' barriers and the epilogue's
 * sums, with as many stages as fit in the 227 KiB a block may have (6 of
 * bf16, 10 of MXFP4). */
constexpr int WG_SMEM_MAX = 227 * 1024;
template <int WF> struct wg_ring {
    static constexpr int W_STAGE = WF == WG_W_MXFP4 ? WG_BO / 16 * 2 * GPTOSS_MXFP4_TILE_BYTES : WG_BO * WG_KS * 2;
    static constexpr int x_at(int stages) { return (stages * W_STAGE + 1023) / 1024 * 1024; }
    static constexpr int sums_at(int stages) { return x_at(stages) + stages * (WG_X_STAGE + 16); }
    /* slack to align the ring to 1 KiB */
    static constexpr int smem(int stages) { return sums_at(stages) + WG_EPI_ROWS * WG_SUMS_STRIDE * 4 + 1024; }
    static constexpr int fitting(int stages) { return smem(stages + 1) > WG_SMEM_MAX ? stages : fitting(stages + 1); }
    static constexpr int STAGES = fitting(2);
    static constexpr int X_AT = x_at(STAGES), BARS_AT = X_AT + STAGES * WG_X_STAGE, SUMS_AT = sums_at(STAGES),
                         SMEM = smem(STAGES);
};

/* k rounded up to whole chunks: the permuted rows' width */
__host__ __device__ __forceinline__ int wgmma_k_padded(int k) { return (k + MX_KC - 1) / MX_KC * MX_KC; }

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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GPTOSS_WGMMA 1

/* d += A B over one k16 step, m64 by n32 .. n128 (the tile's rows rounded
 * up to 32), A from registers; accumulator 4j + e is row group j's */
#define WG_D4(i) "+f"(d[i]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define WG_D16(i) WG_D4(i), WG_D4((i) + 4), WG_D4((i) + 8), WG_D4((i) + 12)
#define WG_MMA(n) "wgmma.mma_async.sync.aligned.m64n" #n "k16.f32.bf16.bf16 "
template <int N> struct wg_mma;
template <> struct wg_mma<32> {
    __device__ static __forceinline__ void run(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint64_t b) {
        asm volatile(WG_MMA(32)
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, 1, 1, 1, 0;"
                     : WG_D16(0)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
    }
};
template <> struct wg_mma<64> {
    __device__ static __forceinline__ void run(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint64_t b) {
        asm volatile(WG_MMA(64)
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
                      "%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 1, 1, 1, 0;"
                     : WG_D16(0), WG_D16(16)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
    }
};
template <> struct wg_mma<96> {
    __device__ static __forceinline__ void run(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint64_t b) {
        asm volatile(WG_MMA(96)
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
                      "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, "
                      "{%48,%49,%50,%51}, %52, 1, 1, 1, 0;"
                     : WG_D16(0), WG_D16(16), WG_D16(32)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
    }
};
template <> struct wg_mma<128> {
    __device__ static __forceinline__ void run(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint64_t b) {
        asm volatile(WG_MMA(128)
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
                      "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,"
                      "%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, 1, 1, 1, 0;"
                     : WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
    }
};
#undef WG_D4
#undef WG_D16
#undef WG_MMA

/* The lane's weight pieces of one stage: tile16 rows g and g + 8, k 8t..8t+7, of each chunk */
template <int WF>
__device__ __forceinline__ void wg_load_a(uint4 (&lo)[2], uint4 (&hi)[2], const uint8_t *ws, int band, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ch = 0; ch < 2; ch++) {
        if constexpr (WF == WG_W_MXFP4) {
            mxfp4_pieces mp;
            mp.load(ws + (2 * band + ch) * GPTOSS_MXFP4_TILE_BYTES, lane);
            uint4 w[2];
            mp.to_bf16(w);
            lo[ch] = w[0];
            hi[ch] = w[1];
        } else {
            const uint8_t *tile = ws + ch * 8192 + band * 1024;
            lo[ch] = *(const uint4 *)(tile + g * 64 + t * 16);
            hi[ch] = *(const uint4 *)(tile + (g + 8) * 64 + t * 16);
        }
    }
}

/* keeps a's registers allocated up to here: wgmma reads them until its group completes */
__device__ __forceinline__ void wg_hold(uint4 (&a)[2]) {
    asm volatile("" : "+r"(a[0].x), "+r"(a[0].y), "+r"(a[0].z), "+r"(a[0].w), "+r"(a[1].x), "+r"(a[1].y),
                 "+r"(a[1].z), "+r"(a[1].w));
}

/* A consumer warpgroup's k loop over a tile of G row groups: acc[c] the
 * sums of the even (c 0) and odd chunks of the warp's 16 outputs; the
 * tile's stages are the ring's from stage `ring_at` on (counted over the
 * block's tiles). One stage's group stays in flight while the next stage's
 * pieces load, so its slot is released a stage late and the pieces are
 * double-buffered; the last slot is released once its group is done. */
template <int G, int WF>
__device__ __forceinline__ void wg_consume(float (&acc)[2][64], const uint8_t *w_st, const uint8_t *x_st,
                                           uint64_t *full, uint64_t *empty, int chunks, int band, int lane,
                                           int ring_at) {
    typedef wg_ring<WF> ring;
    const int stages = (chunks + 1) / 2;
    uint4 lo[2][2] = {}, hi[2][2] = {}; /* [buffer][chunk] */
    auto stage = [&](int st, uint4(&l)[2], uint4(&h)[2], uint4(&l_prev)[2], uint4(&h_prev)[2]) {
        const int slot = (ring_at + st) % ring::STAGES;
        mbar_wait(&full[slot], ((ring_at + st) / ring::STAGES) & 1);
        const uint8_t *xs = x_st + slot * WG_X_STAGE;
        wg_load_a<WF>(l, h, w_st + slot * ring::W_STAGE, band, lane);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        /* chunk ch's instruction s: the pieces' words 2s and 2s + 1, as mma32 */
        typedef wg_mma<WG_GROUP * G> mma;
        mma::run(acc[0], l[0].x, h[0].x, l[0].y, h[0].y, swizzled_desc(xs));
        mma::run(acc[0], l[0].z, h[0].z, l[0].w, h[0].w, swizzled_desc(xs + 32));
        if (2 * st + 1 < chunks) {
            mma::run(acc[1], l[1].x, h[1].x, l[1].y, h[1].y, swizzled_desc(xs + 64));
            mma::run(acc[1], l[1].z, h[1].z, l[1].w, h[1].w, swizzled_desc(xs + 96));
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
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
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    wg_hold(lo[0]);
    wg_hold(hi[0]);
    wg_hold(lo[1]);
    wg_hold(hi[1]);
    if (threadIdx.x % 128 == 0)
        mbar_arrive(&empty[(ring_at + stages - 1) % ring::STAGES]);
}
#endif

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
};

/* A persistent block: it takes items blockIdx.x, + gridDim.x, ... in turn,
 * and its ring runs on from one to the next, so the copies of an item's
 * first stages overlap the previous item's last products and epilogue.
 * Warpgroup 0 issues the copies (one thread), 1 and 2 multiply 64 outputs
 * each. */
template <int WF>
__global__ void __launch_bounds__(384, 1)
    gemm_wgmma_kernel(gptoss_gemm_args a, int row_blocks, const __grid_constant__ CUtensorMap xmap_tile,
                      const __grid_constant__ CUtensorMap xmap_group, const __grid_constant__ CUtensorMap wmap) {
#if defined(GPTOSS_WGMMA)
    typedef wg_ring<WF> shape;
    extern __shared__ uint8_t wgmma_smem[];
    uint8_t *ring = (uint8_t *)(((uintptr_t)wgmma_smem + 1023) & ~(uintptr_t)1023);
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
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid != 0)
            return;
        int at = 0; /* the ring's stage count so far */
        for (int i = blockIdx.x; i < items.count(); i += gridDim.x) {
            row_tile rt;
            int o0, groups;
            if (!items.at(a, i, rt, o0, groups))
                continue;
            const int bands = min(WG_BO / 16, (a.n - o0 + 15) / 16);
            const bf16 *w_tiles = expert_w(a, rt);
            const uint8_t *w_mx = expert_w_mxfp4(a, rt);
            for (int st = 0; st < stages; st++, at++) {
                const int slot = at % shape::STAGES, nc = min(2, chunks - 2 * st);
                uint8_t *ws = w_st + slot * shape::W_STAGE;
                if (at >= shape::STAGES)
                    mbar_wait(&empty[slot], (at / shape::STAGES - 1) & 1);
                const int w_bytes = WF == WG_W_ROWS    ? WG_BO / 16 * nc * 1024 /* whole boxes, zeros past the map */
                                    : WF == WG_W_TILED ? bands * nc * 1024
                                                       : bands * nc * GPTOSS_MXFP4_TILE_BYTES;
                mbar_expect_tx(&full[slot], groups * WG_GROUP * WG_KS * 2 + w_bytes);
                if (groups * WG_GROUP == WG_BT) /* one box for a whole tile: fewer copies went faster */
                    tma_2d(x_st + slot * WG_X_STAGE, &xmap_tile, st * WG_KS, rt.begin, &full[slot]);
                else
                    for (int g = 0; g < groups; g++)
                        tma_2d(x_st + slot * WG_X_STAGE + g * WG_GROUP * WG_KS * 2, &xmap_group, st * WG_KS,
                               rt.begin + g * WG_GROUP, &full[slot]);
                if (WF == WG_W_MXFP4) /* band b's tiles of the two chunks lie side by side */
                    for (int b = 0; b < bands; b++)
                        bulk_copy(ws + 2 * b * GPTOSS_MXFP4_TILE_BYTES,
                                  mxfp4_tile(w_mx, o0 / 16 + b, 2 * st, chunks), nc * GPTOSS_MXFP4_TILE_BYTES,
                                  &full[slot]);
                for (int ch = 0; ch < nc; ch++) /* the chunk's 16-row tiles one after another */
                    if (WF == WG_W_TILED)
                        for (int b = 0; b < bands; b++)
                            bulk_copy(ws + ch * 8192 + b * 1024,
                                      w_tiles + ((size_t)(o0 / 16 + b) * chunks + 2 * st + ch) * GPTOSS_TILE_ELEMS,
                                      1024, &full[slot]);
                    else if (WF == WG_W_ROWS) /* the map holds every expert's rows, one after another */
                        tma_2d(ws + ch * 8192, &wmap, (2 * st + ch) * MX_KC, rt.expert * a.n + o0, &full[slot]);
                mbar_arrive(&full[slot]);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int warp = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int band = (wg - 1) * 4 + warp; /* the warp's 16 outputs within the block */
    /* each thread keeps one pair of outputs in the epilogue, so a tile's bias is loaded once */
    constexpr int pairs = WG_BO / 2;
    static_assert(256 % pairs == 0, "a consumer thread's outputs are the same in every row");
    int at = 0;
    for (int i = blockIdx.x; i < items.count(); i += gridDim.x) {
        row_tile rt;
        int o0, groups;
        if (!items.at(a, i, rt, o0, groups))
            continue;
        float acc[2][64];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int v = 0; v < 64; v++)
                acc[h][v] = 0.0f;
        switch (groups) {
        case 1:
            wg_consume<1, WF>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
            break;
        case 2:
            wg_consume<2, WF>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
            break;
        case 3:
            wg_consume<3, WF>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
            break;
        default:
            wg_consume<4, WF>(acc, w_st, x_st, full, empty, chunks, band, lane, at);
        }
        at += stages;
        /* The sums go through shared memory, WG_EPI_ROWS rows a pass, so
         * that the epilogue is one short loop (unrolled over the registers
         * it was tens of KiB of code) whose consecutive threads store
         * consecutive outputs of a row. Element 4j + e holds output
         * 16 band + g (+ 8 from e = 2) of row 8j + 2t + (e & 1). */
        const int o = o0 + 2 * ((tid - 128) % pairs);
        const pair_bias bias(a, rt, o < a.n ? o : o0);
        constexpr int JS = WG_EPI_ROWS / 8; /* accumulator rows j a pass */
#pragma unroll
        for (int pass = 0; pass < WG_BT / WG_EPI_ROWS; pass++) {
            const int r0 = pass * WG_EPI_ROWS;
            if (r0 >= rt.end - rt.begin)
                break;
            asm volatile("bar.sync 1, 256;" ::: "memory"); /* the previous pass's sums are read */
#pragma unroll
            for (int jj = 0; jj < JS; jj++) {
                const int j = pass * JS + jj;
#pragma unroll
                for (int e = 0; e < 4; e++)
                    sums[(8 * jj + 2 * t + (e & 1)) * WG_SUMS_STRIDE + 16 * band + g + 8 * (e >> 1)] =
                        acc[0][4 * j + e] + acc[1][4 * j + e];
            }
            asm volatile("bar.sync 1, 256;" ::: "memory");
            if (o < a.n)
                for (int r = (tid - 128) / pairs; r < min(WG_EPI_ROWS, rt.end - rt.begin - r0); r += 256 / pairs) {
                    const float2 v = *(const float2 *)&sums[r * WG_SUMS_STRIDE + o - o0];
                    epilogue<bf16>(a, rt.begin + r0 + r, o, v.x, v.y, bias);
                }
        }
    }
#endif
}

typedef CUresult (*tensor_map_encoder)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                       CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                       CUtensorMapFloatOOBfill);

/* a bf16 [rows][width] matrix of row stride `stride` elements in boxes of box_k x box_rows;
 * swizzled: the 128-byte swizzle (box_k 64) */
static hipError_t encode_map(CUtensorMap *map, const void *base, int64_t rows, int64_t width, int64_t stride,
                             int box_k, int box_rows, bool swizzled) {
    static tensor_map_encoder encode = nullptr;
    if (!encode) {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            return hipErrorNotSupported;
        encode = (tensor_map_encoder)f;
    }
    cuuint64_t dims[2] = {(cuuint64_t)width, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)stride * 2};
    cuuint32_t box[2] = {(cuuint32_t)box_k, (cuuint32_t)box_rows}, unit[2] = {1, 1};
    CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box, unit,
                        CU_TENSOR_MAP_INTERLEAVE_NONE, swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? hipSuccess : hipErrorInvalidValue;
}

__global__ void wgmma_built_kernel(int *out) {
#if defined(GPTOSS_WGMMA)
    *out = 1;
#else
    *out = 0;
#endif
}

#endif /* __HIP_PLATFORM_NVIDIA__ */

/* Whether this GEMM can run on gemm_wgmma_kernel: bf16 weights or MXFP4
 * tiles on a device that has it, with a permutation scratch, storing, adding
 * into the residual (dense) or applying SwiGLU (grouped); [n][k] weights
 * need rows of whole 16 bytes for their tensor map. Dense GEMMs take it
 * where its blocks fill a wave (one block per multiprocessor: short of
 * that the other families' smaller blocks keep more of the GPU busy);
 * grouped ones where the caller sized the tile table for it
 * (gptoss_moe_tile_rows). */
bool gemm_wgmma_fits(const gptoss_gemm_args *a, const gptoss_gpu_shape *dev) {
    const bool epilogue = a->tiles ? a->epilogue == GPTOSS_GEMM_STORE || a->epilogue == GPTOSS_GEMM_SWIGLU
                                   : a->epilogue == GPTOSS_GEMM_STORE || a->epilogue == GPTOSS_GEMM_RESIDUAL;
    return dev->wgmma && a->x_perm && epilogue && (a->w_tiled || a->k % 8 == 0);
}

bool gemm_wgmma_takes(const gptoss_gemm_args *a, const gptoss_gpu_shape *dev) {
    if (a->tiles)
        return a->tile_rows == WG_BT && gemm_wgmma_fits(a, dev);
    const int64_t blocks = (int64_t)((a->n + WG_BO - 1) / WG_BO) * ((a->rows + WG_BT - 1) / WG_BT);
    return !a->x_rows && !a->w_mxfp4 && blocks >= dev->multiprocessors && gemm_wgmma_fits(a, dev);
}

/* max_tiles: the grouped launch's tile table size */
hipError_t launch_gemm_wgmma(const gptoss_gemm_args *a, int max_tiles, const gptoss_gpu_shape *dev,
                             hipStream_t stream) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    const int kp = wgmma_k_padded(a->k);
    const int64_t pieces = (int64_t)a->rows * (kp / 8);
    hipLaunchKernelGGL(permute_rows_kernel, dim3((unsigned)((pieces + 255) / 256)), dim3(256), 0, stream,
                       (const bf16 *)a->x, a->x_rows, a->rows, a->k, (bf16 *)a->x_perm);
    CUtensorMap xmap_tile, xmap_group, wmap;
    memset(&wmap, 0, sizeof wmap);
    hipError_t e = encode_map(&xmap_tile, a->x_perm, a->rows, kp, kp, WG_KS, WG_BT, true);
    if (e == hipSuccess)
        e = encode_map(&xmap_group, a->x_perm, a->rows, kp, kp, WG_KS, WG_GROUP, true);
    const int64_t matrices = a->tiles ? a->n_experts : 1;
    if (e == hipSuccess && !a->w_tiled) /* read by the lanes, not by wgmma: the tiles' own layout */
        e = encode_map(&wmap, a->w, matrices * a->n, a->k, a->k, MX_KC, WG_BO, false);
    if (e != hipSuccess)
        return e;
    auto kernel = a->w_mxfp4  ? gemm_wgmma_kernel<WG_W_MXFP4>
                  : a->w_tiled ? gemm_wgmma_kernel<WG_W_TILED>
                               : gemm_wgmma_kernel<WG_W_ROWS>;
    const int smem = a->w_mxfp4 ? wg_ring<WG_W_MXFP4>::SMEM : a->w_tiled ? wg_ring<WG_W_TILED>::SMEM
                                                                          : wg_ring<WG_W_ROWS>::SMEM;
    e = hipFuncSetAttribute((const void *)kernel, hipFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != hipSuccess)
        return e;
    /* Items in order (wg_items), one block per multiprocessor taking every
     * gridDim.x-th, except for bf16 experts: bound by memory, they ran 13%
     * slower that way than with a block per item, which the GPU hands out
     * as blocks finish (MXFP4 experts ran 9% faster persistent, the
     * unembedding 4%). Dense: the row blocks of one weight block come one
     * after another, so they run side by side and its weights come from
     * memory once and the rows (a few MiB) from L2. Grouped, all the pairs'
     * rows would not stay in L2 for every column block: the items go in
     * bands of WG_BAND column blocks, tile after tile within a band, so a
     * tile's rows serve the band from L2 and an expert's weight block serves
     * its tiles, adjacent in the table, from L2. */
    const int col_blocks = (a->n + WG_BO - 1) / WG_BO, row_blocks = a->tiles ? max_tiles : (a->rows + WG_BT - 1) / WG_BT;
    if ((int64_t)row_blocks * col_blocks > INT32_MAX)
        return hipErrorInvalidValue;
    const int items = row_blocks * col_blocks;
    const int blocks = a->tiles && !a->w_mxfp4 ? items : min(items, dev->multiprocessors);
    hipLaunchKernelGGL(kernel, dim3(blocks), dim3(384), smem, stream, *a, row_blocks, xmap_tile, xmap_group, wmap);
    return hipGetLastError();
#else
    (void)a;
    (void)max_tiles;
    (void)dev;
    (void)stream;
    return hipErrorNotSupported;
#endif
}

} // namespace

#endif
