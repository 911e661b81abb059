/* The per-element formulas of run.cpp's forward that the golden engine and
 * the GPU kernels must evaluate identically, header-only for host and
 * device. Both sides compile without fused multiply-add, so the same source
 * gives the same bits (up to gptoss_expf). The loops around them
 * (reductions, tiling) belong to each engine. */
#ifndef GPTOSS_COURSE_MATH_H
#define GPTOSS_COURSE_MATH_H

#include <math.h>

#include "host_device.h"

/* expf as the CPU computes it. On the device, not CUDA's expf (documented
 * as up to 2 ulp off) but the double exp rounded to float: that equals
 * glibc's expf (within 0.502 ulp) for all but about 9e-5 of the floats in
 * [-104, 0], measured over every one of them. */
GPTOSS_HD static inline float gptoss_expf(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    return (float)exp((double)x);
#else
    return expf(x);
#endif
}

/* RMSNorm: sum_sq is the double sum of the float squares x[j] * x[j]; the
 * returned scale multiplies as w[j] * (scale * x[j]), in double. */
GPTOSS_HD static inline double gptoss_rms_scale(double sum_sq, int n) {
    double ss = sum_sq / n;
    ss += 1e-5f;
    return 1.0f / sqrtf((float)ss);
}

GPTOSS_HD static inline float gptoss_rms_apply(float w, double scale, float x) {
    return (float)(w * (scale * x));
}

/* RoPE's rotation of one half-split pair (x0, x1) = (x[i], x[i + D/2]) of
 * a head by its angle's cos and sin (src/core/rope.c's table), in float. */
GPTOSS_HD static inline void gptoss_rope_rotate(float x0, float x1, float cs, float sn, float *y0, float *y1) {
    *y0 = x0 * cs - x1 * sn;
    *y1 = x1 * cs + x0 * sn;
}

/* Attention score of one key: dot is the sum in double, in ascending i, of
 * the float products q[i] * k[i]; it is divided by sqrtf(head_dim) in
 * double and rounded to float. */
GPTOSS_HD static inline float gptoss_attn_score(double dot, int head_dim) {
    return (float)(dot / sqrtf((float)head_dim));
}

/* SwiGLU of one (gate, up) pair (mlp1's even and odd outputs): the gate is
 * clamped above only, up both ways, out = gate * sigmoid(1.702 gate) * (up + 1),
 * all in float. */
GPTOSS_HD static inline float gptoss_swiglu(float gate, float up, float limit) {
    const float alpha = 1.702f;
    if (gate > limit)
        gate = limit;
    if (up > limit)
        up = limit;
    if (up < -limit)
        up = -limit;
    gate *= (1.0f / (1.0f + gptoss_expf(-alpha * gate)));
    gate *= (up + 1.0f);
    return gate;
}

/* Router top-k: by descending logit, ties to the lower expert id (a stable
 * sort of run.cpp's qsort order); vals/idx receive k entries. */
GPTOSS_HD static inline void gptoss_topk(const float *logits, int n, int k, float *vals, int *idx) {
    int have = 0;
    for (int e = 0; e < n; e++) {
        float v = logits[e];
        int at = have < k ? have : k;
        while (at > 0 && v > vals[at - 1])
            at--;
        if (at >= k)
            continue;
        int last = have < k ? have : k - 1;
        for (int i = last; i > at; i--) {
            vals[i] = vals[i - 1];
            idx[i] = idx[i - 1];
        }
        vals[at] = v;
        idx[at] = e;
        if (have < k)
            have++;
    }
}

#endif
