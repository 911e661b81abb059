/* RMSNorm of each row, exactly the golden's: the float squares summed in
 * double (any order rounds alike), the course's scale formula, and the
 * product in double (src/core/course_math.h). Writes the fp32 result and,
 * in bf16 mode, the bf16-rounded copy the next GEMM reads. */
#include "device.h"
#include "launchers.h"
#include "../src/core/course_math.h"

__global__ void rmsnorm_kernel(const float *x, const float *w, int hidden, float *out,
                               bf16 *out_bf16) {
    __shared__ double scratch[32];
    const float *row = x + (size_t)blockIdx.x * hidden;
    double ss = 0.0;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        ss += (double)(row[i] * row[i]);
    double scale = gptoss_rms_scale(block_all(ss, op_add(), scratch), hidden);
    float *o = out + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float v = gptoss_rms_apply(w[i], scale, row[i]);
        if (out_bf16)
            out_bf16[(size_t)blockIdx.x * hidden + i] = from_float<bf16>(v);
        o[i] = v; /* after the read of row[i]: out may be x (the final norm) */
    }
}

hipError_t gptoss_launch_rmsnorm(const float *x, const float *w, int rows, int hidden, float *out,
                                 void *out_bf16, hipStream_t stream) {
    hipLaunchKernelGGL(rmsnorm_kernel, dim3(rows), dim3(256), 0, stream, x, w, hidden, out,
                       (bf16 *)out_bf16);
    return hipGetLastError();
}
