/* The golden's attention score of one cached key (src/core/golden_forward.c): the
 * float products q_i * k_i summed in double in ascending i, then scaled and
 * rounded by gptoss_attn_score (src/core/course_math.h). The loop is here,
 * not there, because the device's keys may be bf16. Shared by the exact
 * (fp32 mode) attention kernel and the tracer's scores. */
#ifndef GPTOSS_KERNELS_ATTENTION_SCORE_H
#define GPTOSS_KERNELS_ATTENTION_SCORE_H

#include "device.h"
#include "../src/core/course_math.h"

template <class KV> __device__ __forceinline__ float golden_score(const float *q, const KV *k, int D) {
    double s = 0.0;
    for (int i = 0; i < D; i++)
        s += (double)(q[i] * to_float(k[i]));
    return gptoss_attn_score(s, D);
}

#endif
