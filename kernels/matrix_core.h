/* One warp's bf16 product of a 16 x 32 tile of X rows and a 16 x 32 tile
 * of W rows on the matrix cores, the operands straight from registers,
 * behind one interface for every target:
 *
 *   tile16::PIECES                 16-byte pieces a lane holds per 16-row tile
 *   tile16::piece_row(lane, j)     the tile row of the lane's piece j
 *   tile16::piece_k(lane)          its first k in the 32-wide chunk (8 k per piece)
 *   tile16::acc_t acc = {};        per-lane fp32 accumulators of a 16 x 16 output
 *   tile16::mma32(acc, x, w, lane) acc += X W^T over the chunk, from the lane's
 *                                  pieces x[PIECES] and w[PIECES]
 *   tile16::coords(i, lane, row, col)  where acc[i] sits: X row, W row (output column)
 *   tile16::piece_at(row, q)       which lane-piece (lane P + j) holds a tile row's
 *                                  k 8q..8q+7: a lane's pieces are consecutive
 *
 * A piece is 8 consecutive bf16 of one row. Every target pairs the same k
 * of X and W inside a product, so the sum is X W^T whatever order the k go
 * through the hardware; the order is fixed per target, so an output's bits
 * do not depend on which other rows share its tile. Elements 2j and 2j+1
 * of acc always lie in one row at columns col and col + 1, so an epilogue
 * sees mlp1's (gate, up) pairs in one lane. Implementations:
 *   NVIDIA sm_80+:  mma.sync m16n8k16, twice per 16 k and per 8 columns;
 *                   lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8
 *                   at k 8t..8t+7
 *   AMD gfx90a/94x: v_mfma_f32_16x16x16bf16_1k with W as the A operand;
 *                   lane holds row lane % 16 at k 8 (lane / 16)
 *   anything else:  plain fp32 products of pieces gathered by warp shuffles,
 *                   with the NVIDIA piece layout (any warp size that is a
 *                   multiple of 32)
 * The AMD path is compile-checked only: no AMD GPU is lent here. */
#ifndef GPTOSS_KERNELS_MATRIX_CORE_H
#define GPTOSS_KERNELS_MATRIX_CORE_H

#include "device.h"

#if defined(__HIP_PLATFORM_NVIDIA__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GPTOSS_MMA_NVIDIA 1
#elif defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define GPTOSS_MMA_MFMA 1
#endif

struct tile16 {
#if defined(GPTOSS_MMA_MFMA)
    static constexpr int N = 4, PIECES = 1;
#else
    static constexpr int N = 8, PIECES = 2;
#endif
    typedef float acc_t[N];
    /* X's side, as the streaming kernel's fragment policies give it (tile8w below) */
    static constexpr int ROWS = 16, X_PIECES = PIECES;
    __device__ static __forceinline__ int x_piece_row(int lane, int j) { return piece_row(lane, j); }
    /* acc already holds output pairs (coords) */
    __device__ static __forceinline__ void pair(acc_t &, int) {}

    __device__ static __forceinline__ uint32_t word(const uint4 &p, int i) {
        return i == 0 ? p.x : i == 1 ? p.y : i == 2 ? p.z : p.w;
    }

#if defined(GPTOSS_MMA_MFMA)
    __device__ static __forceinline__ int piece_row(int lane, int) { return lane & 15; }
    __device__ static __forceinline__ int piece_k(int lane) { return 8 * ((lane >> 4) & 3); }
    __device__ static __forceinline__ int piece_at(int row, int q) { return row + 16 * q; }
#else
    __device__ static __forceinline__ int piece_row(int lane, int j) { return ((lane >> 2) & 7) + 8 * j; }
    __device__ static __forceinline__ int piece_k(int lane) { return 8 * (lane & 3); }
    __device__ static __forceinline__ int piece_at(int row, int q) { return 2 * (4 * (row & 7) + q) + (row >> 3); }
#endif

    /* halves: 1 leaves w's rows 8..15 (acc's columns 8..15) out where the
     * platform multiplies them apart (NVIDIA's two n8 products) */
    __device__ static __forceinline__ void mma32(acc_t &acc, const uint4 *x, const uint4 *w, int lane,
                                                 int halves = 2) {
#if defined(GPTOSS_MMA_NVIDIA)
        (void)lane;
        for (int s = 0; s < 2; s++) { /* elements 4s..4s+3 of each piece */
            uint32_t a0 = word(x[0], 2 * s), a1 = word(x[1], 2 * s);
            uint32_t a2 = word(x[0], 2 * s + 1), a3 = word(x[1], 2 * s + 1);
            for (int h = 0; h < halves; h++) {
                uint32_t b0 = word(w[h], 2 * s), b1 = word(w[h], 2 * s + 1);
                float *c = acc + 4 * h;
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }
        }
#elif defined(GPTOSS_MMA_MFMA)
        (void)lane;
        (void)halves;
        typedef short short4_t __attribute__((ext_vector_type(4)));
        typedef float float4_t __attribute__((ext_vector_type(4)));
        float4_t c = {acc[0], acc[1], acc[2], acc[3]};
        for (int s = 0; s < 2; s++) {
            uint32_t w0 = word(w[0], 2 * s), w1 = word(w[0], 2 * s + 1);
            uint32_t x0 = word(x[0], 2 * s), x1 = word(x[0], 2 * s + 1);
            short4_t a = {(short)(w0 & 0xffff), (short)(w0 >> 16), (short)(w1 & 0xffff), (short)(w1 >> 16)};
            short4_t b = {(short)(x0 & 0xffff), (short)(x0 >> 16), (short)(x1 & 0xffff), (short)(x1 >> 16)};
            c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
        }
        for (int j = 0; j < 4; j++)
            acc[j] = c[j];
#else
        /* Rows live in lane groups of 4 (g = lane / 4 covers rows g and
         * g + 8 when the warp has 32 lanes; with 64, groups 8..15 hold copies
         * of groups 0..7). Each output gathers its two rows' 4 pieces. */
        (void)halves;
        for (int i = 0; i < N; i++) {
            int row, col;
            bool mine = coords(i, lane, row, col);
            float s = 0.0f;
            for (int t = 0; t < 4; t++) {
                int xl = 4 * (row & 7) + t, wl = 4 * (col & 7) + t;
                for (int e = 0; e < 4; e++) {
                    uint32_t x0 = __shfl(word(x[0], e), xl), x1 = __shfl(word(x[1], e), xl);
                    uint32_t w0 = __shfl(word(w[0], e), wl), w1 = __shfl(word(w[1], e), wl);
                    uint32_t xv = row < 8 ? x0 : x1, wv = col < 8 ? w0 : w1;
                    s = __fmaf_rn(gptoss_bf16_float((uint16_t)(xv & 0xffff)),
                                  gptoss_bf16_float((uint16_t)(wv & 0xffff)), s);
                    s = __fmaf_rn(gptoss_bf16_float((uint16_t)(xv >> 16)),
                                  gptoss_bf16_float((uint16_t)(wv >> 16)), s);
                }
            }
            if (mine)
                acc[i] += s;
        }
#endif
    }

    /* false for the fallback's unused values when the warp is 64 wide */
    __device__ static __forceinline__ bool coords(int i, int lane, int &row, int &col) {
#if defined(GPTOSS_MMA_MFMA)
        row = lane & 15;
        col = 4 * (lane >> 4) + i;
        return true;
#else
        int g = (lane >> 2) & 7, t = lane & 3, j = i & 3;
        row = g + 8 * (j >> 1);
        col = 8 * (i >> 2) + 2 * t + (j & 1);
        return lane < 32;
#endif
    }
};

/* The same product for tiles of at most 8 X rows (a decode step's few
 * tokens, an expert's few pairs) with the operands swapped: W's 16 rows on
 * the mma's 16-row side and X's 8 on its 8-wide one, so a chunk takes half
 * the mma and a lane one X piece instead of two. Each product pairs the
 * same k in the same mma positions as tile16's, so an output gets tile16's
 * bits. NVIDIA sm_80+ only (gptoss_gemm_narrow_built); lane (g, t) holds
 * W rows g and g + 8 and X row g, as tile16 holds them:
 *
 *   ROWS, X_PIECES, x_piece_row    X's side: 8 rows, one piece, row g
 *   mma32(acc, x, w, lane)         acc[0..1]: output g, X rows 2t and 2t + 1;
 *                                  acc[2..3]: output g + 8, the same rows
 *   pair(acc, lane)                after the last mma32: acc regrouped by
 *                                  output pairs across lanes g and g ^ 1, as
 *                                  the epilogues take them (coords) */
struct tile8w {
    static constexpr int N = 4, ROWS = 8, X_PIECES = 1;
    typedef float acc_t[N];

    __device__ static __forceinline__ int x_piece_row(int lane, int) { return (lane >> 2) & 7; }

    __device__ static __forceinline__ void mma32(acc_t &acc, const uint4 *x, const uint4 *w, int lane) {
        (void)lane;
#if defined(GPTOSS_MMA_NVIDIA)
        for (int s = 0; s < 2; s++) { /* elements 4s..4s+3 of each piece, as tile16's */
            uint32_t a0 = tile16::word(w[0], 2 * s), a1 = tile16::word(w[1], 2 * s);
            uint32_t a2 = tile16::word(w[0], 2 * s + 1), a3 = tile16::word(w[1], 2 * s + 1);
            uint32_t b0 = tile16::word(x[0], 2 * s), b1 = tile16::word(x[0], 2 * s + 1);
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
#else
        (void)acc;
        (void)x;
        (void)w;
#endif
    }

    /* even g keeps X row 2t of outputs (g, g + 1), odd g row 2t + 1 of
     * (g - 1, g): each lane gives the partner lane ^ 4 the value it keeps not */
    __device__ static __forceinline__ void pair(acc_t &acc, int lane) {
        const bool odd = (lane >> 2) & 1;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float *c = acc + 2 * h;
            const float got = __shfl_xor(odd ? c[0] : c[1], 4);
            if (odd)
                c[0] = got;
            else
                c[1] = got;
        }
    }

    __device__ static __forceinline__ bool coords(int i, int lane, int &row, int &col) {
        row = 2 * (lane & 3) + ((lane >> 2) & 1);
        col = ((lane >> 2) & 6) + 8 * (i >> 1) + (i & 1);
        return true;
    }
};

#endif
