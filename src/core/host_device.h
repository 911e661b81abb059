/* GPTOSS_HD marks a header's inline function for both the host and the
 * device, so that the CPU golden and the kernels evaluate one source; in
 * plain C it is nothing. */
#ifndef GPTOSS_HOST_DEVICE_H
#define GPTOSS_HOST_DEVICE_H

#if defined(__HIPCC__) || defined(__CUDACC__)
#define GPTOSS_HD __host__ __device__
#else
#define GPTOSS_HD
#endif

#endif
