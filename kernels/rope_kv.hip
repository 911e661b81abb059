/* RoPE on the fresh q and k of each row, fused with the KV cache write
 * (rope.h), for qkv projections whose GEMM did not take it in its epilogue
 * (gemm.hip). k_trace, when given, receives the rotated k before any
 * rounding (the tracer's k_rope). */
#include "launch.h"
#include "rope.h"

constexpr int ROPE_THREADS = 128;

/* One work item per thread: a rotated pair (i, i + D/2) of a q or k head,
 * or one value; a row's items are spread over blocks (grid.y), so each
 * thread waits on one round of loads (a block looping over a row's items
 * waited on one round after another). */
template <class KV>
__global__ void __launch_bounds__(ROPE_THREADS) rope_kv_kernel(gptoss_rope_kv_args a) {
    int r = blockIdx.x, half = a.head_dim / 2;
    int hqd = a.n_heads * a.head_dim, kvd = a.n_kv_heads * a.head_dim;
    int e = blockIdx.y * ROPE_THREADS + threadIdx.x, pairs = (a.n_heads + a.n_kv_heads) * half;
    const float *qkv = a.qkv + (size_t)r * (hqd + 2 * kvd);
    pdl_wait();
    pdl_launch_dependents(); /* a thread has one round of loads and stores left */
    if (e >= pairs) {
        if (e - pairs < kvd)
            rope_store_v<KV>(a, r, e - pairs, qkv[hqd + kvd + e - pairs]);
        return;
    }
    int h = e / half, i = e % half;
    const float *src = qkv + h * a.head_dim; /* the k heads follow the q heads */
    float y0, y1;
    rope_rotate(a, r, i, src[i], src[i + half], y0, y1);
    rope_store_pair<KV>(a, r, h, i, y0, y1);
}

hipError_t gptoss_launch_rope_kv(const gptoss_rope_kv_args *a, const gptoss_gpu_shape *dev, hipStream_t stream) {
    int items = (a->n_heads + a->n_kv_heads) * (a->head_dim / 2) + a->n_kv_heads * a->head_dim;
    dim3 grid(a->rows, (items + ROPE_THREADS - 1) / ROPE_THREADS);
    return launch_kernel(a->kv_bf16 ? rope_kv_kernel<bf16> : rope_kv_kernel<float>, grid, dim3(ROPE_THREADS), 0,
                         stream, dev->programmatic, *a);
}
