/* bfloat16 rounding (round to nearest, ties to even), host and device. The
 * bf16 numeric mode stores weights and rounds GEMM inputs this way. */
#ifndef GPTOSS_BF16_H
#define GPTOSS_BF16_H

#include <stdint.h>

#include "host_device.h"

/* a union, not memcpy: HIP on AMD has no device memcpy in host/device code */
typedef union {
    float f;
    uint32_t u;
} gptoss_f32_bits;

GPTOSS_HD static inline uint16_t gptoss_bf16_bits(float f) {
    gptoss_f32_bits b;
    b.f = f;
    uint32_t u = b.u;
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

GPTOSS_HD static inline float gptoss_bf16_float(uint16_t b) {
    gptoss_f32_bits v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

GPTOSS_HD static inline float gptoss_bf16_round(float f) { return gptoss_bf16_float(gptoss_bf16_bits(f)); }

#endif
