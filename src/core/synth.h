/* Synthetic weights: a counter-based hash of (seed, tensor, index) turned
 * into a value. Every function here is branch-light integer and exact float
 * arithmetic, header-only and marked for host and device, so that a GPU
 * kernel fills a replica of a 20b/120b synthetic model with exactly the bits
 * the CPU produces, without a host copy.
 *
 * The recipe (documented in docs/api.md#synthetic-weights):
 *   h(seed, tensor, i) = mix64(key(seed, tensor) + (i + 1) * 0x9E3779B97F4A7C15)
 *   mix64 is the SplitMix64 finaliser; key(seed, tensor) = mix64(seed ^ (tensor+1) * 0xD1B54A32D192ED03).
 *   unit(h) = (h >> 40) * 2^-23 - 1, a value of [-1, 1) on a 2^-23 grid.
 *   UNIFORM tensors: unit(h) * 2^scale_exp
 *   NORM tensors (RMSNorm scales): 1 + unit(h) * 2^scale_exp
 *   MXFP4 tensors (MoE weights): e2m1[code] * 2^(scale_exp + d - 1), where code is the low 4 bits of
 *     h(seed, tensor, i) and d = h(seed, tensor + 64, block) mod 3 is shared by the block of 32
 *     consecutive inputs of a row: block = row * ceil(n_in / 32) + col / 32.
 * Multiplying by a power of two is exact, so a fused multiply-add on the GPU
 * cannot change any result. */
#ifndef GPTOSS_SYNTH_H
#define GPTOSS_SYNTH_H

#include <stdint.h>

#include "counter_rng.h"
#include "host_device.h"

typedef enum { GPTOSS_SYNTH_UNIFORM, GPTOSS_SYNTH_NORM, GPTOSS_SYNTH_MXFP4 } gptoss_synth_kind;

/* What one tensor's generator needs; computed on the host by
 * gptoss_synth_params (synth.c) and passed to kernels as is. */
typedef struct {
    uint64_t key;      /* key(seed, tensor) */
    uint64_t block_key; /* key(seed, tensor + 64), MXFP4 block exponents */
    int32_t kind;
    int32_t scale_exp;
    int64_t n_in;      /* row length (the input dimension) for MXFP4 blocks */
} gptoss_synth_param;

GPTOSS_HD static inline uint64_t gptoss_synth_key(uint64_t seed, uint64_t tensor) {
    return gptoss_mix64(seed ^ ((tensor + 1) * 0xD1B54A32D192ED03ull));
}

GPTOSS_HD static inline uint64_t gptoss_synth_hash(uint64_t key, uint64_t index) {
    return gptoss_mix64(key + (index + 1) * 0x9E3779B97F4A7C15ull);
}

/* 2^e for small |e| as an exact float, without libm. */
GPTOSS_HD static inline float gptoss_pow2f(int e) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)(e + 127) << 23;
    return v.f;
}

GPTOSS_HD static inline float gptoss_synth_unit(uint64_t h) {
    return (float)(int32_t)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* e2m1 code -> value: +0 .5 1 1.5 2 3 4 6, then the same negated */
GPTOSS_HD static inline float gptoss_e2m1_value(unsigned code) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float m = mag[code & 7u];
    return (code & 8u) ? -m : m;
}

/* An MXFP4 tensor's e2m1 code of element index, and the power of two of
 * block `block` (row * ceil(n_in / 32) + input / 32): what its value is
 * made of, also what a GPU replica stores of it. */
GPTOSS_HD static inline unsigned gptoss_synth_mxfp4_code(const gptoss_synth_param *p, uint64_t index) {
    return (unsigned)(gptoss_synth_hash(p->key, index) & 15u);
}
GPTOSS_HD static inline int gptoss_synth_mxfp4_exp(const gptoss_synth_param *p, uint64_t block) {
    return p->scale_exp + (int)(gptoss_synth_hash(p->block_key, block) % 3u) - 1;
}

GPTOSS_HD static inline float gptoss_synth_value(const gptoss_synth_param *p, uint64_t index) {
    if (p->kind == GPTOSS_SYNTH_MXFP4) {
        uint64_t n_in = (uint64_t)p->n_in;
        uint64_t block = (index / n_in) * ((n_in + 31) / 32) + (index % n_in) / 32;
        return gptoss_e2m1_value(gptoss_synth_mxfp4_code(p, index)) * gptoss_pow2f(gptoss_synth_mxfp4_exp(p, block));
    }
    float u = gptoss_synth_unit(gptoss_synth_hash(p->key, index)) * gptoss_pow2f(p->scale_exp);
    return p->kind == GPTOSS_SYNTH_NORM ? 1.0f + u : u;
}

#endif
