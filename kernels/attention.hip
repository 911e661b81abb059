/* Attention of each row over its slot's cached keys, with the per-head sink
 * and the sliding window (even layers; key t is visible from position p
 * when p - t < window), flash-decoding style:
 *
 *  1. partials: one block per (row, KV head, split of the visible keys).
 *     The G = Hq / Hkv query heads sharing the KV head are done together,
 *     so each cached key and value is read once per row. Keys go by in
 *     chunks of 64 with an online softmax (running max and sum per head).
 *  2. combine: one block per (row, head) folds the splits and the sink logit
 *     into one denominator and writes the output (and its bf16 copy, the o
 *     projection's input in bf16 mode).
 *
 * Scores are the golden's: the float products q_i * k_i summed in ACC
 * (double in fp32 mode), divided by sqrtf(head_dim) in that precision, then
 * rounded to float. The softmax is the online form of the course's: the
 * exponentials differ from the golden's by rounding only. */
#include <math.h>

#include "device.h"
#include "launchers.h"

namespace {

constexpr int CHUNK = 64, THREADS = 256;
constexpr int MAX_GD = 2048;               /* G * head_dim, checked by the engine */
constexpr int PER_THREAD = MAX_GD / THREADS;
constexpr int MAX_G = 32, GROUPS = THREADS / CHUNK, G_PER_GROUP = MAX_G / GROUPS;

template <class KV, class ACC> __global__ void __launch_bounds__(THREADS)
attention_partial_kernel(gptoss_attention_args a) {
    __shared__ float qs[MAX_GD];
    __shared__ float S[MAX_G][CHUNK];
    __shared__ float m_run[MAX_G], scale[MAX_G];
    __shared__ ACC l_run[MAX_G];
    int r = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    int D = a.head_dim, G = a.n_heads / a.n_kv_heads, GD = G * D, kvd = a.n_kv_heads * D;
    int pos = a.positions[r], P = a.positions_per_slot;
    int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    int lo = first + s * a.split_len, hi = min(pos + 1, lo + a.split_len);
    const float *q = a.q + (size_t)r * a.n_heads * D + (size_t)kvh * GD;
    for (int e = tid; e < GD; e += THREADS)
        qs[e] = q[e];
    if (tid < G) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0;
    }
    const KV *K = (const KV *)a.k_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    const KV *V = (const KV *)a.v_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    float acc[PER_THREAD] = {};
    const ACC inv_scale = (ACC)sqrtf((float)D);
    int lane = tid % warpSize, warp = tid / warpSize, warps = THREADS / warpSize;
    __syncthreads();
    for (int c0 = lo; c0 < hi; c0 += CHUNK) {
        int n = min(CHUNK, hi - c0);
        {   /* scores: thread (t, group) does heads group, group + GROUPS, ... */
            int t = tid % CHUNK, group = tid / CHUNK;
            if (t < n) {
                const KV *k = K + (size_t)((c0 + t) % P) * kvd;
                ACC dot[G_PER_GROUP] = {};
                for (int d = 0; d < D; d++) {
                    float kv = to_float(k[d]);
                    for (int j = 0; j < G_PER_GROUP; j++) {
                        int g = group + j * GROUPS;
                        if (g < G)
                            dot[j] += (ACC)(qs[g * D + d] * kv);
                    }
                }
                for (int j = 0; j < G_PER_GROUP; j++) {
                    int g = group + j * GROUPS;
                    if (g < G)
                        S[g][t] = (float)(dot[j] / inv_scale);
                }
            }
        }
        __syncthreads();
        for (int g = warp; g < G; g += warps) { /* online softmax, one warp per head */
            float mx = -INFINITY;
            for (int t = lane; t < n; t += warpSize)
                mx = fmaxf(mx, S[g][t]);
            mx = warp_max(mx);
            float m_new = fmaxf(m_run[g], mx);
            ACC sum = 0;
            for (int t = lane; t < n; t += warpSize) {
                float p = expf(S[g][t] - m_new);
                S[g][t] = p;
                sum += p;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                float f = expf(m_run[g] - m_new);
                scale[g] = f;
                l_run[g] = l_run[g] * f + sum;
                m_run[g] = m_new;
            }
        }
        __syncthreads();
        for (int j = 0; j < PER_THREAD; j++) {
            int e = tid + j * THREADS;
            if (e >= GD)
                break;
            int g = e / D, d = e % D;
            float o = acc[j] * scale[g];
            for (int t = 0; t < n; t++)
                o += S[g][t] * to_float(V[(size_t)((c0 + t) % P) * kvd + d]);
            acc[j] = o;
        }
        __syncthreads();
    }
    size_t base = ((size_t)r * a.n_heads + (size_t)kvh * G) * a.splits + s;
    for (int j = 0; j < PER_THREAD; j++) {
        int e = tid + j * THREADS;
        if (e >= GD)
            break;
        int g = e / D, d = e % D;
        a.part_o[(base + (size_t)g * a.splits) * D + d] = acc[j];
    }
    if (tid < G) {
        a.part_ml[2 * (base + (size_t)tid * a.splits)] = m_run[tid];
        a.part_ml[2 * (base + (size_t)tid * a.splits) + 1] = (float)l_run[tid];
    }
}

constexpr int MAX_SPLITS = 256;

template <class ACC> __global__ void attention_combine_kernel(gptoss_attention_args a) {
    __shared__ float factor[MAX_SPLITS];
    __shared__ float denom;
    int r = blockIdx.x, h = blockIdx.y, D = a.head_dim;
    size_t base = ((size_t)r * a.n_heads + h) * a.splits;
    const float *ml = a.part_ml + 2 * base;
    float sink = a.sinks[h];
    float M = sink;
    for (int s = 0; s < a.splits; s++)
        M = fmaxf(M, ml[2 * s]);
    for (int s = threadIdx.x; s < a.splits; s += blockDim.x)
        factor[s] = expf(ml[2 * s] - M);
    __syncthreads();
    if (threadIdx.x == 0) {
        ACC l = expf(sink - M);
        for (int s = 0; s < a.splits; s++)
            l += (ACC)ml[2 * s + 1] * factor[s];
        denom = (float)l;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < a.splits; s++)
            o += a.part_o[(base + s) * D + d] * factor[s];
        float v = o / denom;
        size_t at = (size_t)r * a.n_heads * D + (size_t)h * D + d;
        a.out[at] = v;
        if (a.out_bf16)
            ((bf16 *)a.out_bf16)[at] = from_float<bf16>(v);
    }
}

} // namespace

int gptoss_attention_limits(int n_heads, int n_kv_heads, int head_dim) {
    int G = n_heads / n_kv_heads;
    return G <= MAX_G && G * head_dim <= MAX_GD;
}

int gptoss_attention_max_splits(void) { return MAX_SPLITS; }

hipError_t gptoss_launch_attention(const gptoss_attention_args *a, int kv_bf16, int exact,
                                   hipStream_t stream) {
    dim3 partial_grid(a->rows, a->n_kv_heads, a->splits), combine_grid(a->rows, a->n_heads);
#define GPTOSS_ATTN(KV, ACC)                                                                       \
    do {                                                                                           \
        hipLaunchKernelGGL(HIP_KERNEL_NAME(attention_partial_kernel<KV, ACC>), partial_grid,      \
                           dim3(THREADS), 0, stream, *a);                                          \
        hipLaunchKernelGGL(HIP_KERNEL_NAME(attention_combine_kernel<ACC>), combine_grid,          \
                           dim3(64), 0, stream, *a);                                               \
    } while (0)
    if (exact && kv_bf16)
        GPTOSS_ATTN(bf16, double);
    else if (exact)
        GPTOSS_ATTN(float, double);
    else if (kv_bf16)
        GPTOSS_ATTN(bf16, float);
    else
        GPTOSS_ATTN(float, float);
#undef GPTOSS_ATTN
    return hipGetLastError();
}
