/* RoPE's arithmetic and the KV cache's addressing, shared by rope_kv.hip
 * and the qkv GEMM's fused epilogue (gemm_stream.h), so both give the same bits:
 * half-split pairs (i, i + D/2), the golden's float arithmetic with its
 * cos/sin table; k and v go to the row's slot at position % positions (a
 * ring for windowed layers), in the cache's type. */
#ifndef GPTOSS_KERNELS_ROPE_H
#define GPTOSS_KERNELS_ROPE_H

#include "device.h"
#include "../contract/launchers.h"
#include "../src/core/course_math.h"

/* row r's rotation of the pair (x0, x1) at index i of its head */
__device__ __forceinline__ void rope_rotate(const gptoss_rope_kv_args &a, int r, int i, float x0, float x1,
                                            float &y0, float &y1) {
    const size_t at = (size_t)a.positions[r] * (a.head_dim / 2) + i;
    gptoss_rope_rotate(x0, x1, a.cos[at], a.sin[at], &y0, &y1);
}

/* row r's place in this layer's cache, k and v alike */
__device__ __forceinline__ size_t rope_cache_at(const gptoss_rope_kv_args &a, int r) {
    const int pos = a.positions[r];
    return ((size_t)a.slots[r] * a.positions_per_slot + pos % a.positions_per_slot) * a.n_kv_heads * a.head_dim;
}

/* head h of row r (the query heads, then the key heads): its rotated pair
 * at i stored, a query's in float, a key's in the cache (and the trace) */
template <class KV>
__device__ __forceinline__ void rope_store_pair(const gptoss_rope_kv_args &a, int r, int h, int i, float y0,
                                                float y1) {
    const int D = a.head_dim, half = D / 2;
    if (h < a.n_heads) {
        float *q = a.q + ((size_t)r * a.n_heads + h) * D;
        q[i] = y0;
        q[i + half] = y1;
        return;
    }
    const int off = (h - a.n_heads) * D;
    KV *k = (KV *)a.k_cache + rope_cache_at(a, r) + off;
    k[i] = from_float<KV>(y0);
    k[i + half] = from_float<KV>(y1);
    if (a.k_trace) {
        float *kt = a.k_trace + (size_t)r * a.n_kv_heads * D + off;
        kt[i] = y0;
        kt[i + half] = y1;
    }
}

/* value j (of the row's n_kv_heads * D) of row r into the cache */
template <class KV> __device__ __forceinline__ void rope_store_v(const gptoss_rope_kv_args &a, int r, int j, float v) {
    ((KV *)a.v_cache + rope_cache_at(a, r))[j] = from_float<KV>(v);
}

/* the projection's values (x0, x1) at i and i + D/2 of head h of row r
 * (the query heads, then the key heads, then the value heads) where they
 * go: a query's or key's rotated, a value's as it is */
template <class KV>
__device__ __forceinline__ void rope_store_head_pair(const gptoss_rope_kv_args &a, int r, int h, int i, float x0,
                                                     float x1) {
    const int rotated = a.n_heads + a.n_kv_heads, half = a.head_dim / 2;
    if (h < rotated) {
        float y0, y1;
        rope_rotate(a, r, i, x0, x1, y0, y1);
        rope_store_pair<KV>(a, r, h, i, y0, y1);
    } else {
        const int j = (h - rotated) * a.head_dim + i;
        rope_store_v<KV>(a, r, j, x0);
        rope_store_v<KV>(a, r, j + half, x1);
    }
}

#endif
