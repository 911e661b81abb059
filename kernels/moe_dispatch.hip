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
#include "launchers.h"
#include "rmsnorm.h"

namespace {

constexpr int DISPATCH_THREADS = 1024;

__global__ void __launch_bounds__(DISPATCH_THREADS) moe_dispatch_kernel(gptoss_moe_dispatch_args a) {
    extern __shared__ int sh[];
    int *count = sh, *cursor = sh + a.n_experts, *chunk = sh + 2 * a.n_experts;
    int P = a.rows * a.k, tid = threadIdx.x;
    for (int e = tid; e < a.n_experts; e += DISPATCH_THREADS)
        count[e] = 0;
    __syncthreads();
    for (int i = tid; i < P; i += DISPATCH_THREADS)
        atomicAdd(&count[a.topk_idx[i]], 1);
    __syncthreads();
    if (tid == 0) {
        int start = 0, tiles = 0;
        for (int e = 0; e < a.n_experts; e++) {
            cursor[e] = start;
            for (int b = start; b < start + count[e]; b += a.tile_rows) {
                int *t = a.tiles + 4 * tiles++;
                t[0] = e;
                t[1] = b;
                t[2] = min(b + a.tile_rows, start + count[e]);
                t[3] = 0;
            }
            start += count[e];
        }
        *a.tile_count = tiles;
    }
    __syncthreads();
    for (int c0 = 0; c0 < P; c0 += DISPATCH_THREADS) {
        int i = c0 + tid, e = i < P ? a.topk_idx[i] : -1;
        chunk[tid] = e;
        __syncthreads();
        if (e >= 0) {
            int rank = 0;
            for (int j = 0; j < tid; j++)
                rank += chunk[j] == e;
            int dst = cursor[e] + rank;
            a.pair_row[dst] = i / a.k;
            a.pair_of[i] = dst;
        }
        __syncthreads();
        for (int x = tid; x < a.n_experts; x += DISPATCH_THREADS) {
            int n = 0;
            for (int j = 0; j < DISPATCH_THREADS; j++)
                n += chunk[j] == x;
            cursor[x] += n;
        }
        __syncthreads();
    }
}

constexpr int MAX_K = 32;

__global__ void __launch_bounds__(RMS_THREADS) moe_combine_kernel(gptoss_moe_combine_args a) {
    __shared__ double scratch[RMS_THREADS / 32];
    int r = blockIdx.x, K = a.k;
    int expert[MAX_K], pair[MAX_K];
    float weight[MAX_K];
    for (int j = 0; j < K; j++) { /* insertion by ascending expert id */
        int e = a.topk_idx[(size_t)r * K + j], at = j;
        while (at > 0 && expert[at - 1] > e) {
            expert[at] = expert[at - 1];
            pair[at] = pair[at - 1];
            weight[at] = weight[at - 1];
            at--;
        }
        expert[at] = e;
        pair[at] = a.pair_of[(size_t)r * K + j];
        weight[at] = a.topk_w[(size_t)r * K + j];
    }
    float *x = a.x + (size_t)r * a.hidden;
    for (int i = threadIdx.x; i < a.hidden; i += blockDim.x) {
        float agg = 0.0f;
        for (int j = 0; j < K; j++)
            agg += a.expert_out[(size_t)pair[j] * a.hidden + i] * weight[j];
        if (a.agg_trace)
            a.agg_trace[(size_t)r * a.hidden + i] = agg;
        x[i] += agg;
    }
    if (!a.norm_w)
        return;
    __syncthreads(); /* the row is complete */
    double scale = rms_row_scale(x, a.hidden, scratch);
    float *out = a.norm_out + (size_t)r * a.hidden; /* may be x: the final norm */
    bf16 *out_bf16 = a.norm_out_bf16 ? (bf16 *)a.norm_out_bf16 + (size_t)r * a.hidden : nullptr;
    rms_row_apply(x, a.norm_w, scale, a.hidden, [&](int i, float v) {
        if (out_bf16)
            out_bf16[i] = from_float<bf16>(v);
        out[i] = v;
    });
}

} // namespace

int gptoss_moe_max_tiles(int rows, int k, int n_experts, int tile_rows) {
    return (rows * k + tile_rows - 1) / tile_rows + n_experts;
}

hipError_t gptoss_launch_moe_dispatch(const gptoss_moe_dispatch_args *a, hipStream_t stream) {
    size_t shared = sizeof(int) * (2 * (size_t)a->n_experts + DISPATCH_THREADS);
    hipLaunchKernelGGL(moe_dispatch_kernel, dim3(1), dim3(DISPATCH_THREADS), shared, stream, *a);
    return hipGetLastError();
}

hipError_t gptoss_launch_moe_combine(const gptoss_moe_combine_args *a, hipStream_t stream) {
    hipLaunchKernelGGL(moe_combine_kernel, dim3(a->rows), dim3(RMS_THREADS), 0, stream, *a);
    return hipGetLastError();
}
