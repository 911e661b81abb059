/* MXFP4 weights on the device (tiles: layout.h), turned into the bf16
 * pieces the matrix cores read (matrix_core.h), so that a GEMM over MXFP4
 * weights multiplies exactly the values, in exactly the order, of the same
 * GEMM over their bf16 copy: the two give the same bits.
 *
 * A tile's piece p (tile16::piece_at) is 4 code bytes at 4p, read as one
 * little-endian word whose low half holds the piece's even k (k 2b at bits
 * 4b) and whose high half its odd k (2b + 1 at bits 16 + 4b): shifting the
 * word left by 12 - 4b puts both codes of bf16 pair b at the top of their
 * halves. A tile row's scale is byte 256 + row. */
#ifndef GPTOSS_KERNELS_MXFP4_H
#define GPTOSS_KERNELS_MXFP4_H

#include "device.h"
#include "layout.h"
#include "matrix_core.h"

namespace {

/* bf16 pair b (k 2b, 2b + 1) of a piece's code word, scale s in
 * GPTOSS_MXFP4_SCALE_MIN..MAX */
__device__ __forceinline__ uint32_t mxfp4_pair(uint32_t codes, uint32_t s, int b) {
    const uint32_t t = codes << (12 - 4 * b);
#if defined(GPTOSS_MMA_NVIDIA)
    /* sign to bit 15, exponent and mantissa bits to 8..6: the e2m1 value
     * times 2^-126 (0.5 a subnormal), which the bf16 multiply by 2^(s - 1)
     * scales exactly; adding -0 keeps the product's sign of zero */
    const uint32_t raw = (t & 0x80008000u) | ((t >> 6) & 0x01C001C0u);
    const uint32_t f = (s + 126) << 7, factor = f | f << 16;
    uint32_t out;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(raw), "r"(factor), "r"(0x80008000u));
    return out;
#else
    /* the bf16 bits directly: magnitude 1 (0.5) is 2^(s - 128); from 2 on
     * code m is exponent s - 1 + m / 2 with m's low bit the mantissa's top */
    uint32_t pair = 0;
    for (int h = 0; h < 2; h++) {
        const uint32_t code = (t >> (12 + 16 * h)) & 15u, mag = code & 7u;
        const uint32_t v = mag == 0 ? 0u : ((s - 1) << 7) + ((mag > 1 ? mag : 0u) << 6);
        pair |= (v | (code & 8u) << 12) << (16 * h);
    }
    return pair;
#endif
}

/* a piece's 8 bf16 from its code word and scale */
__device__ __forceinline__ uint4 mxfp4_piece(uint32_t codes, uint32_t s) {
    return make_uint4(mxfp4_pair(codes, s, 0), mxfp4_pair(codes, s, 1), mxfp4_pair(codes, s, 2),
                      mxfp4_pair(codes, s, 3));
}

/* A lane's weight pieces of one 16-row MXFP4 tile, as loaded: its code
 * words and their rows' scales. */
struct mxfp4_pieces {
    uint32_t codes[tile16::PIECES];
    uint32_t scale[tile16::PIECES];

    /* from a tile in global or shared memory; none: zeros */
    __device__ __forceinline__ void load(const uint8_t *tile, int lane) {
        constexpr int P = tile16::PIECES;
        if (!tile) {
#pragma unroll
            for (int j = 0; j < P; j++)
                codes[j] = scale[j] = 0;
            return;
        }
        const uint8_t *at = tile + 4 * tile16::piece_at(tile16::piece_row(lane, 0), tile16::piece_k(lane) / 8);
        if constexpr (P == 2) {
            const uint2 c = *(const uint2 *)at;
            codes[0] = c.x;
            codes[1] = c.y;
        } else {
            codes[0] = *(const uint32_t *)at;
        }
#pragma unroll
        for (int j = 0; j < P; j++)
            scale[j] = tile[GPTOSS_MXFP4_TILE_CODES + tile16::piece_row(lane, j)];
    }

    __device__ __forceinline__ void to_bf16(uint4 (&w)[tile16::PIECES]) const {
#pragma unroll
        for (int j = 0; j < tile16::PIECES; j++)
            w[j] = mxfp4_piece(codes[j], scale[j]);
    }
};

/* the tile of an MXFP4 matrix [n][k] holding rows band 16.. at chunk c */
__device__ __forceinline__ const uint8_t *mxfp4_tile(const uint8_t *w, int band, int c, int chunks) {
    return w + ((size_t)band * chunks + c) * GPTOSS_MXFP4_TILE_BYTES;
}

} // namespace

#endif
