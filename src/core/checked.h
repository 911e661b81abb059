/* Sizes computed from options or file contents: products and sums that say
 * when they leave 64 bits instead of wrapping to a small number (which would
 * let a plan "fit" and a step write out of bounds). On overflow the result is
 * UINT64_MAX and *overflow is set; it stays set through later calls. */
#ifndef GPTOSS_CHECKED_H
#define GPTOSS_CHECKED_H

#include <stdint.h>

static inline uint64_t gptoss_checked_mul(uint64_t a, uint64_t b, int *overflow) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) {
        *overflow = 1;
        return UINT64_MAX;
    }
    return r;
}

static inline uint64_t gptoss_checked_add(uint64_t a, uint64_t b, int *overflow) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) {
        *overflow = 1;
        return UINT64_MAX;
    }
    return r;
}

#endif
