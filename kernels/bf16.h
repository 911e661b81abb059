/* bf16 weights on the device, the GEMM families' plain weight format: a
 * matrix lies as [n][k] rows or in 16 x 32 tiles (layout.h), and a lane's
 * pieces (matrix_core.h) are the values the matrix cores take, nothing to
 * decode. A weight format is a type the GEMM families are templates over;
 * every format gives what this one gives (mxfp4.h is the coded one):
 *
 *   CODED            the pieces hold codes turned into bf16 pieces just before
 *                    they are multiplied (the matrices then lie in tiles only)
 *   TILE_BYTES       bytes of one 16 x 32 tile
 *   pieces           a lane's pieces of one chunk as a ring keeps them:
 *                    to_bf16(w) gives the bf16 pieces; a coded format's also
 *                    load(tile, lane) from a tile and zero()
 *   matrix(a, e)     where expert e's matrix begins (dense: e = 0)
 *   tile(m, band, c, chunks)  a coded format's tile of rows 16 band.. at chunk c
 *
 * gemm.hip maps a GEMM's weight layout (device_contract.h) onto its format. */
#ifndef GPTOSS_KERNELS_BF16_H
#define GPTOSS_KERNELS_BF16_H

#include "device.h"
#include "../contract/layout.h"
#include "matrix_core.h"
#include "../contract/device_contract.h"

namespace {

struct bf16_weights {
    static constexpr bool CODED = false;
    static constexpr int TILE_BYTES = GPTOSS_TILE_ELEMS * 2;

    struct pieces {
        uint4 v[tile16::PIECES];
        __device__ __forceinline__ void to_bf16(uint4 (&w)[tile16::PIECES]) const {
#pragma unroll
            for (int j = 0; j < tile16::PIECES; j++)
                w[j] = v[j];
        }
    };

    /* [n][k] or tiled, as the GEMM's weights lie */
    __device__ static __forceinline__ const bf16 *matrix(const gptoss_gemm_args &a, int expert) {
        return (const bf16 *)a.w + (size_t)expert * (gptoss_layout_tiled(a.w_layout) ? gptoss_tiled_elems(a.n, a.k) : (uint64_t)a.n * a.k);
    }
};

} // namespace

#endif
