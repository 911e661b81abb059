/* Attention of each row over its slot's cached keys, with the per-head sink
 * and the sliding window (even layers; key t is visible from position p
 * when p - t < window).
 *
 * This file is the dispatch: it picks the kernels, each family in a header
 * of its own (what they share: attention_common.h), all included here as
 * one translation unit, whose gfx90a assembly the tests read.
 *
 * bf16 mode, flash-decoding style:
 *
 *  1. partials: one block per (row, KV head, split of the visible keys), or
 *     on the matrix cores, where the grid would be large, per a few of the
 *     row's splits taken one after another.
 *     The G = Hq / Hkv query heads sharing the KV head are done together,
 *     so each cached key and value is read once per row. Keys go by in
 *     chunks with an online softmax (running max and sum per head): on the
 *     matrix cores for bf16 caches (attention_mma.h: up to 16 heads of up
 *     to 64 values per KV head, gpt-oss's 8 of 64), else with float products
 *     in chunks of up to 64 keys, fewer for heads wider than 64
 *     (attention_partial.h).
 *  2. combine (attention_combine.h): 64 threads per (row, head) fold the
 *     splits and the sink logit into one denominator and write the output
 *     (and its bf16 copy, the o projection's input in bf16 mode). When the
 *     step has one split (windowed layers, and the first split_len positions
 *     of the others) the matrix-core partials fold their own by the same
 *     arithmetic and the combine does not run: a launch and the partials'
 *     round trip through memory fewer.
 *
 * Scores are float dot products (on the matrix cores, of float-precise
 * parts: attention_mma.h); the softmax is the online form of the course's,
 * so values differ from the golden's by rounding only.
 *
 * fp32 mode (attention_exact.h), the golden's order exactly: one block per
 * (row, head), three passes over the visible keys. */
#include <algorithm>

#include "attention_combine.h"
#include "attention_exact.h"
#include "attention_mma.h"
#include "attention_partial.h"

/* the matrix-core grid's most blocks before a block takes several splits:
 * about 12 waves of resident blocks on an H100, a short tail */
constexpr int64_t MMA_GRID_BLOCKS = 8192;

int gptoss_attention_limits(int n_heads, int n_kv_heads, int head_dim) {
    int G = n_heads / n_kv_heads;
    return G <= MAX_G && G * head_dim <= MAX_GD && head_dim <= MAX_HEAD_DIM &&
           partial_shape(n_heads, n_kv_heads, head_dim).floats() * sizeof(float) <= 48 * 1024;
}

hipError_t gptoss_launch_attention(const gptoss_attention_args *a, int kv_bf16, int exact,
                                   const gptoss_gpu_shape *dev, hipStream_t stream) {
    const bool pdl = dev->programmatic;
    if (exact)
        return launch_kernel(kv_bf16 ? attention_exact_kernel<bf16> : attention_exact_kernel<float>,
                             dim3(a->rows, a->n_heads), dim3(EXACT_THREADS), 0, stream, pdl, *a);
    dim3 partial_grid(a->rows, a->n_kv_heads, a->splits);
    dim3 combine_grid(a->rows, (a->n_heads + COMBINE_HEADS - 1) / COMBINE_HEADS);
    size_t shared = partial_shape(a->n_heads, a->n_kv_heads, a->head_dim).floats() * sizeof(float);
    const mma_shape mma(a->n_heads, a->n_kv_heads, a->head_dim);
    hipError_t e;
    if (kv_bf16 && mma.fits()) {
        /* a block takes several splits where the grid would hold more than
         * MMA_GRID_BLOCKS: q is staged once for them (the bits do not change) */
        const int64_t blocks = (int64_t)a->rows * a->n_kv_heads * a->splits;
        const int spb = (int)std::max<int64_t>(1, std::min<int64_t>(a->splits, blocks / MMA_GRID_BLOCKS));
        dim3 grid(a->rows, a->n_kv_heads, (a->splits + spb - 1) / spb);
        e = launch_kernel(mma.G == 8 && a->head_dim == 64 ? attention_mma_kernel<8, 64> : attention_mma_kernel<0, 0>,
                          grid, dim3(THREADS), mma.bytes(), stream, pdl, *a);
        if (e != hipSuccess || a->splits == 1) /* one split: the partials were the outputs */
            return e;
    } else {
        e = launch_kernel(kv_bf16 ? attention_partial_kernel<bf16> : attention_partial_kernel<float>, partial_grid,
                          dim3(THREADS), shared, stream, pdl, *a);
        if (e != hipSuccess)
            return e;
    }
    return launch_kernel(attention_combine_kernel, combine_grid, dim3(COMBINE_LANES * COMBINE_HEADS), 0, stream, pdl,
                         *a);
}
