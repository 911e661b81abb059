/* The MoE router of each row in one block: the expert logits (one warp per
 * expert, the golden's float products summed in double in both modes: in
 * bf16 mode the products are exact and their double sum nearly always is
 * (while the products' exponents span less than about 25 bits), so the logits, and the
 * routing, match the CPU's bit for bit given equal inputs), the
 * top-k with the golden's tie rule and the course softmax over those k
 * (src/core/course_math.h, softmax.h). */
#include "device.h"
#include "launchers.h"
#include "../src/core/course_math.h"
#include "../src/core/softmax.h"

namespace {

/* a warp per expert: one block reads the whole router matrix, so it needs
 * many loads in flight (256 threads ran at 77 us per 20b row on an H200) */
constexpr int MAX_EXPERTS = 256, MAX_K = 32, THREADS = 1024;

template <class T> __global__ void __launch_bounds__(THREADS) router_kernel(gptoss_router_args a) {
    __shared__ float logits[MAX_EXPERTS];
    int r = blockIdx.x, lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    int warps = blockDim.x / warpSize;
    const T *x = (const T *)a.x + (size_t)r * a.hidden;
    constexpr int EPV = 16 / sizeof(T); /* values per 16-byte load */
    const bool vec = a.hidden % EPV == 0;
    for (int e = warp; e < a.n_experts; e += warps) {
        const T *w = (const T *)a.w + (size_t)e * a.hidden;
        double s = 0;
        if (vec) { /* 16 bytes per lane and load: few round trips to memory per row */
            for (int i = lane * EPV; i < a.hidden; i += warpSize * EPV) {
                float xs[EPV], ws[EPV];
                unpack16(*(const uint4 *)(x + i), xs, (const T *)nullptr);
                unpack16(*(const uint4 *)(w + i), ws, (const T *)nullptr);
#pragma unroll
                for (int j = 0; j < EPV; j++)
                    s += (double)(xs[j] * ws[j]);
            }
        } else {
            for (int i = lane; i < a.hidden; i += warpSize)
                s += (double)(to_float(x[i]) * to_float(w[i]));
        }
        s = warp_sum(s);
        if (lane == 0) {
            float v = (float)s;
            v += a.bias[e];
            logits[e] = v;
        }
    }
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int e = 0; e < a.n_experts; e++)
        a.logits[(size_t)r * a.n_experts + e] = logits[e];
    float vals[MAX_K];
    int idx[MAX_K];
    gptoss_topk(logits, a.n_experts, a.k, vals, idx);
    gptoss_course_softmax(vals, a.k);
    for (int j = 0; j < a.k; j++) {
        a.topk_idx[(size_t)r * a.k + j] = idx[j];
        a.topk_w[(size_t)r * a.k + j] = vals[j];
    }
}

} // namespace

int gptoss_router_limits(int n_experts, int k) { return n_experts <= MAX_EXPERTS && k <= MAX_K; }

hipError_t gptoss_launch_router(const gptoss_router_args *a, int bf16_mode, hipStream_t stream) {
    if (bf16_mode)
        hipLaunchKernelGGL(router_kernel<bf16>, dim3(a->rows), dim3(THREADS), 0, stream, *a);
    else
        hipLaunchKernelGGL(router_kernel<float>, dim3(a->rows), dim3(THREADS), 0, stream, *a);
    return hipGetLastError();
}
