/* Weights in device memory: synthetic tensors generated in place with the
 * CPU's recipe (src/core/synth.h), so a GPU replica of a 20b/120b synthetic
 * model needs no host copy and holds exactly the CPU's bits, and fp32 →
 * bf16 conversion (round to nearest even, as the golden's bf16 mode) of
 * tensors uploaded from a file; either placed in the tiled layout
 * (layout.h) where asked. */
#include "device.h"
#include "launchers.h"

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
