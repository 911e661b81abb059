/* The MoE block's entry for each row: the RMSNorm of the residual row
 * (rmsnorm.h, written out for the experts' GEMMs, and in bf16 mode rounded
 * as they read it), then the router on that normalized row: the expert
 * logits (one warp per expert, the golden's float products summed in double
 * in both modes: in bf16 mode the products are exact and their double sum
 * nearly always is (while the products' exponents span less than about 25
 * bits), so the logits, and the routing, match the CPU's bit for bit given
 * equal inputs), the top-k with the golden's tie rule and the course softmax
 * over those k (src/core/course_math.h, softmax.h).
 * A row takes one block of 512 threads where the rows fill the GPU; in a
 * small step it takes several blocks of 256 (the fewest RMSNorm's order
 * allows), each normalizing the row and summing some experts' logits, and
 * the last of them to finish takes the top k, so that a step of a few rows
 * reads the router's weights on many multiprocessors, not a few. An
 * expert's logit is the same warp's sum either way.
 * (Blocks of several rows, sharing each router weight load, were slower,
 * their rows' norms running one after another.) */
#include <limits.h>

#include <algorithm>

#include "../contract/launchers.h"
#include "launch.h"
#include "rmsnorm.h"
#include "../src/core/softmax.h"

namespace {

/* warp w of a row's block b (of G) takes experts b + G w, b + G (w + warps),
 * ..: a block of a whole row reads the router matrix alone, so it needs many
 * loads in flight: BATCH loads per lane before their sums. Two blocks per
 * multiprocessor (64 registers: at 1024 threads, 32 registers spilled the
 * batch), so 256 rows take one wave. */
constexpr int MAX_EXPERTS = 256, MAX_K = 32, THREADS = 512, MIN_BLOCKS = 2, BATCH = 4;
/* a row's blocks in a small step: RMS_THREADS threads each, enough of them
 * for two blocks a multiprocessor or one warp an expert. Each warp loads
 * its first expert's weights whole (up to PREFETCH loads a lane) before it
 * waits for the kernel before: they never depend on it, and the row's
 * norm then overlaps their one round trip instead of preceding several. */
constexpr int SPLIT_THREADS = RMS_THREADS, SPLIT_BLOCKS_PER_SM = 2, PREFETCH = 12;
/* shared memory left for the normalized row after the static arrays */
constexpr size_t ROW_BYTES = 48 * 1024 - sizeof(float) * MAX_EXPERTS - sizeof(double) * (THREADS / 32);

/* Whether this block is the last of row r's G to finish; that one reads the
 * other blocks' logits into its own and resets the row's counter for the
 * next launch (call from every thread). */
__device__ bool last_of_row(const gptoss_router_args &a, int r, int G, float *logits) {
    __shared__ bool last;
    if (threadIdx.x == 0) {
        last = atomicAdd(&a.row_done[r], 1u) == (unsigned)G - 1;
        if (last)
            a.row_done[r] = 0;
    }
    __syncthreads();
    if (!last)
        return false;
    __threadfence();
    for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x)
        if (e % G != (int)blockIdx.y)
            logits[e] = *(volatile const float *)&a.logits[(size_t)r * a.n_experts + e]; /* not a stale L1 copy */
    __syncthreads();
    return true;
}

template <class T, bool PREFETCHING>
__global__ void GPTOSS_LAUNCH_BOUNDS(PREFETCHING ? SPLIT_THREADS : THREADS, MIN_BLOCKS) router_kernel(gptoss_router_args a) {
    extern __shared__ uint4 normed_row[]; /* [hidden] of T: the router's input */
    __shared__ float logits[MAX_EXPERTS];
    __shared__ double scratch[THREADS / 32];
    T *xs = (T *)normed_row;
    const int r = blockIdx.x, H = a.hidden, lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    const int warps = blockDim.x / warpSize, G = gridDim.y, b = blockIdx.y;
    const size_t at = (size_t)r * H;
    constexpr int EPV = 16 / sizeof(T); /* values per 16-byte load */
    const bool vec = H % EPV == 0;
    /* lane's weights of expert e, loads u at i = lane EPV + u warpSize EPV:
     * the order of its sum, prefetched or not */
    auto weight_load = [&](int e, int i) {
        return i < H ? *(const uint4 *)((const T *)a.w + (size_t)e * H + i) : make_uint4(0, 0, 0, 0);
    };
    auto accumulate = [&](const uint4 &wq, int i, double &s) {
        float xv[EPV], wv[EPV];
        unpack16(*(const uint4 *)(xs + i), xv, (const T *)nullptr);
        unpack16(wq, wv, (const T *)nullptr);
#pragma unroll
        for (int q = 0; q < EPV; q++)
            s += (double)(xv[q] * wv[q]);
    };
    const int first = b + G * warp;
    const bool prefetched = PREFETCHING && vec && first < a.n_experts && H <= PREFETCH * warpSize * EPV;
    uint4 pre[PREFETCHING ? PREFETCH : 1];
    if constexpr (PREFETCHING)
        if (prefetched)
#pragma unroll
            for (int u = 0; u < PREFETCH; u++)
                pre[u] = weight_load(first, lane * EPV + u * warpSize * EPV);
    pdl_wait();
    const double scale = rms_row_scale(a.x + at, H, scratch);
    rms_row_apply(a.x + at, a.norm_w, scale, H, [&](int i, float v) {
        T rounded = from_float<T>(v);
        if (b == 0) {
            a.normed[at + i] = v;
            if (a.normed_bf16)
                ((T *)a.normed_bf16)[at + i] = rounded;
        }
        xs[i] = rounded;
    });
    __syncthreads();
    for (int e = first; e < a.n_experts; e += G * warps) {
        const T *w = (const T *)a.w + (size_t)e * H;
        double s = 0;
        if (prefetched && e == first) {
#pragma unroll
            for (int u = 0; u < (PREFETCHING ? PREFETCH : 1); u++) {
                const int i = lane * EPV + u * warpSize * EPV;
                if (i >= H)
                    break;
                accumulate(pre[u], i, s);
            }
        } else if (vec) { /* 16 bytes per lane and load, BATCH loads before their sums */
            for (int i0 = lane * EPV; i0 < H; i0 += BATCH * warpSize * EPV) {
                uint4 wq[BATCH];
#pragma unroll
                for (int u = 0; u < BATCH; u++)
                    wq[u] = weight_load(e, i0 + u * warpSize * EPV);
#pragma unroll
                for (int u = 0; u < BATCH; u++) {
                    int i = i0 + u * warpSize * EPV;
                    if (i >= H)
                        break;
                    accumulate(wq[u], i, s);
                }
            }
        } else {
            for (int i = lane; i < H; i += warpSize)
                s += (double)(to_float(xs[i]) * to_float(w[i]));
        }
        s = warp_sum(s);
        if (lane == 0) {
            float v = (float)s;
            v += a.bias[e];
            logits[e] = v;
            a.logits[(size_t)r * a.n_experts + e] = v;
            if (G > 1)
                __threadfence(); /* seen by the row's last block (below) */
        }
    }
    pdl_launch_dependents();
    __syncthreads();
    if (G > 1 && !last_of_row(a, r, G, logits))
        return;
    if (warp != 0)
        return;
    /* the top k by the first warp: k rounds of take_better over the experts
     * not yet taken (the higher logit, then the lower id: what the golden's
     * insertion keeps); a NaN logit, which that insertion places by a rule
     * of its own, sends the row through the golden's loop itself */
    float vals[MAX_K];
    int idx[MAX_K], nan = 0;
    for (int e = lane; e < a.n_experts; e += warpSize)
        nan |= logits[e] != logits[e];
    if (warp_all(nan, op_or())) {
        if (lane == 0)
            gptoss_topk(logits, a.n_experts, a.k, vals, idx);
    } else {
        uint32_t taken = 0; /* bit j: expert lane + j warpSize */
        for (int q = 0; q < a.k; q++) {
            float v = -INFINITY;
            int best = INT_MAX;
            for (int j = 0, e = lane; e < a.n_experts; j++, e += warpSize)
                if (!(taken >> j & 1))
                    take_better(v, best, logits[e], e);
            warp_best(v, best);
            if (best % warpSize == lane)
                taken |= 1u << (best / warpSize);
            vals[q] = v;
            idx[q] = best;
        }
    }
    if (lane != 0)
        return;
    gptoss_course_softmax(vals, a.k);
    for (int q = 0; q < a.k; q++) {
        a.topk_idx[(size_t)r * a.k + q] = idx[q];
        a.topk_w[(size_t)r * a.k + q] = vals[q];
    }
}

} // namespace

int gptoss_router_max_hidden(void) { return (int)(ROW_BYTES / sizeof(float)); }

int gptoss_router_limits(int n_experts, int k, int hidden) {
    return n_experts <= MAX_EXPERTS && k <= MAX_K && hidden <= gptoss_router_max_hidden();
}

hipError_t gptoss_launch_router(const gptoss_router_args *a, int bf16_mode, const gptoss_gpu_shape *dev,
                                hipStream_t stream) {
    size_t elem = bf16_mode ? sizeof(bf16) : sizeof(float);
    /* blocks a row: as many as fill the GPU twice, at most one warp an expert */
    const int split_warps = SPLIT_THREADS / dev->warp, wanted = SPLIT_BLOCKS_PER_SM * dev->multiprocessors;
    const int most = (a->n_experts + split_warps - 1) / split_warps;
    const int G = a->rows >= wanted ? 1 : std::min(most, (wanted + a->rows - 1) / a->rows);
    const dim3 grid(a->rows, G), block(G > 1 ? SPLIT_THREADS : THREADS);
    /* the prefetching blocks hold twice the registers: only where their grid is one wave */
    const bool prefetch = G > 1 && (long)a->rows * G <= (long)SPLIT_BLOCKS_PER_SM * dev->multiprocessors;
    auto kernel = prefetch ? (bf16_mode ? router_kernel<bf16, true> : router_kernel<float, true>)
                           : (bf16_mode ? router_kernel<bf16, false> : router_kernel<float, false>);
    return launch_kernel(kernel, grid, block, a->hidden * elem, stream, dev->programmatic, *a);
}
