/* Attention's combine (bf16 mode), a part of attention.hip: the splits'
 * partial sums of a (row, head), from either partials kernel
 * (attention_partial.h, attention_mma.h), folded with the head's sink into
 * the output. */
#ifndef GPTOSS_KERNELS_ATTENTION_COMBINE_H
#define GPTOSS_KERNELS_ATTENTION_COMBINE_H

#include "attention_common.h"

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

/* Combine: 64 threads per head, 4 heads per block; every thread folds the
 * splits itself (a few dozen values, read by all 64 from cache), so the
 * block needs no shared memory and no barrier. */
constexpr int COMBINE_LANES = 64, COMBINE_HEADS = 4;

__global__ void __launch_bounds__(COMBINE_LANES * COMBINE_HEADS) attention_combine_kernel(gptoss_attention_args a) {
    int r = blockIdx.x, h = blockIdx.y * COMBINE_HEADS + threadIdx.x / COMBINE_LANES, D = a.head_dim;
    pdl_wait();
    if (h >= a.n_heads)
        return;
    size_t base = ((size_t)r * a.n_heads + h) * a.splits;
    const float *ml = a.part_ml + 2 * base;
    float sink = a.sinks[h];
    float M = sink;
    for (int s = 0; s < a.splits; s++)
        M = fmaxf(M, ml[2 * s]);
    pdl_launch_dependents();
    for (int d = threadIdx.x % COMBINE_LANES; d < D; d += COMBINE_LANES) {
        split_fold fold(sink, M);
        for (int s = 0; s < a.splits; s++)
            fold.add(ml[2 * s], ml[2 * s + 1], a.part_o[(base + s) * D + d]);
        fold.store(a, r, h, d);
    }
}

} // namespace

#endif
