#include "softmax.h"

#include <math.h>

void gptoss_course_softmax(float *x, int n) {
    double max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max)
            max = x[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf((float)(x[i] - max));
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] = (float)(x[i] / sum);
}
