/* The first stage of a step: each row's token embedding, widened to fp32
 * (the residual stream stays fp32 in every mode, as in the golden). A fed
 * token (gptoss_fed_row, device_contract.h) is the id the previous step
 * drew for that row, read from fed; where that draw failed (-1) the row is
 * NaN, so this step's own sampling fails on it too. */
#include "device.h"
#include "launch.h"
#include "../contract/launchers.h"

template <class T>
__global__ void embedding_kernel(const T *table, const int *tokens, const int *fed, int vocab, int hidden,
                                 float *x) {
    pdl_wait();
    int token = tokens[blockIdx.x];
    if (gptoss_token_is_fed(token))
        token = fed[gptoss_fed_row(token)];
    float *out = x + (size_t)blockIdx.x * hidden;
    if (token < 0 || token >= vocab) {
        for (int i = threadIdx.x; i < hidden; i += blockDim.x)
            out[i] = NAN;
        return;
    }
    const T *e = table + (size_t)token * hidden;
    pdl_launch_dependents();
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        out[i] = to_float(e[i]);
}

hipError_t gptoss_launch_embedding(const void *table, int bf16_mode, const int *tokens, const int *fed,
                                   int vocab, int rows, int hidden, float *x, const gptoss_gpu_shape *dev,
                                   hipStream_t stream) {
    if (bf16_mode)
        return launch_kernel(embedding_kernel<bf16>, dim3(rows), dim3(256), 0, stream, dev->programmatic,
                             (const bf16 *)table, tokens, fed, vocab, hidden, x);
    return launch_kernel(embedding_kernel<float>, dim3(rows), dim3(256), 0, stream, dev->programmatic,
                         (const float *)table, tokens, fed, vocab, hidden, x);
}
