/* Attention of each row over its slot's cached keys, with the per-head sink
 * and the sliding window (even layers; key t is visible from position p
 * when p - t < window).
 *
 * bf16 mode, flash-decoding style:
 *
 *  1. partials: one block per (row, KV head, split of the visible keys), or
 *     on the matrix cores, where the grid would be large, per a few of the
 *     row's splits taken one after another.
 *     The G = Hq / Hkv query heads sharing the KV head are done together,
 *     so each cached key and value is read once per row. Keys go by in
 *     chunks with an online softmax (running max and sum per head): on the
 *     matrix cores for bf16 caches (up to 16 heads of up to 64 values per
 *     KV head, gpt-oss's 8 of 64), else with float products in chunks of up
 *     to 64 keys (fewer for heads wider than 64).
 *  2. combine: 64 threads per (row, head) fold the splits and the sink
 *     logit into one denominator and write the output (and its bf16 copy,
 *     the o projection's input in bf16 mode). When the step has one split
 *     (windowed layers, and the first split_len positions of the others)
 *     the matrix-core partials fold their own by the same arithmetic and
 *     the combine does not run: a launch and the partials' round trip
 *     through memory fewer.
 *
 * Scores are float dot products (on the matrix cores, of float-precise
 * parts: below); the softmax is the online form of the course's, so values
 * differ from the golden's by rounding only.
 *
 * fp32 mode, the golden's order exactly: one block per (row, head) makes
 * three passes over the visible keys, recomputing each score as the golden
 * does (attention_score.h): the maximum (with the sink), the double sum of
 * the exponentials, then the output as float sums in ascending position of
 * the rounded probabilities times the values. Only the double sum's order
 * differs from the golden's. */
#include <math.h>

#include <algorithm>

#include "attention_score.h"
#include "device.h"
#include "launchers.h"
#include "matrix_core.h"
#include "../src/core/course_math.h"

namespace {

/* The splits of a (row, head) folded with its sink into the output: the
 * largest of the running maxima and the sink scales every split, whose
 * sums join the sink's term in one denominator. The combine folds any
 * number of splits; a block whose split is the row's only one folds it
 * itself, by the same arithmetic, so its output has the same bits. */
struct split_fold {
    float M, denom, o;
    __device__ split_fold(float sink, float max_m) : M(max_m), denom(expf(sink - max_m)), o(0.0f) {}
    __device__ void add(float m, float l, float part) {
        float f = expf(m - M);
        denom += l * f;
        o += part * f;
    }
    __device__ void store(const gptoss_attention_args &a, int r, int h, int d) const {
        float v = o / denom;
        size_t at = ((size_t)r * a.n_heads + h) * a.head_dim + d;
        a.out[at] = v;
        if (a.out_bf16)
            ((bf16 *)a.out_bf16)[at] = from_float<bf16>(v);
    }
};

/* Partials: 128 threads take a chunk of up to 64 keys at a time, staged in
 * shared memory as floats (rows padded so that 16-byte reads by consecutive
 * keys miss each other's banks). For the scores thread t takes key t % 64
 * and 4 of the query heads (t / 64, + 2, + 4, + 6: a warp reads the same q,
 * a broadcast), for the outputs 4 consecutive dimensions of one head; both
 * read shared memory 16 bytes at a time, so the loop does 16 multiply-adds
 * per 5 reads. Every sum runs in the order of the scalar form: a score over
 * ascending dimensions, an output over ascending keys. The values' loads are
 * issued before the scores and land in shared memory after them. */
constexpr int CHUNK = 64, THREADS = 128, HEAD_GROUPS = THREADS / CHUNK, HEADS_PER_THREAD = 4;
constexpr int HEAD_PAD = HEAD_GROUPS * HEADS_PER_THREAD; /* q rows padded to a multiple of this */
constexpr int MAX_G = 32, MAX_GD = 2048, MAX_HEAD_DIM = 256;
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

/* bf16 caches need fewer registers: six blocks per multiprocessor fit without spills */
template <class KV> __global__ void GPTOSS_LAUNCH_BOUNDS(THREADS, sizeof(KV) == 2 ? 6 : 4)
attention_partial_kernel(gptoss_attention_args a) {
    constexpr int EPV = 16 / sizeof(KV); /* values per 16-byte vector */
    constexpr int MAX_VECS = (KEY_FLOATS / EPV + THREADS - 1) / THREADS;
    extern __shared__ float4 smem4[];
    const partial_shape sh(a.n_heads, a.n_kv_heads, a.head_dim);
    const int G = sh.G, D = a.head_dim, D4 = sh.D4, stride = sh.stride, kvd = a.n_kv_heads * D;
    float *qs = (float *)smem4, *S = qs + sh.G8 * D4, *ks = S + G * CHUNK;
    float *m_run = ks + sh.chunk * stride, *l_run = m_run + G, *scale = l_run + G;
    int r = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
    int pos = a.positions[r], P = a.positions_per_slot;
    int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    int lo = first + s * a.split_len, hi = min(pos + 1, lo + a.split_len);
    const float *q = a.q + ((size_t)r * a.n_heads + (size_t)kvh * G) * D;
    for (int e = tid; e < sh.G8 * D4; e += THREADS) {
        int g = e / D4, d = e - g * D4;
        qs[e] = g < G && d < D ? q[g * D + d] : 0.0f;
    }
    if (tid < G) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0;
    }
    const KV *K = (const KV *)a.k_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    const KV *V = (const KV *)a.v_cache + (size_t)a.slots[r] * P * kvd + kvh * D;
    const bool vec = D % EPV == 0; /* else value by value, D4 - D zeros per row */
    const int vpr = D / EPV, quads = G * (D4 / 4);
    /* keys c0 .. c0 + n - 1 of the cache into registers, or into the staging rows */
    auto fetch = [&](const KV *base, int c0, int n, uint4 (&reg)[MAX_VECS]) {
#pragma unroll
        for (int j = 0; j < MAX_VECS; j++) {
            int v = tid + j * THREADS;
            if (vec && v < n * vpr) {
                int i = v / vpr;
                reg[j] = *(const uint4 *)(base + (size_t)((c0 + i) % P) * kvd + (v - i * vpr) * EPV);
            }
        }
    };
    auto stage = [&](const KV *base, int c0, int n, const uint4 (&reg)[MAX_VECS]) {
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
    };
    float4 acc[MAX_QUADS];
#pragma unroll
    for (int j = 0; j < MAX_QUADS; j++)
        acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float inv_scale = sqrtf((float)D);
    int lane = tid % warpSize, warp = tid / warpSize, warps = THREADS / warpSize;
    for (int c0 = lo; c0 < hi; c0 += sh.chunk) {
        int n = min(sh.chunk, hi - c0);
        uint4 reg[MAX_VECS];
        fetch(K, c0, n, reg);
        stage(K, c0, n, reg);
        fetch(V, c0, n, reg); /* in flight during the scores */
        __syncthreads();      /* keys staged (and q, on the first chunk) */
        int key = tid % CHUNK;
        if (key < n) {
            const float *k = ks + key * stride;
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
        __syncthreads(); /* scores written, keys no longer needed */
        stage(V, c0, n, reg);
        for (int g = warp; g < G; g += warps) { /* online softmax, one warp per head */
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
        __syncthreads(); /* probabilities and values ready */
#pragma unroll
        for (int j = 0; j < MAX_QUADS; j++) {
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
    size_t base = ((size_t)r * a.n_heads + (size_t)kvh * G) * a.splits + s;
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
    if (tid < G) {
        a.part_ml[2 * (base + (size_t)tid * a.splits)] = m_run[tid];
        a.part_ml[2 * (base + (size_t)tid * a.splits) + 1] = l_run[tid];
    }
}

/* Partials on the matrix cores, for bf16 caches (the float kernel above
 * serves float caches and head shapes beyond these limits). Products keep
 * float precision: q and the probabilities enter as sums of three bf16
 * parts (x = hi + mid + lo, each the bf16 rounding of what the earlier
 * parts leave), the cached keys and values are bf16 already, so every
 * product of parts is exact and only the sums round, in the matrix cores'
 * fixed order rather than the scalar one.
 *
 * 128 threads take the split's keys in chunks of 64:
 *  - scores: warp w multiplies key tile w (16 keys, pieces straight from
 *    the cache) by the group's query heads (up to 16, the parts staged in
 *    shared memory) over the head's width, 32 at a time.
 *  - softmax: the group's heads share the 128 threads (16 a head for
 *    gpt-oss's 8, up to a warp), each taking pairs of keys, and keep the
 *    running maximum and sum in registers; the probabilities' parts go to
 *    shared memory as bf16 rows, keys contiguous. The heads that only pad
 *    the group to 16 do nothing: their columns of the products are never
 *    stored, and their parts stay the zeros written once.
 *  - values: warp w takes output tiles of 16 dimensions by the 16 heads, the
 *    transposed values gathered from the chunk's rows (staged in shared
 *    memory through registers while the scores run; rows of an odd number
 *    of words, so a gather hits 32 banks).
 * The keys and values of a chunk are loaded a chunk ahead. The kernel is
 * bound by its instructions more than by its memory (issue slots 66% busy
 * at B=256, ctx 1024, before the economies here), hence their economy. */
constexpr int MMA_CHUNK = 64, MMA_HEADS = 16, MMA_MAX_D = 64, PARTS = 3;
constexpr int MMA_VECS = MMA_CHUNK * (MMA_MAX_D / 8) / THREADS; /* a thread's 16-byte value loads */
constexpr int MMA_OUT_TILES = MMA_MAX_D / 16 / (THREADS / GPTOSS_WARP_MAX); /* per warp */
constexpr int MMA_KEY_TILES = MMA_CHUNK / 16 / (THREADS / GPTOSS_WARP_MAX);
constexpr int64_t MMA_GRID_BLOCKS = 8192; /* about 12 waves of resident blocks on an H100: a short tail */

struct mma_shape {
    int G, D8, DK, QS, VS, SS;
    __host__ __device__ mma_shape(int n_heads, int n_kv_heads, int D) {
        G = n_heads / n_kv_heads;
        D8 = (D + 7) / 8 * 8;
        DK = (D + 31) / 32 * 32;
        QS = (DK + 63) / 64 * 64 + 32; /* 64 bytes past a multiple of 128: adjacent rows' reads miss */
        VS = D8 + 2;                   /* an odd number of words: a transposed gather hits 32 banks */
        SS = MMA_HEADS + 1;
    }
    /* bytes: q parts [PARTS][16][QS], probability parts [PARTS][16][64 + 32],
     * values [64][VS] (bf16), scores [64][SS] and the heads' rescale [16] (float) */
    __host__ __device__ size_t q_bytes() const { return (size_t)PARTS * MMA_HEADS * QS * 2; }
    __host__ __device__ size_t p_bytes() const { return (size_t)PARTS * MMA_HEADS * (MMA_CHUNK + 32) * 2; }
    __host__ __device__ size_t v_bytes() const { return ((size_t)MMA_CHUNK * VS * 2 + 15) / 16 * 16; }
    __host__ __device__ size_t bytes() const {
        return q_bytes() + p_bytes() + v_bytes() + ((size_t)MMA_CHUNK * SS + MMA_HEADS) * 4;
    }
    bool fits() const { return G <= MMA_HEADS && D8 <= MMA_MAX_D && bytes() <= 48 * 1024; }
};

/* the bf16 roundings (to nearest even) of a and b, a in the low half:
 * NVIDIA converts a pair in one instruction */
__device__ __forceinline__ uint32_t bf16x2_bits(float a, float b) {
#if defined(GPTOSS_MMA_NVIDIA)
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
#else
    return gptoss_bf16_bits(a) | (uint32_t)gptoss_bf16_bits(b) << 16;
#endif
}

/* a and b as three bf16 parts each, hi + mid + lo, part i's pair in p[i] (a low) */
__device__ __forceinline__ void split3x2(float a, float b, uint32_t (&p)[PARTS]) {
    for (int i = 0; i < PARTS; i++) {
        p[i] = bf16x2_bits(a, b);
        a -= gptoss_bf16_float((uint16_t)(p[i] & 0xffffu));
        b -= gptoss_bf16_float((uint16_t)(p[i] >> 16));
    }
}

/* FIXED_G, FIXED_D: the group and head width when the launch knows them at
 * compile time (gpt-oss's 8 of 64, whose bounds and branches then fold
 * away), else 0. Six blocks per multiprocessor for the fixed shape (80
 * registers, no spills; five ran 2% slower, seven spilled and ran 4%
 * slower), five for the general one (96 registers). A block takes splits
 * z * spb .. + spb - 1 of its row and KV head one after another (spb =
 * splits / gridDim.z rounded up), each computed as a block of its own
 * would, so q is staged once for them. */
template <int FIXED_G, int FIXED_D>
__global__ void GPTOSS_LAUNCH_BOUNDS(THREADS, FIXED_G ? 6 : 5) attention_mma_kernel(gptoss_attention_args a) {
    constexpr int P = tile16::PIECES, PS = MMA_CHUNK + 32;
    extern __shared__ float4 smem4[];
    const mma_shape sh = FIXED_G ? mma_shape(FIXED_G, 1, FIXED_D) : mma_shape(a.n_heads, a.n_kv_heads, a.head_dim);
    const int G = sh.G, D = FIXED_D ? FIXED_D : a.head_dim, kvd = a.n_kv_heads * D, VS = sh.VS, SS = sh.SS;
    const int halves = G > 8 ? 2 : 1; /* the heads' n8 products that hold a live head */
    uint16_t *qs = (uint16_t *)smem4, *ps = qs + sh.q_bytes() / 2, *vs = ps + sh.p_bytes() / 2;
    float *S = (float *)(vs + sh.v_bytes() / 2), *rescale = S + MMA_CHUNK * SS;
    const int r = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int lane = tid % warpSize, warp = tid / warpSize, warps = THREADS / warpSize;
    const int pos = a.positions[r], Pn = a.positions_per_slot;
    const int first = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    const int spb = (a.splits + gridDim.z - 1) / gridDim.z, s_begin = blockIdx.z * spb;
    const int s_end = min(a.splits, s_begin + spb);
    /* split s's keys: [split_lo(s), split_hi(s)), empty past the row's position */
    auto split_lo = [&](int s) { return first + s * a.split_len; };
    auto split_hi = [&](int s) { return min(pos + 1, split_lo(s) + a.split_len); };
    const bf16 *K = (const bf16 *)a.k_cache + (size_t)a.slots[r] * Pn * kvd + kvh * D;
    const bf16 *V = (const bf16 *)a.v_cache + (size_t)a.slots[r] * Pn * kvd + kvh * D;
    const bool vec = D % 8 == 0;
    const int kofs = tile16::piece_k(lane), octets = sh.D8 / 8;
    /* the softmax's threads: HL a head (the group rounded up to a power of
     * two shares the 128), thread seg of head h taking keys 2 seg, + 1, + 2 HL, ... */
    int group = 1;
    while (group < G)
        group *= 2;
    const int HL = min(32, THREADS / group), h = tid / HL, seg = tid % HL;
    const bool live = h < G;
    /* A chunk's values (rows past n as zeros) and the pieces of the warp's
     * key tiles over the head's width, loaded a chunk ahead: the next chunk's
     * are in flight while this one is multiplied, and the first chunk's
     * while q is staged. */
    uint4 vreg[MMA_VECS];
    uint4 kp[MMA_KEY_TILES][MMA_MAX_D / 32][P];
    /* key c0 + key's cache row, c0 = c0 % Pn: a chunk's n keys, no more than
     * the ring holds, wrap at most once (one modulo a chunk, not one a key) */
    auto cache_row = [&](int c0, int key) { return (size_t)(c0 + key < Pn ? c0 + key : c0 + key - Pn) * kvd; };
    auto load_values = [&](int c0, int n) {
        c0 %= Pn;
#pragma unroll
        for (int j = 0; j < MMA_VECS; j++) {
            int v = tid + j * THREADS, key = v / octets, d = 8 * (v - key * octets);
            vreg[j] = make_uint4(0, 0, 0, 0);
            if (key < n && key < MMA_CHUNK)
                vreg[j] = load_bf16x8(V + cache_row(c0, key), d, D, vec);
        }
    };
    auto load_keys = [&](int c0, int n) {
        c0 %= Pn;
#pragma unroll
        for (int u = 0; u < MMA_KEY_TILES; u++) {
            const int kt = warp + u * warps;
            if (kt >= MMA_CHUNK / 16)
                break;
#pragma unroll
            for (int j = 0; j < P; j++) {
                int key = 16 * kt + tile16::piece_row(lane, j);
                const bf16 *krow = key < n ? K + cache_row(c0, key) : nullptr;
#pragma unroll
                for (int c = 0; c < MMA_MAX_D / 32; c++)
                    if (32 * c < sh.DK)
                        kp[u][c][j] = krow ? load_bf16x8(krow, 32 * c + kofs, D, vec) : make_uint4(0, 0, 0, 0);
            }
        }
    };
    if (s_begin < s_end && split_lo(s_begin) < split_hi(s_begin)) {
        const int lo = split_lo(s_begin), n = min(MMA_CHUNK, split_hi(s_begin) - lo);
        load_values(lo, n);
        load_keys(lo, n);
    }
    /* q's parts, zeros for the padding heads and past D; the padding heads' probabilities zeros */
    const float *q = a.q + ((size_t)r * a.n_heads + (size_t)kvh * G) * D;
    for (int e = tid; e < MMA_HEADS * sh.DK / 2; e += THREADS) {
        const int g = e / (sh.DK / 2), d = 2 * (e - g * (sh.DK / 2));
        uint32_t part[PARTS] = {};
        if (g < G)
            split3x2(d < D ? q[g * D + d] : 0.0f, d + 1 < D ? q[g * D + d + 1] : 0.0f, part);
        for (int i = 0; i < PARTS; i++)
            *(uint32_t *)(qs + (i * MMA_HEADS + g) * sh.QS + d) = part[i];
    }
    for (int e = tid; e < PARTS * (MMA_HEADS - G) * (PS / 2); e += THREADS) {
        const int row = e / (PS / 2), i = row / (MMA_HEADS - G), g = G + row % (MMA_HEADS - G);
        *(uint32_t *)(ps + (i * MMA_HEADS + g) * PS + 2 * (e % (PS / 2))) = 0;
    }
    if (tid >= G && tid < MMA_HEADS)
        rescale[tid] = 0.0f;
    const int out_tiles = (sh.D8 + 15) / 16;
    const float inv_scale = sqrtf((float)D);
    __syncthreads(); /* q's parts staged */

    for (int s = s_begin; s < s_end; s++) {
        const int lo = split_lo(s), hi = split_hi(s);
        float m_run = -INFINITY, l_run = 0.0f; /* head h's, in its threads */
        tile16::acc_t acc[MMA_OUT_TILES];
#pragma unroll
        for (int t = 0; t < MMA_OUT_TILES; t++)
#pragma unroll
            for (int i = 0; i < tile16::N; i++)
                acc[t][i] = 0.0f;
        for (int c0 = lo; c0 < hi; c0 += MMA_CHUNK) {
            /* the chunk after this one: the split's next, or the next split's first */
            int next = c0 + MMA_CHUNK, next_hi = hi;
            if (next >= hi && s + 1 < s_end) {
                next = split_lo(s + 1);
                next_hi = split_hi(s + 1);
            }
            const int n = min(MMA_CHUNK, hi - c0);
            /* scores of key tiles w, w + warps, ... */
            tile16::acc_t st[MMA_KEY_TILES];
#pragma unroll
            for (int u = 0; u < MMA_KEY_TILES; u++) {
                const int kt = warp + u * warps;
#pragma unroll
                for (int i = 0; i < tile16::N; i++)
                    st[u][i] = 0.0f;
                if (kt >= MMA_CHUNK / 16)
                    break;
#pragma unroll
                for (int c = 0; c < MMA_MAX_D / 32; c++) {
                    if (32 * c >= sh.DK)
                        break;
#pragma unroll
                    for (int i = 0; i < PARTS; i++) {
                        uint4 qp[P] = {};
#pragma unroll
                        for (int j = 0; j < P; j++)
                            if (j < halves)
                                qp[j] = *(const uint4 *)(qs + (i * MMA_HEADS + tile16::piece_row(lane, j)) * sh.QS +
                                                         32 * c + kofs);
                        tile16::mma32(st[u], kp[u][c], qp, lane, halves);
                    }
                }
            }
            if (next < next_hi)
                load_keys(next, min(MMA_CHUNK, next_hi - next));
            __syncthreads(); /* the previous chunk's values and probabilities are used */
#pragma unroll
            for (int u = 0; u < MMA_KEY_TILES; u++) {
                const int kt = warp + u * warps;
                if (kt >= MMA_CHUNK / 16)
                    break;
#pragma unroll
                for (int i = 0; i < tile16::N; i++) {
                    int row, col;
                    if (tile16::coords(i, lane, row, col) && col < G)
                        S[(16 * kt + row) * SS + col] = 16 * kt + row < n ? st[u][i] / inv_scale : -INFINITY;
                }
            }
#pragma unroll
            for (int j = 0; j < MMA_VECS; j++) {
                int v = tid + j * THREADS, key = v / octets, d = 8 * (v - key * octets);
                if (key < MMA_CHUNK) {
                    uint32_t *dst = (uint32_t *)(vs + key * VS + d);
                    dst[0] = vreg[j].x;
                    dst[1] = vreg[j].y;
                    dst[2] = vreg[j].z;
                    dst[3] = vreg[j].w;
                }
            }
            if (next < next_hi)
                load_values(next, min(MMA_CHUNK, next_hi - next));
            __syncthreads(); /* scores and values staged */
            { /* every thread reaches the shuffles; only the live heads' read and write */
                float m = -INFINITY;
                if (live)
                    for (int k = 2 * seg; k < MMA_CHUNK; k += 2 * HL)
                        m = fmaxf(m, fmaxf(S[k * SS + h], S[(k + 1) * SS + h]));
                for (int off = 1; off < HL; off *= 2)
                    m = fmaxf(m, __shfl_xor(m, off));
                const float m_new = fmaxf(m_run, m);
                float sum = 0.0f;
                if (live)
                    for (int k = 2 * seg; k < MMA_CHUNK; k += 2 * HL) {
                        const float p0 = expf(S[k * SS + h] - m_new), p1 = expf(S[(k + 1) * SS + h] - m_new);
                        sum += p0;
                        sum += p1;
                        uint32_t part[PARTS];
                        split3x2(p0, p1, part);
                        for (int i = 0; i < PARTS; i++)
                            *(uint32_t *)(ps + (i * MMA_HEADS + h) * PS + k) = part[i];
                    }
                for (int off = 1; off < HL; off *= 2)
                    sum += __shfl_xor(sum, off);
                if (live) {
                    const float f = expf(m_run - m_new);
                    l_run = l_run * f + sum;
                    m_run = m_new;
                    if (seg == 0)
                        rescale[h] = f;
                }
            }
            __syncthreads(); /* probabilities and rescales staged */
#pragma unroll
            for (int t = 0; t < MMA_OUT_TILES; t++) {
                const int dt = warp + t * warps;
                if (dt >= out_tiles)
                    break;
#pragma unroll
                for (int i = 0; i < tile16::N; i++) {
                    int row, col;
                    tile16::coords(i, lane, row, col);
                    acc[t][i] *= rescale[col];
                }
                for (int kc = 0; kc < MMA_CHUNK; kc += 32) {
                    uint4 vp[P], pp[P];
#pragma unroll
                    for (int j = 0; j < P; j++) { /* values transposed: 8 keys of one dimension */
                        int d = 16 * dt + tile16::piece_row(lane, j), k = kc + kofs;
                        uint32_t w[4];
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            w[e] = d < sh.D8 ? vs[(k + 2 * e) * VS + d] | (uint32_t)vs[(k + 2 * e + 1) * VS + d] << 16
                                             : 0;
                        vp[j] = make_uint4(w[0], w[1], w[2], w[3]);
                    }
#pragma unroll
                    for (int i = 0; i < PARTS; i++) {
#pragma unroll
                        for (int j = 0; j < P; j++)
                            if (j < halves)
                                pp[j] = *(const uint4 *)(ps + (i * MMA_HEADS + tile16::piece_row(lane, j)) * PS +
                                                         kc + kofs);
                        tile16::mma32(acc[t], vp, pp, lane, halves);
                    }
                }
            }
        }
        if (a.splits == 1) { /* the row's only split: fold it here (split_fold), no combine */
            __syncthreads();   /* the last chunk's scores are read */
            if (seg == 0 && live) {
                S[2 * h] = m_run;
                S[2 * h + 1] = l_run;
            }
            __syncthreads();
#pragma unroll
            for (int t = 0; t < MMA_OUT_TILES; t++) {
                const int dt = warp + t * warps;
                if (dt >= out_tiles)
                    break;
#pragma unroll
                for (int i = 0; i < tile16::N; i++) {
                    int row, col;
                    if (tile16::coords(i, lane, row, col) && 16 * dt + row < D && col < G) {
                        const int head = kvh * G + col;
                        const float sink = a.sinks[head];
                        split_fold fold(sink, fmaxf(sink, S[2 * col]));
                        fold.add(S[2 * col], S[2 * col + 1], acc[t][i]);
                        fold.store(a, r, head, 16 * dt + row);
                    }
                }
            }
            return;
        }
        const size_t base = ((size_t)r * a.n_heads + (size_t)kvh * G) * a.splits + s;
#pragma unroll
        for (int t = 0; t < MMA_OUT_TILES; t++) {
            const int dt = warp + t * warps;
            if (dt >= out_tiles)
                break;
#pragma unroll
            for (int i = 0; i < tile16::N; i++) {
                int row, col;
                if (tile16::coords(i, lane, row, col) && 16 * dt + row < D && col < G)
                    a.part_o[(base + (size_t)col * a.splits) * D + 16 * dt + row] = acc[t][i];
            }
        }
        if (seg == 0 && live) {
            a.part_ml[2 * (base + (size_t)h * a.splits)] = m_run;
            a.part_ml[2 * (base + (size_t)h * a.splits) + 1] = l_run;
        }
    }
}

/* Combine: 64 threads per head, 4 heads per block; every thread folds the
 * splits itself (a few dozen values, read by all 64 from cache), so the
 * block needs no shared memory and no barrier. */
constexpr int COMBINE_LANES = 64, COMBINE_HEADS = 4;

__global__ void __launch_bounds__(COMBINE_LANES * COMBINE_HEADS) attention_combine_kernel(gptoss_attention_args a) {
    int r = blockIdx.x, h = blockIdx.y * COMBINE_HEADS + threadIdx.x / COMBINE_LANES, D = a.head_dim;
    if (h >= a.n_heads)
        return;
    size_t base = ((size_t)r * a.n_heads + h) * a.splits;
    const float *ml = a.part_ml + 2 * base;
    float sink = a.sinks[h];
    float M = sink;
    for (int s = 0; s < a.splits; s++)
        M = fmaxf(M, ml[2 * s]);
    for (int d = threadIdx.x % COMBINE_LANES; d < D; d += COMBINE_LANES) {
        split_fold fold(sink, M);
        for (int s = 0; s < a.splits; s++)
            fold.add(ml[2 * s], ml[2 * s + 1], a.part_o[(base + s) * D + d]);
        fold.store(a, r, h, d);
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
    return G <= MAX_G && G * head_dim <= MAX_GD && head_dim <= MAX_HEAD_DIM &&
           partial_shape(n_heads, n_kv_heads, head_dim).floats() * sizeof(float) <= 48 * 1024;
}

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
    dim3 partial_grid(a->rows, a->n_kv_heads, a->splits);
    dim3 combine_grid(a->rows, (a->n_heads + COMBINE_HEADS - 1) / COMBINE_HEADS);
    size_t shared = partial_shape(a->n_heads, a->n_kv_heads, a->head_dim).floats() * sizeof(float);
    const mma_shape mma(a->n_heads, a->n_kv_heads, a->head_dim);
    if (kv_bf16 && mma.fits()) {
        /* a block takes several splits where the grid would hold more than
         * MMA_GRID_BLOCKS: q is staged once for them (the bits do not change) */
        const int64_t blocks = (int64_t)a->rows * a->n_kv_heads * a->splits;
        const int spb = (int)std::max<int64_t>(1, std::min<int64_t>(a->splits, blocks / MMA_GRID_BLOCKS));
        dim3 grid(a->rows, a->n_kv_heads, (a->splits + spb - 1) / spb);
        if (mma.G == 8 && a->head_dim == 64)
            hipLaunchKernelGGL((attention_mma_kernel<8, 64>), grid, dim3(THREADS), mma.bytes(), stream, *a);
        else
            hipLaunchKernelGGL((attention_mma_kernel<0, 0>), grid, dim3(THREADS), mma.bytes(), stream, *a);
        if (a->splits == 1) /* the partials were the outputs */
            return hipGetLastError();
    } else if (kv_bf16)
        hipLaunchKernelGGL(attention_partial_kernel<bf16>, partial_grid, dim3(THREADS), shared, stream, *a);
    else
        hipLaunchKernelGGL(attention_partial_kernel<float>, partial_grid, dim3(THREADS), shared, stream, *a);
    hipLaunchKernelGGL(attention_combine_kernel, combine_grid, dim3(COMBINE_LANES * COMBINE_HEADS), 0, stream, *a);
    return hipGetLastError();
}
