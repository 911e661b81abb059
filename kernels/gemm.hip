/* Linear layers: Y[p][o] = sum_i X[p][i] * W[o][i] for p in a list of rows,
 * with bias and an epilogue (store, add into the residual, SwiGLU over
 * mlp1's interleaved gate/up outputs, or RoPE and the KV cache write for
 * the qkv projection: rope.h). Rows may be gathered from another
 * array (MoE: a sorted pair reads its token's activations) and grouped by
 * expert through a tile table built on the device (moe_dispatch.hip), so the
 * host launches a fixed grid without knowing how many rows each expert got.
 *
 * This file is the dispatch: it sizes the row tiles and picks the kernel,
 * each family in a header of its own (their shared pieces: gemm_common.h),
 * all included here as one translation unit (built apart, hipcc scheduled
 * one streaming kernel's gfx90a code differently):
 *  - exact (fp32 mode, gemm_exact.h): float weights and inputs, each
 *    output a double accumulator fed float products, as the golden's matmul.
 *  - matrix (bf16 mode): bf16 weights ([n][k], or tiled: layout.h) and
 *    inputs on the matrix cores with fp32 accumulators (matrix_core.h), in
 *    one summation order whatever the kernel (gemm_common.h): streaming
 *    (gemm_stream.h: blocks of 16 rows by 32 outputs, operands straight
 *    into registers; of 8 rows on NVIDIA, the weights on the mma's 16-row
 *    side) for decode and the experts at up to 16 rows per expert, staged (gemm_staged.h: 32- or 64-row tiles by 128 outputs
 *    through a ring of shared-memory stages) for the experts beyond, for
 *    tiled weights at more rows and for dense GEMMs whose 64-row tiles fill
 *    a wave, tiled (gemm_tiled.h: 16 MT rows by 64, through shared
 *    memory, [n][k] weights only) for the other dense GEMMs of many rows,
 *    and on sm_90a the Hopper GEMM (gemm_wgmma.h: wgmma and TMA, the same
 *    sums) for the dense GEMMs whose 128 x 128 blocks fill a wave and
 *    for the experts beyond 16 rows per expert, in place of the staged
 *    (MXFP4 experts' codes decoded in registers, as the other families do).
 * The matrix-core families are templates over the weights' format
 * (weight_formats.h: bf16, or MXFP4 codes decoded in registers). */
#include "gemm_exact.h"
#include "gemm_staged.h"
#include "gemm_stream.h"
#include "gemm_tiled.h"
#include "gemm_wgmma_launch.h"
#include "weight_formats.h"

/* the streaming kernel's narrow tiles (tile8w) */
constexpr int NARROW_ROWS = 8;

/* rows per tile of a dense GEMM in bf16 mode: the largest that still gives
 * the GPU a few hundred blocks (any choice computes the same bits) */
static int dense_tile_rows(const gptoss_gemm_args *a) {
    int bm = a->rows <= 16 ? 16 : a->rows <= 32 ? 32 : 64;
    while (bm > 16 && (long)((a->rows + bm - 1) / bm) * ((a->n + MX_BN - 1) / MX_BN) < 256)
        bm /= 2;
    return bm;
}

int gptoss_moe_tile_rows(const gptoss_gemm_args *mlp1, const gptoss_gemm_args *mlp2, int rows_per_expert,
                         const gptoss_gpu_shape *dev) {
    if (mlp1->w_layout == GPTOSS_W_FP32_ROWS)
        return EX_BM;
    /* the Hopper GEMM's tiles of up to 128 pairs, each multiplied at its
     * own width (32-row steps), where both GEMMs take it: each expert's
     * weights are then read (and coded ones decoded) once whatever its
     * pairs; of up to 64 where experts expect few (a deeper ring, and the
     * epilogue off the multiplying warpgroups: wg_block), an expert beyond
     * taking a second tile */
    if (rows_per_expert > 16 && gemm_wgmma_fits(mlp1, dev) && gemm_wgmma_fits(mlp2, dev))
        return rows_per_expert <= WG_SMALL_TILE_EXPECTED ? WG_SMALL_TILE_ROWS : WG_TILE_ROWS;
    /* 8-row streaming tiles where the device has them, up to 8 expected
     * rows per expert: a decode step's experts then multiply no empty rows
     * and read a chunk's X once a lane */
    if (dev->narrow && rows_per_expert <= NARROW_ROWS)
        return NARROW_ROWS;
    /* 16-row streaming tiles up to 16 expected rows per expert (an expert
     * with a few more takes two tiles, its second read of the weights mostly
     * from L2); beyond, staged tiles of 32 rows up to 32 expected rows
     * (64-row tiles there would copy and keep X rows that go unused), then
     * of 64 rows, which read each expert's weights once even when it got
     * several dozen rows */
    return rows_per_expert <= 16 ? 16 : rows_per_expert <= 32 ? 32 : ST_BM;
}

int gptoss_gemm_takes_rope(const gptoss_gemm_args *a) {
    /* the streaming kernel's (bf16, dense, tiles of 16 rows or 8), heads of 64 */
    const gptoss_rope_kv_args &rope = a->rope;
    return a->w_layout != GPTOSS_W_FP32_ROWS && !a->tiles && dense_tile_rows(a) == 16 && rope.head_dim == 64 &&
           a->n == (rope.n_heads + 2 * rope.n_kv_heads) * 64;
}

/* The kernel family a GEMM runs on; any gives the same bits. */
enum gemm_family {
    GEMM_EXACT,  /* fp32 mode */
    GEMM_HOPPER, /* gemm_wgmma.h */
    GEMM_STAGED, /* gemm_staged.h */
    GEMM_STREAM, /* gemm_stream.h, 16-row tiles */
    GEMM_NARROW, /* gemm_stream.h, 8-row tiles */
    GEMM_TILED,  /* gemm_tiled.h */
    GEMM_NONE    /* a tile table sized for the Hopper GEMM, which this device cannot take */
};

/* bm: rows per tile (grouped: the table's), row_blocks: tiles */
static gemm_family choose_family(const gptoss_gemm_args *a, int bm, int row_blocks, const gptoss_gpu_shape *dev) {
    if (a->w_layout == GPTOSS_W_FP32_ROWS)
        return GEMM_EXACT;
    if (gemm_wgmma_takes(a, dev))
        return GEMM_HOPPER;
    if (a->tiles && bm == WG_TILE_ROWS)
        return GEMM_NONE;
    /* grouped tiles of 32 or 64 rows are staged, so are such tiles over
     * tiled weights (the tiled kernel reads rows of k), and dense 64-row
     * tiles when the staged grid fills a wave of two blocks per
     * multiprocessor: 8 warps on 128 outputs read a tile's X rows half as
     * often as the tiled kernel's 4 on 64, and a deeper ring keeps more
     * bytes in flight. Short of a wave the staged kernel's fewer, larger
     * blocks were slower. */
    const int col_blocks = (a->n + ST_BN - 1) / ST_BN;
    const bool dense_wave = !a->tiles && bm == ST_BM && (long)row_blocks * col_blocks >= 2L * dev->multiprocessors;
    if (((a->tiles || gptoss_layout_tiled(a->w_layout)) && bm > 16) || dense_wave)
        return GEMM_STAGED;
    return bm == NARROW_ROWS ? GEMM_NARROW : bm == 16 ? GEMM_STREAM : GEMM_TILED;
}

hipError_t gptoss_launch_gemm(const gptoss_gemm_args *a, int max_tiles, const gptoss_gpu_shape *dev,
                              hipStream_t stream) {
    const bool exact = a->w_layout == GPTOSS_W_FP32_ROWS;
    int bm = a->tiles ? a->tile_rows : exact ? EX_BM : dev->narrow && a->rows <= NARROW_ROWS ? NARROW_ROWS : dense_tile_rows(a);
    if (a->epilogue == GPTOSS_GEMM_ROPE_KV && !gptoss_gemm_takes_rope(a))
        return hipErrorInvalidValue;
    int row_blocks = a->tiles ? max_tiles : (a->rows + bm - 1) / bm;
    if (row_blocks <= 0)
        return hipSuccess;
    const gemm_family family = choose_family(a, bm, row_blocks, dev);
    if (family == GEMM_EXACT)
        return launch_gemm_exact(a, row_blocks, dev, stream);
    return with_weight_format(a->w_layout, [&](auto format) -> hipError_t {
        typedef decltype(format) W;
        switch (family) {
        case GEMM_HOPPER:
            return launch_gemm_wgmma<W>(a, max_tiles, dev, stream);
        case GEMM_STAGED:
            return launch_gemm_staged<W>(a, row_blocks, bm, dev, stream);
        case GEMM_STREAM:
            return launch_gemm_stream<W, tile16>(a, row_blocks, dev, stream);
        case GEMM_NARROW: /* gptoss_gemm_narrow_built: NVIDIA only */
#if defined(__HIP_PLATFORM_NVIDIA__)
            return launch_gemm_stream<W, tile8w>(a, row_blocks, dev, stream);
#else
            return hipErrorInvalidValue;
#endif
        case GEMM_TILED: /* [n][k] bf16 weights only */
            return W::CODED ? hipErrorInvalidValue : launch_gemm_tiled(a, row_blocks, bm, dev, stream);
        default:
            return hipErrorInvalidValue;
        }
    });
}

int gptoss_gemm_wgmma_built(hipStream_t stream) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    return gptoss_device_flag(wgmma_built_kernel, stream);
#else
    (void)stream;
    return 0;
#endif
}

/* whether the device code has tile8w's products */
__global__ void narrow_built_kernel(int *out) {
#if defined(GPTOSS_MMA_NVIDIA)
    *out = 1;
#else
    *out = 0;
#endif
}

int gptoss_gemm_narrow_built(hipStream_t stream) { return gptoss_device_flag(narrow_built_kernel, stream); }
