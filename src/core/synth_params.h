/* Host side of the synthetic-weight recipe: per-tensor parameters (seed key,
 * distribution, scale) and a fill loop. The value function itself is in
 * synth.h, shared with the GPU kernels. */
#ifndef GPTOSS_SYNTH_PARAMS_H
#define GPTOSS_SYNTH_PARAMS_H

#include "config.h"
#include "synth.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

gptoss_synth_param gptoss_synth_params(const gptoss_config *c, uint64_t seed, int tensor);

/* out[i] = value of element first + i of the tensor */
void gptoss_synth_fill(const gptoss_synth_param *p, uint64_t first, uint64_t count, float *out);

#ifdef __cplusplus
}
#endif

#endif
