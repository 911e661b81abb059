/* run.cpp's softmax helper, shared by the golden engine (attention, router),
 * the course sampler and the GPU router kernel: max in double, each
 * exponential a float, the sum in double. Header-only for host and device. */
#ifndef GPTOSS_SOFTMAX_H
#define GPTOSS_SOFTMAX_H

#include <math.h>

#include "course_math.h"

GPTOSS_HD static inline void gptoss_course_softmax(float *x, int n) {
    double max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = gptoss_expf((float)(x[i] - max));
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] = (float)(x[i] / sum);
}

#endif
