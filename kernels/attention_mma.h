/* Attention's partials on the matrix cores (bf16 mode), a part of
 * attention.hip, for bf16 caches (attention_partial.h's float kernel
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
#ifndef GPTOSS_KERNELS_ATTENTION_MMA_H
#define GPTOSS_KERNELS_ATTENTION_MMA_H

#include "attention_combine.h"
#include "attention_common.h"
#include "matrix_core.h"

namespace {

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

} // namespace

#endif
