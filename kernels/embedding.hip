/* The first stage of a step: each row's token embedding, widened to fp32
 * (the residual stream stays fp32 in every mode, as in the golden). */
#include "device.h"
#include "launchers.h"

template <class T>
__global__ void embedding_kernel(const T *table, const int *tokens, int hidden, float *x) {
    const T *e = table + (size_t)tokens[blockIdx.x] * hidden;
    float *out = x + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out[i] = to_float(e[i]);
}

hipError_t gptoss_launch_embedding(const void *table, int bf16_mode, const int *tokens, int rows,
                                   int hidden, float *x, hipStream_t stream) {
    if (bf16_mode)
        hipLaunchKernelGGL(embedding_kernel<bf16>, dim3(rows), dim3(256), 0, stream,
                           (const bf16 *)table, tokens, hidden, x);
    else
        hipLaunchKernelGGL(embedding_kernel<float>, dim3(rows), dim3(256), 0, stream,
                           (const float *)table, tokens, hidden, x);
    return hipGetLastError();
}
