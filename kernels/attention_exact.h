/* Attention in fp32 mode, a part of attention.hip: the golden's order
 * exactly. One block per (row, head) makes three passes over the visible
 * keys, recomputing each score as the golden does (attention_score.h): the
 * maximum (with the sink), the double sum of the exponentials, then the
 * output as float sums in ascending position of the rounded probabilities
 * times the values. Only the double sum's order differs from the golden's. */
#ifndef GPTOSS_KERNELS_ATTENTION_EXACT_H
#define GPTOSS_KERNELS_ATTENTION_EXACT_H

#include "attention_common.h"
#include "attention_score.h"
#include "../src/core/course_math.h"

namespace {

constexpr int EXACT_THREADS = 128, EXACT_PER_THREAD = MAX_HEAD_DIM / EXACT_THREADS;

template <class KV> __global__ void __launch_bounds__(EXACT_THREADS)
attention_exact_kernel(gptoss_attention_args a) {
    __shared__ float qs[MAX_HEAD_DIM];
    __shared__ float probs[EXACT_THREADS];
    __shared__ float slot_f[EXACT_THREADS / 32];
    __shared__ double slot_d[EXACT_THREADS / 32];
    int r = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, n = blockDim.x;
    int D = a.head_dim, kvd = a.n_kv_heads * D, kvh = h / (a.n_heads / a.n_kv_heads);
    pdl_wait();
    int pos = a.positions[r], P = a.positions_per_slot;
    int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    const float *q = a.q + ((size_t)r * a.n_heads + h) * D;
    for (int i = tid; i < D; i += n)
        qs[i] = q[i];
    const KV *K = (const KV *)a.k_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    const KV *V = (const KV *)a.v_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    auto score = [&](int t) { return golden_score(qs, K + (size_t)(t % P) * kvd, D); };
    __syncthreads();
    float mx = -INFINITY;
    for (int t = first + tid; t <= pos; t += n)
        mx = fmaxf(mx, score(t));
    const float sink = a.sinks[h];
    const double top = fmaxf(block_all(mx, op_max(), slot_f), sink);
    double sum = 0.0;
    for (int t = first + tid; t <= pos; t += n)
        sum += gptoss_expf((float)(score(t) - top));
    sum = block_all(sum, op_add(), slot_d) + gptoss_expf((float)(sink - top));
    float o[EXACT_PER_THREAD] = {};
    for (int c0 = first; c0 <= pos; c0 += n) {
        int t = c0 + tid, len = min(n, pos + 1 - c0);
        if (t <= pos)
            probs[tid] = (float)(gptoss_expf((float)(score(t) - top)) / sum);
        __syncthreads();
        for (int j = 0; j < EXACT_PER_THREAD && tid + j * n < D; j++) {
            int i = tid + j * n;
            for (int u = 0; u < len; u++)
                o[j] += probs[u] * to_float(V[(size_t)((c0 + u) % P) * kvd + i]);
        }
        __syncthreads();
    }
    pdl_launch_dependents();
    for (int j = 0; j < EXACT_PER_THREAD && tid + j * n < D; j++)
        a.out[((size_t)r * a.n_heads + h) * D + tid + j * n] = o[j];
}

} // namespace

#endif
