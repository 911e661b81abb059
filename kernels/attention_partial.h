/* Attention's float partials (bf16 mode), a part of attention.hip: one
 * block per (row, KV head, split of the visible keys), for float caches and
 * the head shapes the matrix cores' kernel (attention_mma.h) does not take;
 * the combine (attention_combine.h) folds the splits.
 *
 * 128 threads take a chunk of up to 64 keys at a time, staged in
 * shared memory as floats (rows padded so that 16-byte reads by consecutive
 * keys miss each other's banks). For the scores thread t takes key t % 64
 * and 4 of the query heads (t / 64, + 2, + 4, + 6: a warp reads the same q,
 * a broadcast), for the outputs 4 consecutive dimensions of one head; both
 * read shared memory 16 bytes at a time, so the loop does 16 multiply-adds
 * per 5 reads. Every sum runs in the order of the scalar form: a score over
 * ascending dimensions, an output over ascending keys. The values' loads are
 * issued before the scores and land in shared memory after them.
 *
 * The kernel runs its stages in turn: stage_q; a chunk at a time, fetch and
 * stage (chunk_rows), chunk_scores, online_softmax and the values' sums;
 * store_outputs. How each stage takes what it needs keeps sm_90a's code
 * the single-body kernel's (other forms compiled differently): stage_q and
 * online_softmax carve the shared rows from smem4 themselves rather than
 * take pointers, chunk_rows refers to the kernel's values as the lambdas it
 * replaced did, and the values' sums stay in the kernel. */
#ifndef GPTOSS_KERNELS_ATTENTION_PARTIAL_H
#define GPTOSS_KERNELS_ATTENTION_PARTIAL_H

#include "attention_common.h"

namespace {

constexpr int CHUNK = 64, HEAD_GROUPS = THREADS / CHUNK, HEADS_PER_THREAD = 4;
constexpr int HEAD_PAD = HEAD_GROUPS * HEADS_PER_THREAD; /* q rows padded to a multiple of this */
constexpr int KEY_FLOATS = CHUNK * (64 + 4);           /* a staged chunk: 64 keys of 64-wide heads */
constexpr int MAX_QUADS = ((MAX_GD + 3 * MAX_G) / 4 + THREADS - 1) / THREADS; /* G * D4 / 4 per thread */

/* Shared memory of a partial block, in floats: q [G8][D4], scores [G][CHUNK],
 * the staged chunk [chunk][stride], running max, sum and rescale [G] each. */
struct partial_shape {
    int G, G8, D4, stride, chunk;
    __host__ __device__ partial_shape(int n_heads, int n_kv_heads, int D) {
        G = n_heads / n_kv_heads;
        G8 = (G + HEAD_PAD - 1) / HEAD_PAD * HEAD_PAD;
        D4 = (D + 3) & ~3;
        stride = D4 % 8 ? D4 : D4 + 4; /* 4 times an odd number of banks: conflict-free quads */
        chunk = KEY_FLOATS / stride < CHUNK ? KEY_FLOATS / stride : CHUNK;
    }
    __host__ __device__ size_t floats() const {
        return (size_t)G8 * D4 + (size_t)G * CHUNK + (size_t)chunk * stride + 3 * (size_t)G;
    }
};

/* A 16-byte vector of cached values into floats at dst (16-byte aligned). */
template <class KV> __device__ __forceinline__ void widen(float *dst, uint4 v) {
    constexpr int EPV = 16 / sizeof(KV);
    float f[EPV];
    unpack16(v, f, (const KV *)nullptr);
#pragma unroll
    for (int j = 0; j < EPV / 4; j++)
        ((float4 *)dst)[j] = make_float4(f[4 * j], f[4 * j + 1], f[4 * j + 2], f[4 * j + 3]);
}

/* o += p * v[0..3], a multiply then an add (the build keeps contraction off) */
__device__ __forceinline__ void add_scaled4(float4 &o, float p, const float *v) {
    float4 x = *(const float4 *)v;
    o.x += p * x.x;
    o.y += p * x.y;
    o.z += p * x.z;
    o.w += p * x.w;
}

/* The group's q rows into qs [G8][D4], zeros past G and D, and each head's
 * running max and sum reset */
__device__ __forceinline__ void stage_q(const float *q, const partial_shape &sh, int D) {
    const int G = sh.G, D4 = sh.D4, stride = sh.stride;
    float *qs = (float *)smem4, *S = qs + sh.G8 * D4, *ks = S + G * CHUNK;
    float *m_run = ks + sh.chunk * stride, *l_run = m_run + G;
    const int tid = threadIdx.x;
    for (int e = tid; e < sh.G8 * D4; e += THREADS) {
        int g = e / D4, d = e - g * D4;
        qs[e] = g < G && d < D ? q[g * D + d] : 0.0f;
    }
    if (tid < G) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0;
    }
}

/* A chunk's cached rows as the kernel fetches and stages them, by
 * reference to the kernel's values (above). Position t's row is t % P,
 * rows kvd values apart; vec: a row is vpr whole 16-byte vectors, which go
 * through registers, else value by value. */
template <class KV, int MAX_VECS> struct chunk_rows {
    static constexpr int EPV = 16 / sizeof(KV); /* values per 16-byte vector */
    const int &tid;
    const bool &vec;
    const int &vpr, &P, &kvd, &D4, &stride, &D;
    float *const &ks;

    /* rows c0 .. c0 + n - 1 into registers (vec only) */
    __device__ void fetch(const KV *base, int c0, int n, uint4 (&reg)[MAX_VECS]) const {
#pragma unroll
        for (int j = 0; j < MAX_VECS; j++) {
            int v = tid + j * THREADS;
            if (vec && v < n * vpr) {
                int i = v / vpr;
                reg[j] = *(const uint4 *)(base + (size_t)((c0 + i) % P) * kvd + (v - i * vpr) * EPV);
            }
        }
    }
    /* the same rows into the staging rows ks [n][stride], D4 - D zeros a row */
    __device__ void stage(const KV *base, int c0, int n, const uint4 (&reg)[MAX_VECS]) const {
        if (!vec) {
            for (int e = tid; e < n * D4; e += THREADS) {
                int i = e / D4, d = e - i * D4;
                ks[i * stride + d] = d < D ? to_float(base[(size_t)((c0 + i) % P) * kvd + d]) : 0.0f;
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < MAX_VECS; j++) {
            int v = tid + j * THREADS, i = v / vpr;
            if (v < n * vpr)
                widen<KV>(ks + i * stride + (v - i * vpr) * EPV, reg[j]);
        }
    }
};

/* The staged chunk's n scores of every head into S [G][CHUNK] */
__device__ __forceinline__ void chunk_scores(const partial_shape &sh, const float *qs, const float *ks, float *S, int n,
                                             float inv_scale) {
    const int tid = threadIdx.x, G = sh.G, D4 = sh.D4;
    int key = tid % CHUNK;
    if (key >= n)
        return;
    const float *k = ks + key * sh.stride;
    for (int g0 = tid / CHUNK; g0 < G; g0 += HEAD_PAD) {
        float dot[HEADS_PER_THREAD] = {};
        for (int d = 0; d < D4; d += 4) {
            float4 kq = *(const float4 *)(k + d);
#pragma unroll
            for (int j = 0; j < HEADS_PER_THREAD; j++) {
                float4 qq = *(const float4 *)(qs + (g0 + HEAD_GROUPS * j) * D4 + d);
                dot[j] += qq.x * kq.x;
                dot[j] += qq.y * kq.y;
                dot[j] += qq.z * kq.z;
                dot[j] += qq.w * kq.w;
            }
        }
#pragma unroll
        for (int j = 0; j < HEADS_PER_THREAD; j++)
            if (g0 + HEAD_GROUPS * j < G)
                S[(g0 + HEAD_GROUPS * j) * CHUNK + key] = dot[j] / inv_scale;
    }
}

/* The online softmax of a chunk, warp w taking heads w, + warps, ...: its
 * n scores become probabilities under the head's new running max, its sum
 * joins the running sum, and scale[g] is the factor the head's earlier
 * outputs take */
__device__ __forceinline__ void online_softmax(const partial_shape &sh, int n, int lane, int warp, int warps) {
    const int G = sh.G, D4 = sh.D4, stride = sh.stride;
    float *qs = (float *)smem4, *S = qs + sh.G8 * D4, *ks = S + G * CHUNK;
    float *m_run = ks + sh.chunk * stride, *l_run = m_run + G, *scale = l_run + G;
    for (int g = warp; g < G; g += warps) {
        float *Sg = S + g * CHUNK, mx = -INFINITY;
        for (int t = lane; t < n; t += warpSize)
            mx = fmaxf(mx, Sg[t]);
        mx = warp_max(mx);
        float m_new = fmaxf(m_run[g], mx);
        float sum = 0;
        for (int t = lane; t < n; t += warpSize) {
            float p = expf(Sg[t] - m_new);
            Sg[t] = p;
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
}

/* The thread's quads of the split's unnormalised outputs (quads of them in
 * the block), for the combine; base: the group's first head's split */
__device__ __forceinline__ void store_outputs(const gptoss_attention_args &a, size_t base, const partial_shape &sh,
                                              int quads, const float4 (&acc)[MAX_QUADS]) {
    const int tid = threadIdx.x, D4 = sh.D4, D = a.head_dim;
#pragma unroll
    for (int j = 0; j < MAX_QUADS; j++) {
        int e = tid + j * THREADS;
        if (e < quads) {
            int g = e / (D4 / 4), d = 4 * (e - g * (D4 / 4));
            float *out = a.part_o + (base + (size_t)g * a.splits) * D + d;
            if (d + 4 <= D) {
                out[0] = acc[j].x;
                out[1] = acc[j].y;
                out[2] = acc[j].z;
                out[3] = acc[j].w;
            } else { /* the last quad of a row whose D is not a multiple of 4: two values */
                out[0] = acc[j].x;
                out[1] = acc[j].y;
            }
        }
    }
}

/* bf16 caches need fewer registers: six blocks per multiprocessor fit without spills */
template <class KV> __global__ void GPTOSS_LAUNCH_BOUNDS(THREADS, sizeof(KV) == 2 ? 6 : 4)
attention_partial_kernel(gptoss_attention_args a) {
    constexpr int EPV = 16 / sizeof(KV); /* values per 16-byte vector */
    constexpr int MAX_VECS = (KEY_FLOATS / EPV + THREADS - 1) / THREADS;
    const partial_shape sh(a.n_heads, a.n_kv_heads, a.head_dim);
    const int G = sh.G, D = a.head_dim, D4 = sh.D4, stride = sh.stride, kvd = a.n_kv_heads * D;
    float *qs = (float *)smem4, *S = qs + sh.G8 * D4, *ks = S + G * CHUNK;
    float *m_run = ks + sh.chunk * stride, *l_run = m_run + G, *scale = l_run + G;
    int r = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    pdl_wait();
    int pos = a.positions[r], P = a.positions_per_slot;
    int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    int lo = first + s * a.split_len, hi = min(pos + 1, lo + a.split_len);
    stage_q(a.q + ((size_t)r * a.n_heads + (size_t)kvh * G) * D, sh, D);
    const KV *K = (const KV *)a.k_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    const KV *V = (const KV *)a.v_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    const bool vec = D % EPV == 0;
    const int vpr = D / EPV, quads = G * (D4 / 4);
    const chunk_rows<KV, MAX_VECS> rows{tid, vec, vpr, P, kvd, D4, stride, D, ks};
    float4 acc[MAX_QUADS];
#pragma unroll
    for (int j = 0; j < MAX_QUADS; j++)
        acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float inv_scale = sqrtf((float)D);
    int lane = tid % warpSize, warp = tid / warpSize, warps = THREADS / warpSize;
    for (int c0 = lo; c0 < hi; c0 += sh.chunk) {
        int n = min(sh.chunk, hi - c0);
        uint4 reg[MAX_VECS];
        rows.fetch(K, c0, n, reg);
        rows.stage(K, c0, n, reg);
        rows.fetch(V, c0, n, reg); /* in flight during the scores */
        __syncthreads();           /* keys staged (and q, on the first chunk) */
        chunk_scores(sh, qs, ks, S, n, inv_scale);
        __syncthreads(); /* scores written, keys no longer needed */
        rows.stage(V, c0, n, reg);
        online_softmax(sh, n, lane, warp, warps);
        __syncthreads(); /* probabilities and values ready */
#pragma unroll
        for (int j = 0; j < MAX_QUADS; j++) { /* the thread's output quads rescaled, plus the chunk's values */
            int e = tid + j * THREADS;
            if (e < quads) {
                int g = e / (D4 / 4);
                const float *p = S + g * CHUNK, *v = ks + 4 * (e - g * (D4 / 4));
                float4 o = acc[j];
                float f = scale[g];
                o.x *= f;
                o.y *= f;
                o.z *= f;
                o.w *= f;
                int i = 0;
                for (; i + 4 <= n; i += 4) {
                    float4 p4 = *(const float4 *)(p + i);
                    add_scaled4(o, p4.x, v + i * stride);
                    add_scaled4(o, p4.y, v + (i + 1) * stride);
                    add_scaled4(o, p4.z, v + (i + 2) * stride);
                    add_scaled4(o, p4.w, v + (i + 3) * stride);
                }
                for (; i < n; i++)
                    add_scaled4(o, p[i], v + i * stride);
                acc[j] = o;
            }
        }
        __syncthreads(); /* the next chunk may overwrite the staging rows */
    }
    pdl_launch_dependents();
    size_t base = ((size_t)r * a.n_heads + (size_t)kvh * G) * a.splits + s;
    store_outputs(a, base, sh, quads, acc);
    if (tid < G) {
        a.part_ml[2 * (base + (size_t)tid * a.splits)] = m_run[tid];
        a.part_ml[2 * (base + (size_t)tid * a.splits) + 1] = l_run[tid];
    }
}

} // namespace

#endif
