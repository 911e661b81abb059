/* MXFP4 weights on the device (tiles: layout.h), turned into the bf16
 * pieces the matrix cores read (matrix_core.h), so that a GEMM over MXFP4
 * weights multiplies exactly the values, in exactly the order, of the same
 * GEMM over their bf16 copy: the two give the same bits.
 *
 * A tile's piece p (tile16::piece_at) is 4 code bytes at 4p, read as one
 * little-endian word holding the piece's 8 e2m1 codes, 4 bf16 pairs (k 2b,
 * 2b + 1). The dequantization wants each pair's codes where a bf16 pair
 * keeps them: the signs at bits 15 and 31, the exponent and mantissa bits
 * at 8..6 and 24..22 (the e2m1 value times 2^-126, 0.5 a subnormal), which
 * the bf16 multiply by 2^(s - 1) then scales exactly. So pair b's bits lie
 * in the word where rotating it left by mxfp4_rot_mag(b) brings its
 * magnitudes there and by mxfp4_rot_sign(b) its signs: one pair needs no
 * rotation, one a single one, 5 rotations and 4 masks a word in all
 * (shifting nibble-packed codes into place took 8 shifts and 8 masks).
 *
 * A tile row's scale byte (at 256 + mxfp4_scale_at(row), a lane's rows
 * side by side so that one load reads them) holds the bf16 exponent field
 * of the factor, 2^(scale - 1): scale + 126, which the scale's range
 * (GPTOSS_MXFP4_SCALE_MIN..MAX) keeps in a byte. */
#ifndef GPTOSS_KERNELS_MXFP4_H
#define GPTOSS_KERNELS_MXFP4_H

#include "device.h"
#include "../contract/layout.h"
#include "matrix_core.h"
#include "../contract/device_contract.h"

namespace {

/* where a tile row's scale byte lies after the codes: the rows of a
 * lane's pieces (tile16::piece_row(lane, j)) side by side */
__host__ __device__ __forceinline__ int mxfp4_scale_at(int row) {
    return tile16::PIECES == 2 ? 2 * (row & 7) + (row >> 3) : row;
}

/* the bf16x2 factor of a tile row's scale byte: its exponent field in both halves */
__device__ __forceinline__ uint32_t mxfp4_factor(uint32_t scale_byte) { return scale_byte * 0x00800080u; }

/* The rotations of the word that place pair b's magnitudes and its signs
 * (no two pairs share a bit: the 4 pairs' 32 bits tile the word) */
__host__ __device__ constexpr int mxfp4_rot_mag(int b) { return b == 0 ? 0 : b == 1 ? 6 : b == 2 ? 13 : 10; }
__host__ __device__ constexpr int mxfp4_rot_sign(int b) { return b == 0 ? 0 : b == 1 ? 12 : b == 2 ? 11 : 10; }

__host__ __device__ __forceinline__ uint32_t mxfp4_rotl(uint32_t w, int r) {
    return r == 0 ? w : (w << r) | (w >> (32 - r));
}

/* pair b's codes where a bf16 pair keeps them (sign 15, bits 8..6; the
 * odd k's 16 higher) */
__host__ __device__ __forceinline__ uint32_t mxfp4_pair_bits(uint32_t word, int b) {
    if (mxfp4_rot_mag(b) == mxfp4_rot_sign(b)) /* one rotation (written apart, the compiler made two) */
        return mxfp4_rotl(word, mxfp4_rot_mag(b)) & 0x81C081C0u;
    return (mxfp4_rotl(word, mxfp4_rot_mag(b)) & 0x01C001C0u) | (mxfp4_rotl(word, mxfp4_rot_sign(b)) & 0x80008000u);
}

/* the piece word of 8 codes given as the checkpoint orders them (a word of
 * 4 bytes, k 2j in byte j's low nibble): each pair's bits rotated back */
__host__ __device__ __forceinline__ uint32_t mxfp4_pack_piece(uint32_t checkpoint_word) {
    uint32_t word = 0;
    for (int b = 0; b < 4; b++) {
        const uint32_t even = checkpoint_word >> (8 * b) & 15u, odd = checkpoint_word >> (8 * b + 4) & 15u;
        const uint32_t mag = (even & 7u) << 6 | (odd & 7u) << 22, sign = (even >> 3) << 15 | (odd >> 3) << 31;
        word |= mxfp4_rotl(mag, (32 - mxfp4_rot_mag(b)) % 32) | mxfp4_rotl(sign, (32 - mxfp4_rot_sign(b)) % 32);
    }
    return word;
}

/* bf16 pair b (k 2b, 2b + 1) of a piece's code word, factor from mxfp4_factor */
__device__ __forceinline__ uint32_t mxfp4_pair(uint32_t codes, uint32_t factor, int b) {
    const uint32_t raw = mxfp4_pair_bits(codes, b);
#if defined(GPTOSS_MMA_NVIDIA)
    /* the bf16 multiply scales exactly; adding -0 keeps the product's sign of zero */
    uint32_t out;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(raw), "r"(factor), "r"(0x80008000u));
    return out;
#else
    /* the bf16 bits directly: magnitude 1 (0.5) is 2^(s - 128); from 2 on
     * code m is exponent s - 1 + m / 2 with m's low bit the mantissa's top
     * (s - 1: the factor's exponent field less the bias) */
    const uint32_t s_less_1 = ((factor & 0xFFFFu) >> 7) - 127;
    uint32_t pair = 0;
    for (int h = 0; h < 2; h++) {
        const uint32_t mag = raw >> (6 + 16 * h) & 7u, sign = raw >> (15 + 16 * h) & 1u;
        const uint32_t v = mag == 0 ? 0u : (s_less_1 << 7) + ((mag > 1 ? mag : 0u) << 6);
        pair |= (v | sign << 15) << (16 * h);
    }
    return pair;
#endif
}

/* a piece's 8 bf16 from its code word and factor */
__device__ __forceinline__ uint4 mxfp4_piece(uint32_t codes, uint32_t factor) {
    return make_uint4(mxfp4_pair(codes, factor, 0), mxfp4_pair(codes, factor, 1), mxfp4_pair(codes, factor, 2),
                      mxfp4_pair(codes, factor, 3));
}

/* A lane's weight pieces of one 16-row MXFP4 tile, as loaded: its code
 * words and its rows' scale bytes, one register (byte j: piece j's row).
 * The factors are made when the pieces are: made at the load, they would
 * wait for it there, and a ring of loads in flight would wait at each. */
struct mxfp4_pieces {
    uint32_t codes[tile16::PIECES];
    uint32_t scales;

    /* from a tile in global or shared memory */
    __device__ __forceinline__ void load(const uint8_t *tile, int lane) {
        const int row = tile16::piece_row(lane, 0);
        const uint8_t *at = tile + 4 * tile16::piece_at(row, tile16::piece_k(lane) / 8);
        const uint8_t *scale_bytes = tile + GPTOSS_MXFP4_TILE_CODES + mxfp4_scale_at(row);
        if constexpr (tile16::PIECES == 2) {
            const uint2 c = *(const uint2 *)at;
            codes[0] = c.x;
            codes[1] = c.y;
            scales = *(const uint16_t *)scale_bytes;
        } else {
            codes[0] = *(const uint32_t *)at;
            scales = *scale_bytes;
        }
    }

    /* none: zeros */
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int j = 0; j < tile16::PIECES; j++)
            codes[j] = 0;
        scales = 0;
    }

    __device__ __forceinline__ void to_bf16(uint4 (&w)[tile16::PIECES]) const {
#pragma unroll
        for (int j = 0; j < tile16::PIECES; j++)
            w[j] = mxfp4_piece(codes[j], mxfp4_factor(scales >> (8 * j) & 0xFFu));
    }
};

/* MXFP4 as a weight format of the GEMM families (bf16.h says what one gives) */
struct mxfp4_weights {
    static constexpr bool CODED = true;
    static constexpr int TILE_BYTES = GPTOSS_MXFP4_TILE_BYTES;
    typedef mxfp4_pieces pieces;

    __device__ static __forceinline__ const uint8_t *matrix(const gptoss_gemm_args &a, int expert) {
        return (const uint8_t *)a.w + (size_t)expert * gptoss_mxfp4_tiled_bytes(a.n, a.k);
    }
    /* the tile of an MXFP4 matrix [n][k] holding rows band 16.. at chunk c */
    __device__ static __forceinline__ const uint8_t *tile(const uint8_t *m, int band, int c, int chunks) {
        return m + ((size_t)band * chunks + c) * TILE_BYTES;
    }
};

} // namespace

#endif
