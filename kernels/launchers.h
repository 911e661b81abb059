/* Host-side launchers of the kernels in this folder, one per kernel file.
 * src/hip calls these; only kernel files contain __global__ code. */
#ifndef GPTOSS_KERNELS_LAUNCHERS_H
#define GPTOSS_KERNELS_LAUNCHERS_H

#include <stdint.h>

#include "../src/core/synth.h"
#include "../src/hip/hip_runtime_compat.h"

/* synth_weights.hip: out[i] = synthetic value of element first + i */
hipError_t gptoss_launch_synth_fill(const gptoss_synth_param &p, uint64_t first, uint64_t count,
                                    float *out, hipStream_t stream);

#endif
