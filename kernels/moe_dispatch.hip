/* MoE dispatch and combine.
 *
 * dispatch: a counting sort of the (row, k) pairs by expert, stable in row
 * order, in one block: pair_row[p] is the row of sorted pair p and
 * pair_of[row * K + k] where that pair went. It also writes the tile table
 * the grouped GEMMs read (expert, first pair, end pair; tile_rows pairs at
 * most), so the host launches them with a fixed grid and no copy back.
 * Sorting is deterministic, so a row's results never depend on the others.
 *
 * combine: each row sums its experts' outputs times their router weights in
 * ascending expert id, in float, and adds the sum to the residual: the
 * golden's order, which makes the result independent of the batch. The
 * block owns the updated row, so it also applies the RMSNorm that follows
 * (rmsnorm.h: the same bits as rmsnorm.hip), saving that kernel. */
#include "../contract/launchers.h"
#include "launch.h"
#include "rmsnorm.h"

namespace {

constexpr int DISPATCH_THREADS = 1024, DISPATCH_CHUNK = 4096; /* pairs staged at a time */

/* Pairs go through shared memory a chunk at a time. Within a chunk, a warp
 * per expert, each lane owning one contiguous segment of the chunk: a lane's
 * pairs of the expert go after those of the lanes before it, so the order is
 * the pairs' (stable) without a serial rank loop (a per-thread rank loop
 * was far slower). A segment's element i is stored at
 * i * warpSize + lane, so a warp's reads hit distinct banks. */
__global__ void __launch_bounds__(DISPATCH_THREADS) moe_dispatch_kernel(gptoss_moe_dispatch_args a) {
    extern __shared__ int sh[];
    int *start = sh, *staged = sh + a.n_experts; /* [n_experts] counts then cursors; [DISPATCH_CHUNK] */
    const int P = a.rows * a.k, lane = threadIdx.x % warpSize;
    const int warp = threadIdx.x / warpSize, warps = blockDim.x / warpSize;
    for (int e = threadIdx.x; e < a.n_experts; e += blockDim.x)
        start[e] = 0;
    pdl_wait();
    __syncthreads();
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        atomicAdd(&start[a.topk_idx[i]], 1);
    pdl_launch_dependents(); /* one block: the GEMMs after it may begin */
    __syncthreads();
    /* counts to first pairs and tiles by the first warp, warpSize experts a
     * round (faster than one thread's loop over the experts) */
    if (warp == 0) {
        int first = 0, tiles = 0;
        for (int e0 = 0; e0 < a.n_experts; e0 += warpSize) {
            const int e = e0 + lane, count = e < a.n_experts ? start[e] : 0;
            const int ntiles = (count + a.tile_rows - 1) / a.tile_rows;
            const int pairs_before = first + warp_inclusive_sum(count) - count;
            int t = tiles + warp_inclusive_sum(ntiles) - ntiles;
            for (int b = pairs_before; b < pairs_before + count; b += a.tile_rows, t++) {
                int *tile = a.tiles + 4 * t;
                tile[0] = e;
                tile[1] = b;
                tile[2] = min(b + a.tile_rows, pairs_before + count);
                tile[3] = 0;
            }
            if (e < a.n_experts)
                start[e] = pairs_before;
            first = __shfl(pairs_before + count, warpSize - 1);
            tiles = __shfl(t, warpSize - 1);
        }
        if (lane == 0)
            *a.tile_count = tiles;
    }
    for (int c0 = 0; c0 < P; c0 += DISPATCH_CHUNK) {
        const int n = min(DISPATCH_CHUNK, P - c0), seg = (n + warpSize - 1) / warpSize;
        __syncthreads(); /* the previous chunk is done with staged[] (and start[] is set) */
        for (int i = threadIdx.x; i < n; i += blockDim.x)
            staged[(i % seg) * warpSize + i / seg] = a.topk_idx[c0 + i];
        __syncthreads();
        const int lo = min(lane * seg, n), len = min(lo + seg, n) - lo;
        for (int e = warp; e < a.n_experts; e += warps) {
            int mine = 0;
            for (int i = 0; i < len; i++)
                mine += staged[i * warpSize + lane] == e;
            int before = warp_inclusive_sum(mine) - mine, dst = start[e] + before;
            for (int i = 0; i < len; i++) {
                if (staged[i * warpSize + lane] == e) {
                    a.pair_row[dst] = (c0 + lo + i) / a.k;
                    a.pair_of[c0 + lo + i] = dst++;
                }
            }
            int total = warp_sum(mine);
            if (lane == 0)
                start[e] += total; /* expert e is this warp's alone */
        }
    }
}

constexpr int MAX_K = 32;

/* KT: the experts per token when the launcher knows them, 0 for any k up
 * to MAX_K. Known, the row's pairs and a batch of loads sit in registers
 * and the loads overlap (with k and the pairs in memory each element's k
 * loads waited on each other) */
template <int KT> __global__ void __launch_bounds__(RMS_THREADS) moe_combine_kernel(gptoss_moe_combine_args a) {
    constexpr int KK = KT ? KT : MAX_K, BATCH = KT ? RMS_BATCH : 1;
    __shared__ double scratch[RMS_THREADS / 32];
    const int r = blockIdx.x, K = KT ? KT : a.k;
    pdl_wait();
    /* the row's pairs in ascending expert id (a row's experts are distinct):
     * pair j goes to place rank[j], the experts below its own */
    int expert[KK], rank[KK], pair[KK];
    float weight[KK];
#pragma unroll
    for (int j = 0; j < K; j++)
        expert[j] = a.topk_idx[(size_t)r * K + j];
#pragma unroll
    for (int j = 0; j < K; j++) {
        rank[j] = 0;
#pragma unroll
        for (int q = 0; q < K; q++)
            rank[j] += expert[q] < expert[j];
    }
#pragma unroll
    for (int s = 0; s < K; s++)
#pragma unroll
        for (int j = 0; j < K; j++)
            if (rank[j] == s) {
                pair[s] = a.pair_of[(size_t)r * K + j];
                weight[s] = a.topk_w[(size_t)r * K + j];
            }
    /* the updated row stays in shared memory for the norm, and each thread
     * sums the squares of its own elements as it goes: rms_row_scale's order,
     * whose elements per thread these are (blocks of RMS_THREADS) */
    extern __shared__ float row[];
    float *x = a.x + (size_t)r * a.hidden;
    double ss = 0.0;
    for (int i0 = threadIdx.x; i0 < a.hidden; i0 += BATCH * RMS_THREADS) {
        float out[BATCH][KK], res[BATCH]; /* every load of the batch, then the sums */
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            int i = i0 + u * RMS_THREADS;
            if (i >= a.hidden)
                break;
            res[u] = x[i];
#pragma unroll
            for (int j = 0; j < K; j++)
                out[u][j] = a.expert_out[(size_t)pair[j] * a.hidden + i];
        }
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            int i = i0 + u * RMS_THREADS;
            if (i >= a.hidden)
                break;
            float agg = 0.0f;
#pragma unroll
            for (int j = 0; j < K; j++)
                agg += out[u][j] * weight[j];
            if (a.agg_trace)
                a.agg_trace[(size_t)r * a.hidden + i] = agg;
            float v = res[u] + agg;
            x[i] = v;
            row[i] = v;
            ss += (double)(v * v);
        }
    }
    pdl_launch_dependents();
    if (!a.norm_w)
        return;
    double scale = gptoss_rms_scale(block_all(ss, op_add(), scratch), a.hidden);
    float *out = a.norm_out + (size_t)r * a.hidden; /* may be x: the final norm */
    bf16 *out_bf16 = a.norm_out_bf16 ? (bf16 *)a.norm_out_bf16 + (size_t)r * a.hidden : nullptr;
    rms_row_apply(row, a.norm_w, scale, a.hidden, [&](int i, float v) {
        if (out_bf16)
            out_bf16[i] = from_float<bf16>(v);
        out[i] = v;
    });
}

} // namespace

hipError_t gptoss_launch_moe_dispatch(const gptoss_moe_dispatch_args *a, const gptoss_gpu_shape *dev,
                                      hipStream_t stream) {
    size_t shared = sizeof(int) * ((size_t)a->n_experts + DISPATCH_CHUNK);
    return launch_kernel(moe_dispatch_kernel, dim3(1), dim3(DISPATCH_THREADS), shared, stream, dev->programmatic, *a);
}

hipError_t gptoss_launch_moe_combine(const gptoss_moe_combine_args *a, const gptoss_gpu_shape *dev,
                                     hipStream_t stream) {
    /* gpt-oss routes each token to 4 experts */
    void (*kernel)(gptoss_moe_combine_args) = a->k == 4 ? moe_combine_kernel<4> : moe_combine_kernel<0>;
    return launch_kernel(kernel, dim3(a->rows), dim3(RMS_THREADS), sizeof(float) * (size_t)a->hidden, stream,
                         dev->programmatic, *a);
}
