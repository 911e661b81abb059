/* Attention of each row over its slot's cached keys, with the per-head sink
 * and the sliding window (even layers; key t is visible from position p
 * when p - t < window).
 *
 * bf16 mode, flash-decoding style:
 *
 *  1. partials: one block per (row, KV head, split of the visible keys).
 *     The G = Hq / Hkv query heads sharing the KV head are done together,
 *     so each cached key and value is read once per row. Keys go by in
 *     chunks of 64 with an online softmax (running max and sum per head).
 *  2. combine: one block per (row, head) folds the splits and the sink logit
 *     into one denominator and writes the output (and its bf16 copy, the o
 *     projection's input in bf16 mode).
 *
 * Scores are float dot products; the softmax is the online form of the
 * course's, so values differ from the golden's by rounding only.
 *
 * fp32 mode, the golden's order exactly: one block per (row, head) makes
 * three passes over the visible keys, recomputing each score as the golden
 * does (attention_score.h): the maximum (with the sink), the double sum of
 * the exponentials, then the output as float sums in ascending position of
 * the rounded probabilities times the values. Only the double sum's order
 * differs from the golden's. */
#include <math.h>

#include "attention_score.h"
#include "device.h"
#include "launchers.h"
#include "../src/core/course_math.h"

namespace {

constexpr int CHUNK = 64, THREADS = 256;
constexpr int MAX_GD = 2048;               /* G * head_dim, checked by the engine */
constexpr int PER_THREAD = MAX_GD / THREADS;
constexpr int MAX_G = 32, MAX_HEAD_DIM = 256;
constexpr int KEY_FLOATS = CHUNK * 65; /* staged keys: a chunk of 64-wide heads */

template <class KV> __global__ void __launch_bounds__(THREADS)
attention_partial_kernel(gptoss_attention_args a) {
    __shared__ float qs[MAX_GD];
    __shared__ float S[MAX_G][CHUNK];
    __shared__ float ks[KEY_FLOATS];
    __shared__ float m_run[MAX_G], scale[MAX_G];
    __shared__ float l_run[MAX_G];
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
    const float inv_scale = sqrtf((float)D);
    int lane = tid % warpSize, warp = tid / warpSize, warps = THREADS / warpSize;
    __syncthreads();
    for (int c0 = lo; c0 < hi; c0 += CHUNK) {
        int n = min(CHUNK, hi - c0);
        /* scores: the keys go through shared memory as floats (coalesced
         * reads, rows padded so that a thread per key reads without bank
         * conflicts), as many as fit at once; then thread (key, group) does
         * query heads group, group + groups, ... */
        int per_pass = min(n, KEY_FLOATS / (D + 1)), groups = THREADS / per_pass;
        for (int i0 = 0; i0 < n; i0 += per_pass) {
            int m = min(per_pass, n - i0);
            __syncthreads(); /* the previous pass is done with ks */
            for (int e = tid; e < m * D; e += THREADS) {
                int i = e / D, d = e % D;
                ks[i * (D + 1) + d] = to_float(K[(size_t)((c0 + i0 + i) % P) * kvd + d]);
            }
            __syncthreads();
            int i = tid % per_pass, group = tid / per_pass;
            if (i < m && group < groups)
                for (int g = group; g < G; g += groups) {
                    float dot = 0.0f;
                    for (int d = 0; d < D; d++)
                        dot += qs[g * D + d] * ks[i * (D + 1) + d];
                    S[g][i0 + i] = dot / inv_scale;
                }
        }
        __syncthreads();
        for (int g = warp; g < G; g += warps) { /* online softmax, one warp per head */
            float mx = -INFINITY;
            for (int t = lane; t < n; t += warpSize)
                mx = fmaxf(mx, S[g][t]);
            mx = warp_max(mx);
            float m_new = fmaxf(m_run[g], mx);
            float sum = 0;
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
        /* outputs: the values staged like the keys, thread e doing (head
         * e / D, dimension e % D) */
        for (int i0 = 0; i0 < n; i0 += per_pass) {
            int m = min(per_pass, n - i0);
            __syncthreads(); /* the scores, or the previous pass, are done with ks */
            for (int e = tid; e < m * D; e += THREADS) {
                int i = e / D, d = e % D;
                ks[i * (D + 1) + d] = to_float(V[(size_t)((c0 + i0 + i) % P) * kvd + d]);
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < PER_THREAD; j++) {
                int e = tid + j * THREADS;
                if (e < GD) {
                    int g = e / D, d = e % D;
                    float o = i0 == 0 ? acc[j] * scale[g] : acc[j];
                    for (int i = 0; i < m; i++)
                        o += S[g][i0 + i] * ks[i * (D + 1) + d];
                    acc[j] = o;
                }
            }
        }
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
        a.part_ml[2 * (base + (size_t)tid * a.splits) + 1] = l_run[tid];
    }
}

constexpr int MAX_SPLITS = 256;

__global__ void attention_combine_kernel(gptoss_attention_args a) {
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
        float l = expf(sink - M);
        for (int s = 0; s < a.splits; s++)
            l += ml[2 * s + 1] * factor[s];
        denom = l;
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

constexpr int EXACT_THREADS = 128, EXACT_PER_THREAD = MAX_HEAD_DIM / EXACT_THREADS;

template <class KV> __global__ void __launch_bounds__(EXACT_THREADS)
attention_exact_kernel(gptoss_attention_args a) {
    __shared__ float qs[MAX_HEAD_DIM];
    __shared__ float probs[EXACT_THREADS];
    __shared__ float slot_f[EXACT_THREADS / 32];
    __shared__ double slot_d[EXACT_THREADS / 32];
    int r = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, n = blockDim.x;
    int D = a.head_dim, kvd = a.n_kv_heads * D, kvh = h / (a.n_heads / a.n_kv_heads);
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
    for (int j = 0; j < EXACT_PER_THREAD && tid + j * n < D; j++)
        a.out[((size_t)r * a.n_heads + h) * D + tid + j * n] = o[j];
}

} // namespace

int gptoss_attention_limits(int n_heads, int n_kv_heads, int head_dim) {
    int G = n_heads / n_kv_heads;
    return G <= MAX_G && G * head_dim <= MAX_GD && head_dim <= MAX_HEAD_DIM;
}

int gptoss_attention_max_splits(void) { return MAX_SPLITS; }

hipError_t gptoss_launch_attention(const gptoss_attention_args *a, int kv_bf16, int exact,
                                   hipStream_t stream) {
    if (exact) {
        dim3 grid(a->rows, a->n_heads);
        if (kv_bf16)
            hipLaunchKernelGGL(attention_exact_kernel<bf16>, grid, dim3(EXACT_THREADS), 0, stream, *a);
        else
            hipLaunchKernelGGL(attention_exact_kernel<float>, grid, dim3(EXACT_THREADS), 0, stream, *a);
        return hipGetLastError();
    }
    dim3 partial_grid(a->rows, a->n_kv_heads, a->splits), combine_grid(a->rows, a->n_heads);
    if (kv_bf16)
        hipLaunchKernelGGL(attention_partial_kernel<bf16>, partial_grid, dim3(THREADS), 0, stream, *a);
    else
        hipLaunchKernelGGL(attention_partial_kernel<float>, partial_grid, dim3(THREADS), 0, stream, *a);
    hipLaunchKernelGGL(attention_combine_kernel, combine_grid, dim3(64), 0, stream, *a);
    return hipGetLastError();
}
