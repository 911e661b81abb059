/* YaRN rotary embedding tables, computed exactly as the course's run.cpp does
 * (docs/course.md#per-token, step 2.4): float arithmetic throughout, unrounded low/high
 * bounds, both cos and sin multiplied by the concentration. The GPU engine
 * uploads the same inv_freq table so that angles agree bit for bit. */
#ifndef GPTOSS_ROPE_H
#define GPTOSS_ROPE_H

#include "config.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

typedef struct {
    int half;            /* head_dim / 2 */
    float concentration; /* 0.1*ln(s)+1 with YaRN, else 1 */
    float *inv_freq;     /* half entries */
} gptoss_rope;

gptoss_status gptoss_rope_init(gptoss_rope *r, const gptoss_config *c, char *err);
void gptoss_rope_free(gptoss_rope *r);

/* cos/sin (half entries each) for one position. */
void gptoss_rope_cos_sin(const gptoss_rope *r, int pos, float *cos_out, float *sin_out);

/* Half-split rotation of n_heads heads of head_dim values, in place. */
void gptoss_rope_apply(float *x, const float *cos_v, const float *sin_v, int n_heads, int head_dim);

#ifdef __cplusplus
}
#endif

#endif
