/* Weights in device memory: synthetic tensors generated in place with the
 * CPU's recipe (src/core/synth.h), so a GPU replica of a 20b/120b synthetic
 * model needs no host copy and holds exactly the CPU's bits, and fp32 →
 * bf16 conversion (round to nearest even, as the golden's bf16 mode) of
 * tensors uploaded from a file. */
#include "device.h"
#include "launchers.h"

template <class T>
__global__ void synth_fill_kernel(gptoss_synth_param p, uint64_t first, uint64_t count, T *out) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        out[i] = from_float<T>(gptoss_synth_value(&p, first + i));
}

__global__ void to_bf16_kernel(const float *in, uint64_t count, bf16 *out) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        out[i] = from_float<bf16>(in[i]);
}

static dim3 grid_for(uint64_t count, unsigned threads) {
    uint64_t want = (count + threads - 1) / threads;
    return dim3(want < 65536 ? (unsigned)want : 65536u);
}

hipError_t gptoss_launch_synth_fill(const gptoss_synth_param &p, uint64_t first, uint64_t count,
                                    void *out, int out_bf16, hipStream_t stream) {
    if (count == 0)
        return hipSuccess;
    if (out_bf16)
        hipLaunchKernelGGL(synth_fill_kernel<bf16>, grid_for(count, 256), dim3(256), 0, stream, p,
                           first, count, (bf16 *)out);
    else
        hipLaunchKernelGGL(synth_fill_kernel<float>, grid_for(count, 256), dim3(256), 0, stream, p,
                           first, count, (float *)out);
    return hipGetLastError();
}

hipError_t gptoss_launch_to_bf16(const float *in, uint64_t count, void *out, hipStream_t stream) {
    if (count == 0)
        return hipSuccess;
    hipLaunchKernelGGL(to_bf16_kernel, grid_for(count, 256), dim3(256), 0, stream, in, count,
                       (bf16 *)out);
    return hipGetLastError();
}
