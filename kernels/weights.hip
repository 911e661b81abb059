/* Weights in device memory: synthetic tensors generated in place with the
 * CPU's recipe (src/core/synth.h), so a GPU replica of a 20b/120b synthetic
 * model needs no host copy and holds exactly the CPU's bits, and fp32 →
 * bf16 conversion (round to nearest even, as the golden's bf16 mode) of
 * tensors uploaded from a file; either placed in the tiled layout
 * (layout.h) where asked. A block format's matrices (MXFP4) go into their
 * tiles from the host codec's rows or from the recipe. */
#include "device.h"
#include "../contract/launchers.h"
#include "mxfp4.h"
#include "../src/core/mxfp4.h"

/* where element first + i of a tensor goes: flat, i places after out; tiled,
 * its place in the tensor that begins at out */
__device__ __forceinline__ uint64_t placed(uint64_t first, uint64_t i, const gptoss_tiling &t) {
    if (t.n == 0)
        return i;
    uint64_t per = (uint64_t)t.n * t.k, s = (first + i) / per, in = (first + i) % per;
    return s * gptoss_tiled_elems(t.n, t.k) +
           gptoss_tiled_at(in / t.k, in % t.k, (t.k + GPTOSS_TILE_K - 1) / GPTOSS_TILE_K);
}

template <class T>
__global__ void synth_fill_kernel(gptoss_synth_param p, uint64_t first, uint64_t count, T *out,
                                  gptoss_tiling tiling) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        out[placed(first, i, tiling)] = from_float<T>(gptoss_synth_value(&p, first + i));
}

__global__ void to_bf16_kernel(const float *in, uint64_t first, uint64_t count, bf16 *out,
                               gptoss_tiling tiling) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        out[placed(first, i, tiling)] = from_float<bf16>(in[i]);
}

static dim3 grid_for(uint64_t count, unsigned threads) {
    uint64_t want = (count + threads - 1) / threads;
    return dim3(want < 65536 ? (unsigned)want : 65536u);
}

hipError_t gptoss_launch_synth_fill(const gptoss_synth_param &p, uint64_t first, uint64_t count,
                                    void *out, int out_bf16, gptoss_tiling tiling, hipStream_t stream) {
    if (count == 0)
        return hipSuccess;
    if (out_bf16)
        hipLaunchKernelGGL(synth_fill_kernel<bf16>, grid_for(count, 256), dim3(256), 0, stream, p,
                           first, count, (bf16 *)out, tiling);
    else
        hipLaunchKernelGGL(synth_fill_kernel<float>, grid_for(count, 256), dim3(256), 0, stream, p,
                           first, count, (float *)out, tiling);
    return hipGetLastError();
}

hipError_t gptoss_launch_to_bf16(const float *in, uint64_t first, uint64_t count, void *out,
                                 gptoss_tiling tiling, hipStream_t stream) {
    if (count == 0)
        return hipSuccess;
    hipLaunchKernelGGL(to_bf16_kernel, grid_for(count, 256), dim3(256), 0, stream, in, first, count,
                       (bf16 *)out, tiling);
    return hipGetLastError();
}

/* One thread per 8 inputs (k 8q..) of a row: their codes as the checkpoint
 * orders them (a word of 4 bytes, k 2j in byte j's low nibble) become the
 * tile's piece word (mxfp4.h); the thread of a block's first 8 inputs
 * writes the row's scale byte. */
__global__ void mxfp4_place_kernel(const uint8_t *codes, const uint8_t *scales, gptoss_synth_param p, uint64_t first,
                                   uint64_t rows, int64_t n, int64_t k, uint8_t *out) {
    const int64_t pieces = (k + 7) / 8, blocks = gptoss_mxfp4_blocks(k), chunks = (k + GPTOSS_TILE_K - 1) / GPTOSS_TILE_K;
    const uint64_t total = rows * (uint64_t)pieces, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const uint64_t row = first + i / pieces, matrix = row / n;
        const int64_t q8 = (int64_t)(i % pieces), r = (int64_t)(row % n), c = q8 / 4;
        uint32_t word = 0, scale;
        if (codes) {
            const uint8_t *b = codes + (i / pieces) * blocks * GPTOSS_MXFP4_BLOCK_BYTES + 4 * q8;
            word = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
            scale = scales[(i / pieces) * blocks + c];
        } else { /* the recipe's codes and block exponents (synth.h) */
            for (int j = 0; j < 8 && 8 * q8 + j < k; j++)
                word |= gptoss_synth_mxfp4_code(&p, row * (uint64_t)k + 8 * q8 + j) << (4 * j);
            scale = (uint32_t)(127 + gptoss_synth_mxfp4_exp(&p, row * (uint64_t)blocks + c));
        }
        const uint32_t piece = mxfp4_pack_piece(word);
        uint8_t *tile = out + matrix * gptoss_mxfp4_tiled_bytes(n, k) +
                        ((uint64_t)(r / GPTOSS_TILE_ROWS) * chunks + c) * GPTOSS_MXFP4_TILE_BYTES;
        *(uint32_t *)(tile + 4 * tile16::piece_at((int)(r % GPTOSS_TILE_ROWS), (int)(q8 % 4))) = piece;
        if (q8 % 4 == 0) /* mxfp4.h: the factor's exponent field */
            tile[GPTOSS_MXFP4_TILE_CODES + mxfp4_scale_at((int)(r % GPTOSS_TILE_ROWS))] =
                (uint8_t)(min(max(scale, (uint32_t)GPTOSS_MXFP4_SCALE_MIN), (uint32_t)GPTOSS_MXFP4_SCALE_MAX) + 126);
    }
}

hipError_t gptoss_launch_place_coded(int layout, const uint8_t *codes, const uint8_t *scales,
                                     const gptoss_synth_param *p, uint64_t first, uint64_t rows, int64_t n,
                                     int64_t k, void *out, hipStream_t stream) {
    if (layout != GPTOSS_W_MXFP4_TILES)
        return hipErrorInvalidValue;
    if (rows == 0)
        return hipSuccess;
    gptoss_synth_param recipe = p ? *p : gptoss_synth_param{};
    hipLaunchKernelGGL(mxfp4_place_kernel, grid_for(rows * (uint64_t)((k + 7) / 8), 256), dim3(256), 0, stream,
                       codes, scales, recipe, first, rows, n, k, (uint8_t *)out);
    return hipGetLastError();
}
