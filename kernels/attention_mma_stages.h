/* The pieces of attention's matrix-core partials (attention_mma.h runs
 * them in turn), a part of attention.hip: the tiles and the block's shared
 * memory (mma_shape), q and the probabilities as three bf16 parts, the
 * loads a chunk ahead, the scores, the online softmax, the values' gather
 * and the two epilogues (the row's only split folded, or a split's partial
 * sums for the combine). */
#ifndef GPTOSS_KERNELS_ATTENTION_MMA_STAGES_H
#define GPTOSS_KERNELS_ATTENTION_MMA_STAGES_H

#include "attention_combine.h"
#include "attention_common.h"
#include "matrix_core.h"

namespace {

constexpr int MMA_CHUNK = 64, MMA_HEADS = 16, MMA_MAX_D = 64, PARTS = 3;
constexpr int MMA_VECS = MMA_CHUNK * (MMA_MAX_D / 8) / THREADS; /* a thread's 16-byte value loads */
constexpr int MMA_OUT_TILES = MMA_MAX_D / 16 / (THREADS / GPTOSS_WARP_MAX); /* per warp */
constexpr int MMA_KEY_TILES = MMA_CHUNK / 16 / (THREADS / GPTOSS_WARP_MAX);

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

/* A KV head's cached keys or values in a slot's ring of Pn positions,
 * rows kvd values apart, each D wide (vec: D a multiple of 8, so a row's
 * octets are 16-byte loads) */
struct cached_head {
    const bf16 *base;
    int Pn, kvd, D;
    bool vec;
    /* key c0 + key's row, c0 = c0 % Pn: a chunk's n keys, no more than the
     * ring holds, wrap at most once (one modulo a chunk, not one a key) */
    __device__ __forceinline__ const bf16 *row(int c0, int key) const {
        return base + (size_t)(c0 + key < Pn ? c0 + key : c0 + key - Pn) * kvd;
    }
};

/* Where a thread works in the matrix-core tiles: its warp's tiles warp,
 * + warps, ..., its lane's rows and k offset (tile16) */
struct tile_thread {
    int lane, warp, warps, kofs;
};

/* A thread's share of the softmax: the group rounded up to a power of two
 * shares the 128 threads, HL a head (up to a warp), thread seg of head h
 * taking keys 2 seg, + 1, + 2 HL, ... (live: h one of the group's heads,
 * not padding) */
struct softmax_thread {
    int h, seg, HL;
    bool live;
    __device__ __forceinline__ softmax_thread(int G, int tid) {
        int group = 1;
        while (group < G)
            group *= 2;
        HL = min(32, THREADS / group), h = tid / HL, seg = tid % HL;
        live = h < G;
    }
};

/* q's parts into qs [PARTS][16][QS], zeros for the padding heads and past
 * D; the padding heads' probability parts zeros, their rescale 0 */
__device__ __forceinline__ void stage_q_parts(const float *q, const mma_shape &sh, int G, int D, uint16_t *qs,
                                              uint16_t *ps, float *rescale) {
    constexpr int PS = MMA_CHUNK + 32;
    const int tid = threadIdx.x;
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
}

/* A chunk's values, rows past n as zeros, into registers */
__device__ __forceinline__ void load_values(uint4 (&vreg)[MMA_VECS], const cached_head &V, int c0, int n, int octets) {
    const int tid = threadIdx.x;
    c0 %= V.Pn;
#pragma unroll
    for (int j = 0; j < MMA_VECS; j++) {
        int v = tid + j * THREADS, key = v / octets, d = 8 * (v - key * octets);
        vreg[j] = make_uint4(0, 0, 0, 0);
        if (key < n && key < MMA_CHUNK)
            vreg[j] = load_bf16x8(V.row(c0, key), d, V.D, V.vec);
    }
}

/* The pieces of the warp's key tiles over the head's width, rows past n as zeros */
__device__ __forceinline__ void load_keys(uint4 (&kp)[MMA_KEY_TILES][MMA_MAX_D / 32][tile16::PIECES],
                                          const cached_head &K, int c0, int n, const mma_shape &sh,
                                          const tile_thread &tt) {
    c0 %= K.Pn;
#pragma unroll
    for (int u = 0; u < MMA_KEY_TILES; u++) {
        const int kt = tt.warp + u * tt.warps;
        if (kt >= MMA_CHUNK / 16)
            break;
#pragma unroll
        for (int j = 0; j < tile16::PIECES; j++) {
            int key = 16 * kt + tile16::piece_row(tt.lane, j);
            const bf16 *krow = key < n ? K.row(c0, key) : nullptr;
#pragma unroll
            for (int c = 0; c < MMA_MAX_D / 32; c++)
                if (32 * c < sh.DK)
                    kp[u][c][j] = krow ? load_bf16x8(krow, 32 * c + tt.kofs, K.D, K.vec) : make_uint4(0, 0, 0, 0);
        }
    }
}

/* The scores of the warp's key tiles (16 keys by the 16 heads), over the
 * head's width 32 at a time, q's parts one after another */
__device__ __forceinline__ void key_scores(tile16::acc_t (&st)[MMA_KEY_TILES],
                                           const uint4 (&kp)[MMA_KEY_TILES][MMA_MAX_D / 32][tile16::PIECES],
                                           const uint16_t *qs, const mma_shape &sh, int halves, const tile_thread &tt) {
    constexpr int P = tile16::PIECES;
#pragma unroll
    for (int u = 0; u < MMA_KEY_TILES; u++) {
        const int kt = tt.warp + u * tt.warps;
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
                        qp[j] = *(const uint4 *)(qs + (i * MMA_HEADS + tile16::piece_row(tt.lane, j)) * sh.QS + 32 * c +
                                                 tt.kofs);
                tile16::mma32(st[u], kp[u][c], qp, tt.lane, halves);
            }
        }
    }
}

/* The warp's scores, scaled, into S [64][SS]; keys past n -inf */
__device__ __forceinline__ void stage_scores(const tile16::acc_t (&st)[MMA_KEY_TILES], int n, float inv_scale, float *S,
                                             int SS, int G, const tile_thread &tt) {
#pragma unroll
    for (int u = 0; u < MMA_KEY_TILES; u++) {
        const int kt = tt.warp + u * tt.warps;
        if (kt >= MMA_CHUNK / 16)
            break;
#pragma unroll
        for (int i = 0; i < tile16::N; i++) {
            int row, col;
            if (tile16::coords(i, tt.lane, row, col) && col < G)
                S[(16 * kt + row) * SS + col] = 16 * kt + row < n ? st[u][i] / inv_scale : -INFINITY;
        }
    }
}

/* The chunk's values from registers into vs [64][VS] */
__device__ __forceinline__ void stage_values(const uint4 (&vreg)[MMA_VECS], uint16_t *vs, int VS, int octets) {
    const int tid = threadIdx.x;
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
}

/* The online softmax of head h over the chunk's scores: the running max
 * and sum (registers of the head's threads) updated, the probabilities'
 * parts into ps as bf16 rows, keys contiguous, and the factor the head's
 * earlier outputs take into rescale[h]. Every thread reaches the
 * shuffles; only the live heads' read and write. */
__device__ __forceinline__ void online_softmax(float &m_run, float &l_run, const float *S, int SS, uint16_t *ps,
                                               float *rescale, const softmax_thread &sm) {
    constexpr int PS = MMA_CHUNK + 32;
    const int h = sm.h, seg = sm.seg, HL = sm.HL;
    float m = -INFINITY;
    if (sm.live)
        for (int k = 2 * seg; k < MMA_CHUNK; k += 2 * HL)
            m = fmaxf(m, fmaxf(S[k * SS + h], S[(k + 1) * SS + h]));
    for (int off = 1; off < HL; off *= 2)
        m = fmaxf(m, __shfl_xor(m, off));
    const float m_new = fmaxf(m_run, m);
    float sum = 0.0f;
    if (sm.live)
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
    if (sm.live) {
        const float f = expf(m_run - m_new);
        l_run = l_run * f + sum;
        m_run = m_new;
        if (seg == 0)
            rescale[h] = f;
    }
}

/* The values of output tile dt, keys kc .., transposed: piece j holds 8
 * keys of one dimension */
__device__ __forceinline__ void gather_values(uint4 (&vp)[tile16::PIECES], const uint16_t *vs, int VS, int D8, int dt,
                                              int kc, const tile_thread &tt) {
#pragma unroll
    for (int j = 0; j < tile16::PIECES; j++) {
        int d = 16 * dt + tile16::piece_row(tt.lane, j), k = kc + tt.kofs;
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            w[e] = d < D8 ? vs[(k + 2 * e) * VS + d] | (uint32_t)vs[(k + 2 * e + 1) * VS + d] << 16 : 0;
        vp[j] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

/* The row's only split folded into the output as the combine would
 * (split_fold): each head's running max and sum go through S */
__device__ __forceinline__ void fold_only_split(const gptoss_attention_args &a, int r, int kvh, int G, int D,
                                                const tile16::acc_t (&acc)[MMA_OUT_TILES], int out_tiles,
                                                float m_run, float l_run, float *S, const tile_thread &tt,
                                                int h, int seg, bool live) {
    __syncthreads(); /* the last chunk's scores are read */
    if (seg == 0 && live) {
        S[2 * h] = m_run;
        S[2 * h + 1] = l_run;
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < MMA_OUT_TILES; t++) {
        const int dt = tt.warp + t * tt.warps;
        if (dt >= out_tiles)
            break;
#pragma unroll
        for (int i = 0; i < tile16::N; i++) {
            int row, col;
            if (tile16::coords(i, tt.lane, row, col) && 16 * dt + row < D && col < G) {
                const int head = kvh * G + col;
                const float sink = a.sinks[head];
                split_fold fold(sink, fmaxf(sink, S[2 * col]));
                fold.add(S[2 * col], S[2 * col + 1], acc[t][i]);
                fold.store(a, r, head, 16 * dt + row);
            }
        }
    }
}

/* Split s's unnormalised outputs and each head's running max and sum, for the combine */
__device__ __forceinline__ void store_partials(const gptoss_attention_args &a, int r, int kvh, int G, int D, int s,
                                               const tile16::acc_t (&acc)[MMA_OUT_TILES], int out_tiles,
                                               float m_run, float l_run, const tile_thread &tt,
                                               int h, int seg, bool live) {
    const size_t base = ((size_t)r * a.n_heads + (size_t)kvh * G) * a.splits + s;
#pragma unroll
    for (int t = 0; t < MMA_OUT_TILES; t++) {
        const int dt = tt.warp + t * tt.warps;
        if (dt >= out_tiles)
            break;
#pragma unroll
        for (int i = 0; i < tile16::N; i++) {
            int row, col;
            if (tile16::coords(i, tt.lane, row, col) && 16 * dt + row < D && col < G)
                a.part_o[(base + (size_t)col * a.splits) * D + 16 * dt + row] = acc[t][i];
        }
    }
    if (seg == 0 && live) {
        a.part_ml[2 * (base + (size_t)h * a.splits)] = m_run;
        a.part_ml[2 * (base + (size_t)h * a.splits) + 1] = l_run;
    }
}

} // namespace

#endif
