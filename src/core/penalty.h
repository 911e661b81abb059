/* Presence and frequency penalties, the one rule both samplers apply (the
 * host's draw in sampler_penalty.c, the GPU's in kernels/sample.hip): a
 * token drawn count times before loses frequency per draw, then presence
 * once, subtracted in float in that order as vLLM does, so that the two
 * samplers' rows agree bit for bit (docs/api.md#penalties). */
#ifndef GPTOSS_PENALTY_H
#define GPTOSS_PENALTY_H

#include <stdint.h>

#include "host_device.h"

/* the range OpenAI's API gives both penalties */
#define GPTOSS_MAX_PENALTY 2.0

GPTOSS_HD static inline float gptoss_penalized_logit(float logit, int32_t count, float presence, float frequency) {
    return count > 0 ? logit - frequency * (float)count - presence : logit;
}

#endif
