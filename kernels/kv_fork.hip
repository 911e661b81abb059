/* A fork: one slot's cached keys and values copied into another slot, every
 * layer in one launch, so the copy is ordered with the steps around it on
 * the replica's stream. Position p lies at p % positions in both slots, so
 * a ring's entries stay where a prefill would have put them. */
#include "device.h"
#include "../contract/launchers.h"

constexpr int FORK_THREADS = 256;
constexpr int FORK_BLOCKS_PER_LAYER = 64;

/* Blocks [l * FORK_BLOCKS_PER_LAYER, ...) copy layer l, in 4-byte words
 * (a position's Hkv D values are an even count: head_dim is even). */
__global__ void __launch_bounds__(FORK_THREADS)
kv_fork_kernel(const gptoss_kv_layer *layers, int words, int from, int to, int length) {
    const gptoss_kv_layer layer = layers[blockIdx.x / FORK_BLOCKS_PER_LAYER];
    const int P = layer.positions;
    const int first = length - P > 0 ? length - P : 0; /* each place of a ring once */
    const int64_t count = (int64_t)(length - first) * words;
    const int64_t stride = (int64_t)FORK_BLOCKS_PER_LAYER * FORK_THREADS;
    for (int64_t i = (int64_t)(blockIdx.x % FORK_BLOCKS_PER_LAYER) * FORK_THREADS + threadIdx.x; i < count;
         i += stride) {
        const int p = first + (int)(i / words), w = (int)(i % words);
        const size_t src = ((size_t)from * P + p % P) * words + w, dst = ((size_t)to * P + p % P) * words + w;
        ((uint32_t *)layer.k)[dst] = ((const uint32_t *)layer.k)[src];
        ((uint32_t *)layer.v)[dst] = ((const uint32_t *)layer.v)[src];
    }
}

hipError_t gptoss_launch_kv_fork(const gptoss_kv_layer *layers, int n_layers, size_t row_bytes, int from, int to,
                                 int length, hipStream_t stream) {
    if (n_layers < 0 || row_bytes % 4 || (int64_t)n_layers * FORK_BLOCKS_PER_LAYER > INT32_MAX)
        return hipErrorInvalidValue;
    if (n_layers == 0 || length == 0)
        return hipSuccess;
    hipLaunchKernelGGL(kv_fork_kernel, dim3(n_layers * FORK_BLOCKS_PER_LAYER), dim3(FORK_THREADS), 0, stream,
                       layers, (int)(row_bytes / 4), from, to, length);
    return hipGetLastError();
}
