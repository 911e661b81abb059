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

#include "attention_mma_stages.h"

namespace {

/* FIXED_G, FIXED_D: the group and head width when the launch knows them at
 * compile time (gpt-oss's 8 of 64, whose bounds and branches then fold
 * away), else 0. Six blocks per multiprocessor for the fixed shape (80
 * registers, no spills; five ran 2% slower, seven spilled and ran 4%
 * slower), five for the general one (96 registers). A block takes splits
 * z * spb .. + spb - 1 of its row and KV head one after another (spb =
 * splits / gridDim.z rounded up), each computed as a block of its own
 * would, so q is staged once for them. The kernel runs the stages of
 * attention_mma_stages.h in turn; the values' products stay in its body
 * (as a function, the general kernel's spills grew from 24 to 68 bytes). */
template <int FIXED_G, int FIXED_D>
__global__ void GPTOSS_LAUNCH_BOUNDS(THREADS, FIXED_G ? 6 : 5) attention_mma_kernel(gptoss_attention_args a) {
    constexpr int P = tile16::PIECES, PS = MMA_CHUNK + 32;
    const mma_shape sh = FIXED_G ? mma_shape(FIXED_G, 1, FIXED_D) : mma_shape(a.n_heads, a.n_kv_heads, a.head_dim);
    const int G = sh.G, D = FIXED_D ? FIXED_D : a.head_dim, kvd = a.n_kv_heads * D, VS = sh.VS, SS = sh.SS;
    const int halves = G > 8 ? 2 : 1; /* the heads' n8 products that hold a live head */
    uint16_t *qs = (uint16_t *)smem4, *ps = qs + sh.q_bytes() / 2, *vs = ps + sh.p_bytes() / 2;
    float *S = (float *)(vs + sh.v_bytes() / 2), *rescale = S + MMA_CHUNK * SS;
    const int r = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int lane = tid % warpSize, warp = tid / warpSize, warps = THREADS / warpSize;
    pdl_wait();
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
    const softmax_thread sm(G, tid);
    const cached_head keys{K, Pn, kvd, D, vec}, values{V, Pn, kvd, D, vec};
    const tile_thread tt{lane, warp, warps, kofs};
    /* A chunk's values and the pieces of the warp's key tiles, loaded a
     * chunk ahead: the next chunk's are in flight while this one is
     * multiplied, and the first chunk's while q is staged. */
    uint4 vreg[MMA_VECS];
    uint4 kp[MMA_KEY_TILES][MMA_MAX_D / 32][P];
    if (s_begin < s_end && split_lo(s_begin) < split_hi(s_begin)) {
        const int lo = split_lo(s_begin), n = min(MMA_CHUNK, split_hi(s_begin) - lo);
        load_values(vreg, values, lo, n, octets);
        load_keys(kp, keys, lo, n, sh, tt);
    }
    stage_q_parts(a.q + ((size_t)r * a.n_heads + (size_t)kvh * G) * D, sh, G, D, qs, ps, rescale);
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
            tile16::acc_t st[MMA_KEY_TILES];
            key_scores(st, kp, qs, sh, halves, tt);
            if (next < next_hi)
                load_keys(kp, keys, next, min(MMA_CHUNK, next_hi - next), sh, tt);
            __syncthreads(); /* the previous chunk's values and probabilities are used */
            stage_scores(st, n, inv_scale, S, SS, G, tt);
            stage_values(vreg, vs, VS, octets);
            if (next < next_hi)
                load_values(vreg, values, next, min(MMA_CHUNK, next_hi - next), octets);
            __syncthreads(); /* scores and values staged */
            online_softmax(m_run, l_run, S, SS, ps, rescale, sm);
            __syncthreads(); /* probabilities and rescales staged */
#pragma unroll
            for (int t = 0; t < MMA_OUT_TILES; t++) { /* output tiles warp, + warps, ...: 16 dimensions by the 16 heads */
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
                    gather_values(vp, vs, VS, sh.D8, dt, kc, tt);
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
        if (s + 1 == s_end)
            pdl_launch_dependents();
        if (a.splits == 1) { /* the row's only split: fold it here, no combine */
            fold_only_split(a, r, kvh, G, D, acc, out_tiles, m_run, l_run, S, tt, sm.h, sm.seg, sm.live);
            return;
        }
        store_partials(a, r, kvh, G, D, s, acc, out_tiles, m_run, l_run, tt, sm.h, sm.seg, sm.live);
    }
}

} // namespace

#endif
