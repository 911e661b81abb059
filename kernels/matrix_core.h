/* One warp's 16 x 16 x 16 bf16 product on the matrix cores, behind one
 * interface for every target:
 *
 *   tile16::acc_t acc = {};                  per-lane fp32 accumulators
 *   tile16::mma(acc, X, ldx, W, ldw, lane)   acc += X[0..16)[0..16) * W[0..16)[0..16)^T
 *   tile16::coords(i, lane, row, col)        where acc[i] sits: X row, W row (output column)
 *
 * X and W are bf16 tiles in shared memory, row-major with leading dimensions
 * ldx/ldw in elements (even). Elements 2j and 2j+1 of acc always lie in one
 * row at columns col and col + 1, so an epilogue sees mlp1's (gate, up)
 * pairs in one lane. Implementations:
 *   NVIDIA sm_80+:  two mma.sync m16n8k16 per call (8 values per lane)
 *   AMD gfx90a/94x: one v_mfma_f32_16x16x16bf16_1k with W as the A operand,
 *                   so a lane holds four consecutive output columns (4 values)
 *   anything else:  plain fp32 loops over the lanes (256 / warpSize values)
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
#if defined(GPTOSS_MMA_NVIDIA)
    static constexpr int N = 8;
#elif defined(GPTOSS_MMA_MFMA)
    static constexpr int N = 4;
#else
    static constexpr int N = 8; /* 256 values over at least 32 lanes */
#endif
    typedef float acc_t[N];

    __device__ static __forceinline__ uint32_t pair(const bf16 *p) {
        return *(const uint32_t *)p;
    }

    __device__ static __forceinline__ void mma(acc_t &acc, const bf16 *X, int ldx, const bf16 *W,
                                               int ldw, int lane) {
#if defined(GPTOSS_MMA_NVIDIA)
        int g = lane >> 2, t = lane & 3;
        uint32_t a0 = pair(X + g * ldx + 2 * t), a1 = pair(X + (g + 8) * ldx + 2 * t);
        uint32_t a2 = pair(X + g * ldx + 2 * t + 8), a3 = pair(X + (g + 8) * ldx + 2 * t + 8);
        for (int n8 = 0; n8 < 2; n8++) {
            const bf16 *w = W + (8 * n8 + g) * ldw + 2 * t;
            uint32_t b0 = pair(w), b1 = pair(w + 8);
            float *c = acc + 4 * n8;
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                         : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
#elif defined(GPTOSS_MMA_MFMA)
        typedef short short4_t __attribute__((ext_vector_type(4)));
        typedef float float4_t __attribute__((ext_vector_type(4)));
        int i = lane & 15, k = 4 * (lane >> 4);
        short4_t a, b;
        for (int j = 0; j < 4; j++) {
            a[j] = (short)W[i * ldw + k + j].bits;
            b[j] = (short)X[i * ldx + k + j].bits;
        }
        float4_t c = {acc[0], acc[1], acc[2], acc[3]};
        c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
        for (int j = 0; j < 4; j++)
            acc[j] = c[j];
#else
        for (int j = 0; j < N / 2; j++) {
            int q = lane + j * warpSize; /* column pair q % 8 of row q / 8 */
            if (q >= 128)
                break;
            int row = q / 8, col = 2 * (q % 8);
            for (int k = 0; k < 16; k++) {
                float x = to_float(X[row * ldx + k]);
                acc[2 * j] = __fmaf_rn(x, to_float(W[col * ldw + k]), acc[2 * j]);
                acc[2 * j + 1] = __fmaf_rn(x, to_float(W[(col + 1) * ldw + k]), acc[2 * j + 1]);
            }
        }
#endif
    }

    /* false for the fallback's unused values when the warp is 64 wide */
    __device__ static __forceinline__ bool coords(int i, int lane, int &row, int &col) {
#if defined(GPTOSS_MMA_NVIDIA)
        int g = lane >> 2, t = lane & 3, j = i & 3;
        row = g + 8 * (j >> 1);
        col = 8 * (i >> 2) + 2 * t + (j & 1);
        return true;
#elif defined(GPTOSS_MMA_MFMA)
        row = lane & 15;
        col = 4 * (lane >> 4) + i;
        return true;
#else
        int q = lane + (i / 2) * warpSize;
        row = q / 8;
        col = 2 * (q % 8) + (i & 1);
        return q < 128;
#endif
    }
};

#endif
