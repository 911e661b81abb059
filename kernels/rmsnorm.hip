/* RMSNorm of each row, exactly the golden's: the float squares summed in
 * double (any order rounds alike; rmsnorm.h fixes one), the course's scale
 * formula, and the product in double (src/core/course_math.h). Writes the
 * fp32 result and, in bf16 mode, the bf16-rounded copy the next GEMM reads.
 * Within a step the norms after the first run fused into the kernel before
 * them (router.hip, moe_dispatch.hip); this one serves the first layer and
 * traced steps. */
#include "../contract/launchers.h"
#include "launch.h"
#include "rmsnorm.h"

__global__ void rmsnorm_kernel(const float *x, const float *w, int hidden, float *out,
                               bf16 *out_bf16) {
    __shared__ double scratch[RMS_THREADS / 32];
    pdl_wait();
    const float *row = x + (size_t)blockIdx.x * hidden;
    double scale = rms_row_scale(row, hidden, scratch);
    pdl_launch_dependents();
    float *o = out + (size_t)blockIdx.x * hidden;
    bf16 *ob = out_bf16 ? out_bf16 + (size_t)blockIdx.x * hidden : nullptr;
    rms_row_apply(row, w, scale, hidden, [&](int i, float v) { /* out may be x (the final norm) */
        if (ob)
            ob[i] = from_float<bf16>(v);
        o[i] = v;
    });
}

hipError_t gptoss_launch_rmsnorm(const float *x, const float *w, int rows, int hidden, float *out,
                                 void *out_bf16, const gptoss_gpu_shape *dev, hipStream_t stream) {
    return launch_kernel(rmsnorm_kernel, dim3(rows), dim3(RMS_THREADS), 0, stream, dev->programmatic, x, w, hidden,
                         out, (bf16 *)out_bf16);
}
