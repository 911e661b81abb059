/* Device-memory layouts the launchers expect, in plain C so that a GPU
 * replica's memory plan (src/hip/gpu_buffers.c) is computed without a
 * device or a GPU build.
 *
 * Tiled matrices (gptoss_gpu_tiled): each [n][k] matrix (one per layer and
 * expert) is cut into tiles of 16 rows by 32 k, zero past n and k; tile
 * (r / 16, k / 32) lies at ((r / 16) * chunks + k / 32) * 512 elements,
 * chunks = ceil(k / 32), its rows 64 bytes apart. The pieces a warp
 * multiplies for one chunk of 16 rows (matrix_core.h) are then one
 * contiguous KiB, and a 16-row band of the matrix streams from memory in
 * order. */
#ifndef GPTOSS_CONTRACT_LAYOUT_H
#define GPTOSS_CONTRACT_LAYOUT_H

#include <stdint.h>

#include "../src/core/host_device.h"

#define GPTOSS_TILE_ROWS 16
#define GPTOSS_TILE_K 32
#define GPTOSS_TILE_ELEMS (GPTOSS_TILE_ROWS * GPTOSS_TILE_K)

/* elements of one band of 16 rows, chunks = ceil(k / 32) */
GPTOSS_HD static inline uint64_t gptoss_tiled_band(int64_t chunks) {
    return (uint64_t)chunks * GPTOSS_TILE_ELEMS;
}
/* elements of one tiled [n][k] matrix, padding included */
GPTOSS_HD static inline uint64_t gptoss_tiled_elems(int64_t n, int64_t k) {
    return (uint64_t)((n + GPTOSS_TILE_ROWS - 1) / GPTOSS_TILE_ROWS) *
           gptoss_tiled_band((k + GPTOSS_TILE_K - 1) / GPTOSS_TILE_K);
}
/* where element (r, k) of a tiled matrix lies, chunks = ceil(k / 32) */
GPTOSS_HD static inline uint64_t gptoss_tiled_at(int64_t r, int64_t k, int64_t chunks) {
    return (uint64_t)(r / GPTOSS_TILE_ROWS) * gptoss_tiled_band(chunks) +
           (uint64_t)(k / GPTOSS_TILE_K) * GPTOSS_TILE_ELEMS + (r % GPTOSS_TILE_ROWS) * GPTOSS_TILE_K +
           k % GPTOSS_TILE_K;
}

/* A block format's matrices (weight_format.h) are tiled alike: a tile holds
 * its 16 rows' codes for the 32 k, then one scale byte per row and block,
 * tile_bytes in all. Their bytes, padding included: */
GPTOSS_HD static inline uint64_t gptoss_coded_tiled_bytes(int64_t n, int64_t k, uint64_t tile_bytes) {
    return (uint64_t)((n + GPTOSS_TILE_ROWS - 1) / GPTOSS_TILE_ROWS) * (uint64_t)((k + GPTOSS_TILE_K - 1) / GPTOSS_TILE_K) *
           tile_bytes;
}
/* MXFP4's tile (kernels/mxfp4.h): 256 bytes of e2m1 codes, the pieces of one
 * lane together (tile16::piece_at), then 16 scale bytes, one per tile row
 * (in the order mxfp4.h gives). */
#define GPTOSS_MXFP4_TILE_CODES 256
#define GPTOSS_MXFP4_TILE_BYTES (GPTOSS_MXFP4_TILE_CODES + GPTOSS_TILE_ROWS)
GPTOSS_HD static inline uint64_t gptoss_mxfp4_tiled_bytes(int64_t n, int64_t k) {
    return gptoss_coded_tiled_bytes(n, k, GPTOSS_MXFP4_TILE_BYTES);
}

/* The experts' GEMM tiles a step of rows rows can need: each expert's pairs
 * in tiles of tile_rows, the last one partial; never more than the pairs,
 * since every tile holds one (a decode step's grid then has no blocks
 * that find no tile). A replica sizes its tile table for the smallest tile
 * the GEMMs choose (gptoss_moe_tile_rows). In 64 bits: a memory plan may
 * be asked of any shape. */
#define GPTOSS_MOE_MIN_TILE_ROWS 8
static inline int64_t gptoss_moe_max_tiles(int64_t rows, int64_t k, int64_t n_experts, int64_t tile_rows) {
    const int64_t pairs = rows * k, tiles = (pairs + tile_rows - 1) / tile_rows + n_experts;
    return tiles < pairs ? tiles : pairs;
}

#endif
