/* Synthetic weights generated in device memory: the same recipe as the CPU
 * (src/core/synth.h), so a GPU replica of a 20b/120b synthetic model needs
 * no host copy and holds exactly the CPU's bits. */
#include "launchers.h"

__global__ void synth_fill_kernel(gptoss_synth_param p, uint64_t first, uint64_t count, float *out) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        out[i] = gptoss_synth_value(&p, first + i);
}

hipError_t gptoss_launch_synth_fill(const gptoss_synth_param &p, uint64_t first, uint64_t count,
                                    float *out, hipStream_t stream) {
    if (count == 0)
        return hipSuccess;
    const unsigned threads = 256;
    uint64_t want = (count + threads - 1) / threads;
    unsigned blocks = want < 65536 ? (unsigned)want : 65536u;
    hipLaunchKernelGGL(synth_fill_kernel, dim3(blocks), dim3(threads), 0, stream, p, first, count, out);
    return hipGetLastError();
}
