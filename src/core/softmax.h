/* run.cpp's softmax helper, shared by the golden engine (attention, router)
 * and the course sampler: max in double, each exponential a float, the sum
 * in double. */
#ifndef GPTOSS_SOFTMAX_H
#define GPTOSS_SOFTMAX_H

void gptoss_course_softmax(float *x, int n);

#endif
