/* bfloat16 rounding (round to nearest, ties to even), host and device. The
 * bf16 numeric mode stores weights and rounds GEMM inputs this way. */
#ifndef GPTOSS_BF16_H
#define GPTOSS_BF16_H

#include <stdint.h>
#include <string.h>

#include "synth.h" /* GPTOSS_HD */

GPTOSS_HD static inline uint16_t gptoss_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

GPTOSS_HD static inline float gptoss_bf16_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

GPTOSS_HD static inline float gptoss_bf16_round(float f) { return gptoss_bf16_float(gptoss_bf16_bits(f)); }

#endif
