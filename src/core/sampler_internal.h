/* Inside a sampler: what sampler.c (the sampler, its buffers, the checks
 * and the ranking every draw shares, gptoss_sample and gptoss_sample_with),
 * sampler_course.c (the course mode's draw), sampler_default.c (the default
 * mode's draw), sampler_rows.c (logit bias, logprobs, gptoss_draw_rows) and
 * sampler_penalty.c (penalties and the counts they read) share. Not part of the sampler's interface (sampler.h, which device code
 * includes too); host C only. */
#ifndef GPTOSS_SAMPLER_INTERNAL_H
#define GPTOSS_SAMPLER_INTERNAL_H

#include <stdint.h>

#include "sampler.h"

typedef struct {
    float value;
    int32_t id;
} ranked;

struct gptoss_sampler {
    gptoss_sample_params p;
    uint64_t state; /* course xorshift64* */
    int cap;
    float *w;
    float *biased; /* the row under a logit bias (gptoss_bias_row) */
    ranked *order;
    uint64_t *keys, *spare; /* radix sort of long rank lists */
    gptoss_drawn_counts drawn; /* the ids its own penalized draws counted (gptoss_sampler_count) */
    int32_t n_drawn;           /* drawn's n */
};

/* s's buffers for a row of n logits; GPTOSS_E_HOST_MEMORY */
gptoss_status gptoss_sampler_reserve(gptoss_sampler *s, int n, char *err);
/* *row as s's own copy (s->biased) that a rule may change: copied unless
 * it is that already; NULL with err set when memory is short */
float *gptoss_sampler_row_copy(gptoss_sampler *s, const float **row, int n, char *err);
/* NaN and +inf are errors; -inf is a token that can never be chosen.
 * GPTOSS_E_INVALID for an empty row, GPTOSS_E_DRAW when no token can be
 * drawn from it. */
gptoss_status gptoss_sampler_check_logits(const float *x, int n, char *err);
/* the first maximum, as the course's argmax (strict >); the logits hold no
 * NaN here, so the maximum value and then its first index are two passes
 * the compiler vectorises */
int gptoss_sampler_argmax(const float *x, int n);
/* Sorts s->order[0..n) by value descending, then id ascending. */
void gptoss_sampler_sort_ranks(gptoss_sampler *s, int n);

/* The course mode's draw at temperature > 0 (sampler_course.c), s's
 * buffers reserved for n. */
int gptoss_course_sample(gptoss_sampler *s, const float *logits, int n);
/* The default mode's draw under p at temperature > 0 (sampler_default.c),
 * scratch's buffers reserved for n. */
int gptoss_default_sample(gptoss_sampler *s, const gptoss_sample_params *p, const float *logits, int n,
                          uint64_t position);

#endif
