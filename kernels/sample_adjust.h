/* What a row's draw sees besides its logits, made in place in the logits
 * by the sampling kernel (sample.hip) and undone after the draw, so that
 * the logits read back are the model's: the slot's logit bias, then a
 * penalized row's penalties over its slot's counted ids (penalty.h), which
 * that row extends with the id it drew. */
#ifndef GPTOSS_KERNELS_SAMPLE_ADJUST_H
#define GPTOSS_KERNELS_SAMPLE_ADJUST_H

#include "device.h"
#include "../contract/device_contract.h"

#include <limits.h>

namespace {

/* The row's logit bias added in place, the logits it replaces kept in
 * replaced (ids are distinct: no two threads meet) */
__device__ __forceinline__ void apply_bias(float *replaced, float *x, const gptoss_logit_bias *b, int n_bias) {
    for (int j = threadIdx.x; j < n_bias; j += blockDim.x) {
        replaced[j] = x[b[j].id];
        x[b[j].id] = replaced[j] + b[j].bias;
    }
}

__device__ __forceinline__ void restore_bias(const float *replaced, float *x, const gptoss_logit_bias *b, int n_bias) {
    for (int j = threadIdx.x; j < n_bias; j += blockDim.x)
        x[b[j].id] = replaced[j];
}

/* The row's slot's counted ids penalized in place, the logits they
 * replace kept in d.saved (ids are distinct: no two threads meet; one row
 * of a slot is penalized in a step: no two blocks meet) */
__device__ __forceinline__ void apply_penalties(float *x, const gptoss_drawn_counts &d, const gptoss_row_sampling &p) {
    const size_t at = (size_t)p.slot * d.cap;
    const int n = d.n[p.slot];
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const int id = d.id[at + j];
        d.saved[at + j] = x[id];
        x[id] = gptoss_penalized_logit(x[id], d.count[at + j], p.presence_penalty, p.frequency_penalty);
    }
}

/* The penalized logits put back, then the drawn token (none when < 0)
 * counted among the slot's ids for its next penalized row; slots: a
 * warp's scratch of block_all */
__device__ __forceinline__ void restore_and_count(int *slots, float *x, const gptoss_drawn_counts &d,
                                                  const gptoss_row_sampling &p, int token) {
    const size_t at = (size_t)p.slot * d.cap;
    const int n = d.n[p.slot];
    int found = INT_MAX;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        x[d.id[at + j]] = d.saved[at + j];
        found = d.id[at + j] == token && j < found ? j : found;
    }
    found = block_all(found, op_min(), slots); /* every thread has read n */
    if (threadIdx.x != 0 || token < 0)
        return;
    if (found < n) {
        d.count[at + found]++;
    } else { /* the host keeps n below cap */
        d.id[at + n] = token;
        d.count[at + n] = 1;
        d.n[p.slot] = n + 1;
    }
}

} // namespace

#endif
