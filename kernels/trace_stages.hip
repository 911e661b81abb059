/* The unfused forms of fused stages, used only by the tracer (r:trace), so
 * that it can read back what the golden records: the attention scores and
 * probabilities of one row (the golden's loop and course softmax, per head),
 * SwiGLU applied to stored mlp1 outputs, and a stored projection added to
 * the residual. The arithmetic is the fused kernels', so a traced step
 * computes the same values as an ordinary one. */
#include <math.h>

#include "attention_score.h"
#include "device.h"
#include "../contract/launchers.h"
#include "../src/core/course_math.h"
#include "../src/core/softmax.h"

template <class KV>
__global__ void trace_scores_kernel(gptoss_attention_args a, float *scores, float *probs) {
    int h = blockIdx.x, D = a.head_dim, pos = a.positions[0], P = a.positions_per_slot;
    int kvd = a.n_kv_heads * D, kvh = h / (a.n_heads / a.n_kv_heads), n = pos + 2;
    const float *q = a.q + (size_t)h * D;
    const KV *K = (const KV *)a.k_cache + (size_t)a.slots[0] * P * kvd + kvh * D;
    float *sc = scores + (size_t)h * n, *pr = probs + (size_t)h * n;
    for (int t = threadIdx.x; t <= pos; t += blockDim.x) {
        if (a.window > 0 && pos - t >= a.window) {
            sc[t] = -INFINITY;
            continue;
        }
        sc[t] = golden_score(q, K + (size_t)(t % P) * kvd, D);
    }
    if (threadIdx.x == 0)
        sc[pos + 1] = a.sinks[h];
    __syncthreads();
    for (int t = threadIdx.x; t < n; t += blockDim.x)
        pr[t] = sc[t];
    __syncthreads();
    if (threadIdx.x == 0)
        gptoss_course_softmax(pr, n);
}

template <class T>
__global__ void trace_swiglu_kernel(const float *m1, int pairs, int inter, float limit, float *y,
                                    T *act) {
    size_t n = (size_t)pairs * inter;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t p = e / inter, i = e % inter;
        float v = gptoss_swiglu(m1[p * 2 * inter + 2 * i], m1[p * 2 * inter + 2 * i + 1], limit);
        y[e] = v;
        act[e] = from_float<T>(v);
    }
}

__global__ void trace_add_kernel(float *x, const float *y, size_t n) {
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x)
        x[e] += y[e];
}

hipError_t gptoss_launch_trace_scores(const gptoss_attention_args *a, int kv_bf16, float *scores,
                                      float *probs, hipStream_t stream) {
    if (kv_bf16)
        hipLaunchKernelGGL(trace_scores_kernel<bf16>, dim3(a->n_heads), dim3(256), 0, stream, *a,
                           scores, probs);
    else
        hipLaunchKernelGGL(trace_scores_kernel<float>, dim3(a->n_heads), dim3(256), 0, stream, *a,
                           scores, probs);
    return hipGetLastError();
}

hipError_t gptoss_launch_trace_swiglu(const float *m1, int pairs, int inter, float limit, float *y,
                                      void *act, int bf16_mode, hipStream_t stream) {
    if (bf16_mode)
        hipLaunchKernelGGL(trace_swiglu_kernel<bf16>, dim3(64), dim3(256), 0, stream, m1, pairs,
                           inter, limit, y, (bf16 *)act);
    else
        hipLaunchKernelGGL(trace_swiglu_kernel<float>, dim3(64), dim3(256), 0, stream, m1, pairs,
                           inter, limit, y, (float *)act);
    return hipGetLastError();
}

hipError_t gptoss_launch_trace_add(float *x, const float *y, size_t n, hipStream_t stream) {
    hipLaunchKernelGGL(trace_add_kernel, dim3(64), dim3(256), 0, stream, x, y, n);
    return hipGetLastError();
}
