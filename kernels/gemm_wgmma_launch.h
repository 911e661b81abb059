/* The Hopper GEMM's host side (gemm_wgmma.h is the device side): whether a
 * GEMM takes it, the tensor maps of its rows and weights, and the launch.
 * Tensor maps are encoded per launch with the driver's
 * cuTensorMapEncodeTiled, reached through the runtime, so nothing links
 * libcuda. */
#ifndef GPTOSS_KERNELS_GEMM_WGMMA_LAUNCH_H
#define GPTOSS_KERNELS_GEMM_WGMMA_LAUNCH_H

#include "gemm_wgmma.h"
#include "weight_formats.h"

#include <string.h>

namespace {

#if defined(__HIP_PLATFORM_NVIDIA__)
typedef CUresult (*tensor_map_encoder)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                       const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                       CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                       CUtensorMapFloatOOBfill);

/* a [rows][width] matrix of `type` (elements of `bytes`), row stride `stride`
 * elements, in boxes of box_k x box_rows; swizzled: the 128-byte swizzle (bf16:
 * box_k 64) */
static hipError_t encode_map(CUtensorMap *map, CUtensorMapDataType type, int bytes, const void *base, int64_t rows,
                             int64_t width, int64_t stride, int box_k, int box_rows, bool swizzled) {
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
    cuuint64_t dims[2] = {(cuuint64_t)width, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)stride * bytes};
    cuuint32_t box[2] = {(cuuint32_t)box_k, (cuuint32_t)box_rows}, unit[2] = {1, 1};
    CUresult r = encode(map, type, 2, (void *)base, dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? hipSuccess : hipErrorInvalidValue;
}

#endif

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
    return dev->wgmma && a->x_perm && epilogue && (gptoss_layout_tiled(a->w_layout) || a->k % 8 == 0);
}

/* A dense GEMM's tile rows: the larger whose blocks fill a wave, 0 if
 * neither does */
static int wgmma_dense_tile_rows(const gptoss_gemm_args *a, const gptoss_gpu_shape *dev) {
    const int64_t col_blocks = (a->n + WG_BLOCK_OUTPUTS - 1) / WG_BLOCK_OUTPUTS;
    for (int rows : {WG_TILE_ROWS, WG_SMALL_TILE_ROWS})
        if (col_blocks * ((a->rows + rows - 1) / rows) >= dev->multiprocessors)
            return rows;
    return 0;
}

bool gemm_wgmma_takes(const gptoss_gemm_args *a, const gptoss_gpu_shape *dev) {
    if (a->tiles)
        return (a->tile_rows == WG_TILE_ROWS || a->tile_rows == WG_SMALL_TILE_ROWS) && gemm_wgmma_fits(a, dev);
    return !a->x_rows && !weights_coded(a) && wgmma_dense_tile_rows(a, dev) && gemm_wgmma_fits(a, dev);
}

#if defined(__HIP_PLATFORM_NVIDIA__)
static hipError_t encode_bf16_map(CUtensorMap *map, const void *base, int64_t rows, int64_t width, int box_k,
                                  int box_rows, bool swizzled) {
    return encode_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rows, width, width, box_k, box_rows, swizzled);
}

/* The weights' map where they come by one: a coded format's over every
 * expert's tiles, a row a band (its chunks' tiles one after another) in
 * 32-bit words, a box the block's bands by two chunks; [n][k] bf16 rows
 * over every expert's rows, a box a chunk by the block's outputs (read by
 * the lanes, not by wgmma: the tiles' own layout, unswizzled). */
template <class W> static hipError_t encode_weight_map(CUtensorMap *map, const gptoss_gemm_args *a) {
    const int64_t matrices = a->tiles ? a->n_experts : 1;
    if constexpr (W::CODED) {
        static_assert(W::TILE_BYTES % 16 == 0, "a band's row of tiles is whole 16 bytes, as a map's rows must be");
        const int64_t words = (int64_t)((a->k + MX_KC - 1) / MX_KC) * W::TILE_BYTES / 4;
        return encode_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT32, 4, a->w, matrices * ((a->n + 15) / GPTOSS_TILE_ROWS),
                          words, words, 2 * W::TILE_BYTES / 4, WG_BLOCK_BANDS, false);
    }
    return encode_bf16_map(map, a->w, matrices * a->n, a->k, MX_KC, WG_BLOCK_OUTPUTS, false);
}
#endif

#if defined(__HIP_PLATFORM_NVIDIA__)
/* gemm_wgmma_kernel on tiles of up to ROWS rows: its tensor maps, then the launch */
template <class W, int ROWS>
static hipError_t launch_gemm_wgmma_rows(const gptoss_gemm_args *a, int row_blocks, const gptoss_gpu_shape *dev,
                                         hipStream_t stream) {
    typedef wg_block<ROWS> B;
    const int kp = wgmma_k_padded(a->k);
    CUtensorMap xmap_tile, xmap_group, wmap;
    memset(&wmap, 0, sizeof wmap);
    hipError_t e = encode_bf16_map(&xmap_tile, a->x_perm, a->rows, kp, WG_STAGE_K, ROWS, true);
    if (e == hipSuccess)
        e = encode_bf16_map(&xmap_group, a->x_perm, a->rows, kp, WG_STAGE_K, WG_ROW_GROUP, true);
    const int col_blocks = (a->n + WG_BLOCK_OUTPUTS - 1) / WG_BLOCK_OUTPUTS;
    if (e == hipSuccess && (int64_t)row_blocks * col_blocks > INT32_MAX)
        e = hipErrorInvalidValue;
    if (e != hipSuccess)
        return e;
    auto kernel = gemm_wgmma_kernel<W, WG_BY_MAP, ROWS>;
    if constexpr (!W::CODED)
        if (gptoss_layout_tiled(a->w_layout))
            kernel = gemm_wgmma_kernel<W, WG_BY_TILES, ROWS>;
    if (kernel == gemm_wgmma_kernel<W, WG_BY_MAP, ROWS>) {
        e = encode_weight_map<W>(&wmap, a);
        if (e != hipSuccess)
            return e;
    }
    const int smem = wg_ring<W, B>::SMEM;
    e = hipFuncSetAttribute((const void *)kernel, hipFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != hipSuccess)
        return e;
    /* Items in order (wg_items), one block per multiprocessor taking every
     * gridDim.x-th, except for the experts on 128-row tiles: bound by
     * memory, bf16 ones ran 13% slower that way than with a block per item,
     * which the GPU hands out as blocks finish (the unembedding ran 4%
     * faster persistent); the blocks with storers persist, or their
     * epilogues would not overlap the next item. Dense: the row blocks of
     * one weight block come one after another, so they run side by side and
     * its weights come from memory once and the rows (a few MiB) from L2.
     * Grouped, all the pairs' rows would not stay in L2 for every column
     * block: the items go in bands of WG_BAND_BLOCKS column blocks, tile
     * after tile within a band, so a tile's rows serve the band from L2 and
     * an expert's weight block serves its tiles, adjacent in the table, from
     * L2. */
    const int items = row_blocks * col_blocks;
    const int blocks = a->tiles && !B::STORER ? items : min(items, dev->multiprocessors);
    hipLaunchKernelGGL(kernel, dim3(blocks), dim3(B::THREADS), smem, stream, *a, row_blocks, xmap_tile, xmap_group,
                       wmap);
    return hipGetLastError();
}
#endif

/* max_tiles: the grouped launch's tile table size; the rows are first
 * copied permuted (permute_rows_kernel) */
template <class W>
hipError_t launch_gemm_wgmma(const gptoss_gemm_args *a, int max_tiles, const gptoss_gpu_shape *dev,
                             hipStream_t stream) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    const int64_t pieces = (int64_t)a->rows * (wgmma_k_padded(a->k) / 8);
    hipLaunchKernelGGL(permute_rows_kernel, dim3((unsigned)((pieces + 255) / 256)), dim3(256), 0, stream,
                       (const bf16 *)a->x, a->x_rows, a->rows, a->k, (bf16 *)a->x_perm);
    const int tile_rows = a->tiles ? a->tile_rows : wgmma_dense_tile_rows(a, dev);
    const int row_blocks = a->tiles ? max_tiles : (a->rows + tile_rows - 1) / tile_rows;
    if (tile_rows == WG_SMALL_TILE_ROWS)
        return launch_gemm_wgmma_rows<W, WG_SMALL_TILE_ROWS>(a, row_blocks, dev, stream);
    return launch_gemm_wgmma_rows<W, WG_TILE_ROWS>(a, row_blocks, dev, stream);
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
