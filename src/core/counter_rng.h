/* Counter-based random numbers, the same on the host and the device: a
 * value is a hash of (key, index), never a state that advances, so that
 * synthetic weights (synth.h) and sampling draws do not depend on the order
 * or the batch they are computed in. */
#ifndef GPTOSS_COUNTER_RNG_H
#define GPTOSS_COUNTER_RNG_H

#include <stdint.h>

#include "host_device.h"

/* SplitMix64's finaliser */
GPTOSS_HD static inline uint64_t gptoss_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* u in [0, 1) on a 2^-53 grid from (seed, position), for host and device */
GPTOSS_HD static inline double gptoss_sample_uniform(uint64_t seed, uint64_t position) {
    uint64_t key = gptoss_mix64(seed ^ 0x243F6A8885A308D3ull);
    return (double)(gptoss_mix64(key + (position + 1) * 0x9E3779B97F4A7C15ull) >> 11) *
           (1.0 / 9007199254740992.0);
}

#endif
