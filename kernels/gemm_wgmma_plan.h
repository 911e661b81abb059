/* The Hopper GEMM's plan (gemm_wgmma.h is its device code): the shape of
 * its blocks (outputs, rows and k a stage, the roles' threads and
 * registers), the ring of a weight format in shared memory, the items a
 * launch's blocks take, the rows' permuted copy that its operands want,
 * and the timeline stamps of its probe. */
#ifndef GPTOSS_KERNELS_GEMM_WGMMA_PLAN_H
#define GPTOSS_KERNELS_GEMM_WGMMA_PLAN_H

#include "gemm_common.h"
#include "hopper.h"
#include "wgmma.h"

namespace {

constexpr int WG_BLOCK_OUTPUTS = 128; /* outputs per block: two consumer warpgroups of 64 */
constexpr int WG_BLOCK_BANDS = WG_BLOCK_OUTPUTS / GPTOSS_TILE_ROWS; /* the block's 16-output bands, a warp each */
constexpr int WG_TILE_ROWS = 128;                                   /* rows per tile at most */
constexpr int WG_ROW_GROUP = 32;                                    /* rows per TMA box; a tile's N is a multiple */
constexpr int WG_BAND_BLOCKS = 8;                                   /* grouped: column blocks per band (see the
                                                                       launcher; 4 and 16 measured no better) */
constexpr int WG_STAGE_K = 64;                                      /* k per stage: an even and an odd chunk */
/* the sums' row stride in the epilogue (floats): a warp's stores (rows 2t,
 * outputs g) hit 32 banks */
constexpr int WG_SUMS_STRIDE = WG_BLOCK_OUTPUTS + 4;
/* the named barrier of the consumers' epilogue passes (0 is the block's
 * __syncthreads) */
constexpr int WG_EPILOGUE_BARRIER = 1;

/* how the weights reach shared memory: through a tensor map ([n][k] bf16
 * rows, or a coded format's tiles), or bf16 tiles by bulk copies */
enum wg_weight_copy { WG_BY_MAP, WG_BY_TILES };

/* rows of sums per pass of the epilogue through shared memory */
constexpr int WG_EPILOGUE_ROWS = 32;
/* the consumers' threads (two warpgroups of 64 outputs each), a block's last */
constexpr int WG_CONSUMERS = 256;

/* A block's roles by its tiles' rows at most: warpgroup 0 copies, 1 and 2
 * multiply 64 outputs each and store each item's sums themselves. Tiles
 * of up to 64 rows (the experts' where they expect few rows) leave the
 * consumers' accumulators few enough registers for a fourth warpgroup
 * that stores: the consumers hand it an item's sums through shared memory
 * and go on with the next item, whose stages the producer has copied
 * meanwhile. Registers a thread by role (setmaxnreg) within what the
 * launch gives the block; the storers keep the launch's. */
constexpr int WG_SMALL_TILE_ROWS = 64;
/* the expected rows an expert up to which its tiles are small ones */
constexpr int WG_SMALL_TILE_EXPECTED = 48;
template <int ROWS> struct wg_block {
    static constexpr int TILE_ROWS = ROWS;
    static constexpr bool STORER = ROWS <= WG_SMALL_TILE_ROWS;
    static constexpr int THREADS = 128 + WG_CONSUMERS + (STORER ? 128 : 0), LAUNCH_REGS = launch_registers<THREADS>,
                         COPY_REGS = 40, MMA_REGS = STORER ? 168 : 232;
    static_assert(COPY_REGS + 2 * MMA_REGS + (STORER ? LAUNCH_REGS : 0) <= THREADS / 128 * LAUNCH_REGS,
                  "the roles' registers fit the block's pool");
    static constexpr int ROWS_STAGE_BYTES = ROWS * WG_STAGE_K * 2;
    /* the sums in shared memory: a pass's rows, or a whole item's for the storers */
    static constexpr int SUMS_ROWS = STORER ? ROWS : WG_EPILOGUE_ROWS;
};
/* the consumers' threads begin after the copying warpgroup's; the storers' after theirs */
constexpr int WG_CONSUMERS_AT = 128, WG_STORERS_AT = WG_CONSUMERS_AT + WG_CONSUMERS;
/* the named barriers of an item's sums handed to the storers: written
 * (consumers arrive, storers wait) and read (the other way round) */
constexpr int WG_SUMS_WRITTEN_BARRIER = 2, WG_SUMS_READ_BARRIER = 3;

/* The ring of a format W's weights for blocks B: a stage's rows (up to
 * B's tile rows by 64 k, 1 KiB-aligned as their swizzle wants) and weights
 * (two chunks of 8 bands' tiles: bf16 16 KiB, MXFP4 4.25 KiB), then the
 * stages' barriers and the epilogue's sums, with as many stages as fit in
 * the 227 KiB a block may have (tiles of 128 rows: bf16 6, MXFP4 10; of
 * 64: 8 and 15). */
constexpr int WG_SMEM_MAX = 227 * 1024;
/* the rows' 128-byte swizzle repeats every 8 rows: their stages start on such a
 * boundary */
constexpr int WG_SWIZZLE_ALIGN = 1024;
/* a stage's two mbarriers (full, empty) */
constexpr int WG_STAGE_BARRIER_BYTES = 2 * sizeof(uint64_t);
/* a stage's weights of format W: two chunks of the block's bands' tiles */
template <class W> constexpr int wg_weights_stage = WG_BLOCK_BANDS * 2 * W::TILE_BYTES;
template <class W, class B> struct wg_ring {
    static constexpr int WEIGHTS_STAGE = wg_weights_stage<W>, SUMS = B::SUMS_ROWS * WG_SUMS_STRIDE * 4;
    /* with the slack to align the ring */
    static constexpr int STAGES = (WG_SMEM_MAX - SUMS - WG_SWIZZLE_ALIGN) /
                                  (WEIGHTS_STAGE + B::ROWS_STAGE_BYTES + WG_STAGE_BARRIER_BYTES);
    static constexpr int WEIGHTS_AT = STAGES * B::ROWS_STAGE_BYTES, BARS_AT = WEIGHTS_AT + STAGES * WEIGHTS_STAGE,
                         SUMS_AT = BARS_AT + STAGES * WG_STAGE_BARRIER_BYTES, SMEM = SUMS_AT + SUMS + WG_SWIZZLE_ALIGN;
    static_assert(WEIGHTS_STAGE % 128 == 0, "a stage's weights are 128-byte-aligned, as a map's box must land");
    static_assert(B::ROWS_STAGE_BYTES % WG_SWIZZLE_ALIGN == 0, "every stage's rows start on a swizzle boundary");
};

/* Block 0's timeline: the producer and the first consumer thread stamp
 * clock64 at each stage's waits (indexed by the ring's stage count) and at
 * each item's end, where GPTOSS_WG_TIMELINE is defined (the timeline build
 * of tools/hopper_probes/engine_gemm.cu); elsewhere the stamps are empty. */
enum wg_event {
    WG_EV_SLOT_FREE, /* producer: the stage's slot is free */
    WG_EV_ISSUED,    /* producer: its copies are issued */
    WG_EV_FULL,      /* consumer: its rows and weights are in */
    WG_EV_LOADED,    /* consumer: its A registers are made */
    WG_EV_PREV_DONE, /* consumer: the stage before's instructions are done */
    WG_EV_ITEM_DONE, /* consumer: the item's outputs are stored (indexed by its
                        last stage) */
    WG_EVENTS
};
#if defined(GPTOSS_WG_TIMELINE)
constexpr int WG_TIMELINE_MAX = 16384;
__device__ long long wg_timeline[WG_EVENTS][WG_TIMELINE_MAX];
__device__ __forceinline__ void wg_stamp(wg_event ev, int at) {
    if (blockIdx.x == 0 && at < WG_TIMELINE_MAX)
        wg_timeline[ev][at] = clock64();
}
#else
__device__ __forceinline__ void wg_stamp(wg_event, int) {}
#endif
/* the consumer thread that stamps */
constexpr int WG_STAMPING = WG_CONSUMERS_AT;

#if defined(GPTOSS_WGMMA)
/* the block's shared memory from its first 1 KiB boundary on (the rows'
 * swizzle wants it), by pointer arithmetic: through an integer the compiler
 * loses that it is shared memory and makes every access a generic one */
__device__ __forceinline__ uint8_t *wgmma_ring(uint8_t *smem) {
    return smem + ((WG_SWIZZLE_ALIGN - (smem_addr(smem) & (WG_SWIZZLE_ALIGN - 1))) & (WG_SWIZZLE_ALIGN - 1));
}
#endif

/* k rounded up to whole chunks: the permuted rows' width */
__host__ __device__ __forceinline__ int wgmma_k_padded(int k) { return (k + MX_KC - 1) / MX_KC * MX_KC; }

/* A launch's items: its row tiles (dense: the row blocks; grouped: the
 * entries of the tile table that the device filled, of the table's
 * `row_blocks`), each with every column block. Item i's row tile and
 * column block: dense, the row blocks of a column block one after another;
 * grouped, bands of WG_BAND_BLOCKS column blocks, tile by tile within a band.
 */
template <int TILE_ROWS> struct wg_items {
    int tiles, col_blocks;
    __device__ __forceinline__ wg_items(const gptoss_gemm_args &a, int row_blocks)
        : tiles(a.tiles ? min(*a.tile_count, row_blocks) : row_blocks),
          col_blocks((a.n + WG_BLOCK_OUTPUTS - 1) / WG_BLOCK_OUTPUTS) {}
    __device__ __forceinline__ int count() const { return tiles * col_blocks; }
    /* item i's rows, first output and 32-row groups; false if the tile has no
     * rows */
    __device__ __forceinline__ bool at(const gptoss_gemm_args &a, int i, row_tile &rt, int &o0, int &groups) const {
        int tile, col_block;
        if (a.tiles) {
            const int band = i / (tiles * WG_BAND_BLOCKS),
                      in_band = min(WG_BAND_BLOCKS, col_blocks - band * WG_BAND_BLOCKS);
            const int r = i % (tiles * WG_BAND_BLOCKS);
            tile = r / in_band;
            col_block = band * WG_BAND_BLOCKS + r % in_band;
        } else {
            tile = i % tiles;
            col_block = i / tiles;
        }
        o0 = col_block * WG_BLOCK_OUTPUTS;
        if (!block_rows(a, tile, TILE_ROWS, rt))
            return false;
        groups = (rt.end - rt.begin + WG_ROW_GROUP - 1) / WG_ROW_GROUP;
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
#endif

} // namespace

#endif
