/* RoPE on the fresh q and k of each row (half-split pairs i, i + D/2, the
 * golden's float arithmetic with its cos/sin table uploaded from the host),
 * fused with the KV cache write: k and v go to the row's slot at
 * position % positions (a ring for windowed layers), rounded to bf16 when
 * the cache is bf16. k_trace, when given, receives the rotated k before any
 * rounding (the tracer's k_rope). */
#include "device.h"
#include "launchers.h"

constexpr int ROPE_THREADS = 128;

/* One work item per thread: a rotated pair (i, i + D/2) of a q or k head,
 * or one value; a row's items are spread over blocks (grid.y), so each
 * thread waits on one round of loads (a block looping over a row's items
 * took 10 us per layer, latency alone). */
template <class KV>
__global__ void __launch_bounds__(ROPE_THREADS) rope_kv_kernel(gptoss_rope_kv_args a) {
    int r = blockIdx.x, half = a.head_dim / 2, pos = a.positions[r];
    int hqd = a.n_heads * a.head_dim, kvd = a.n_kv_heads * a.head_dim;
    int e = blockIdx.y * ROPE_THREADS + threadIdx.x, pairs = (a.n_heads + a.n_kv_heads) * half;
    const float *qkv = a.qkv + (size_t)r * (hqd + 2 * kvd);
    size_t at = ((size_t)a.slots[r] * a.positions_per_slot + pos % a.positions_per_slot) * kvd;
    KV *k_out = (KV *)a.k_cache + at, *v_out = (KV *)a.v_cache + at;
    if (e >= pairs) {
        if (e - pairs < kvd)
            v_out[e - pairs] = from_float<KV>(qkv[hqd + kvd + e - pairs]);
        return;
    }
    int h = e / half, i = e % half;
    bool is_q = h < a.n_heads;
    const float *src = is_q ? qkv + h * a.head_dim : qkv + hqd + (h - a.n_heads) * a.head_dim;
    float cs = a.cos[(size_t)pos * half + i], sn = a.sin[(size_t)pos * half + i];
    float x0 = src[i], x1 = src[i + half];
    float y0 = x0 * cs - x1 * sn;
    float y1 = x1 * cs + x0 * sn;
    if (is_q) {
        float *q = a.q + (size_t)r * hqd + h * a.head_dim;
        q[i] = y0;
        q[i + half] = y1;
    } else {
        int off = (h - a.n_heads) * a.head_dim;
        k_out[off + i] = from_float<KV>(y0);
        k_out[off + i + half] = from_float<KV>(y1);
        if (a.k_trace) {
            a.k_trace[(size_t)r * kvd + off + i] = y0;
            a.k_trace[(size_t)r * kvd + off + i + half] = y1;
        }
    }
}

hipError_t gptoss_launch_rope_kv(const gptoss_rope_kv_args *a, int kv_bf16, hipStream_t stream) {
    int items = (a->n_heads + a->n_kv_heads) * (a->head_dim / 2) + a->n_kv_heads * a->head_dim;
    dim3 grid(a->rows, (items + ROPE_THREADS - 1) / ROPE_THREADS);
    if (kv_bf16)
        hipLaunchKernelGGL(rope_kv_kernel<bf16>, grid, dim3(ROPE_THREADS), 0, stream, *a);
    else
        hipLaunchKernelGGL(rope_kv_kernel<float>, grid, dim3(ROPE_THREADS), 0, stream, *a);
    return hipGetLastError();
}
