/* Choosing a token from a row of logits.
 *
 * GPTOSS_SAMPLE_COURSE is run.cpp's sampler: greedy at temperature 0, else
 * temperature, the course softmax, one xorshift64* draw, then multinomial
 * (top_p outside (0,1)) or the course's top-p. Its state advances with every
 * non-greedy draw, as the course's one shared sampler does.
 *
 * GPTOSS_SAMPLE_DEFAULT is ours, defined so that a GPU kernel can reproduce
 * it (docs/api.md#default-mode is the normative text):
 *   a logit bias, when given, is added to the logits first (gptoss_bias_row),
 *     then the penalties of the ids drawn before (gptoss_penalty_row);
 *     everything below sees that row.
 *   invalid logits: NaN or +inf raise an error; -inf means "never"; a row of
 *     only -inf raises an error.
 *   temperature 0: the first maximum logit (greedy).
 *   otherwise, with m the largest logit and ranks ordered by (logit desc, id asc):
 *     w_i = expf((logit_i - m) / (float)temperature)       float, so w = 1 at the top
 *     top_k > 0:        keep the first top_k ranks
 *     0 < top_p < 1:    keep the shortest rank prefix whose w-sum (double, in rank
 *                       order) reaches top_p * (w-sum of what top_k kept)
 *     min_p > 0:        keep ranks with w_i >= min_p   (p_i >= min_p * p_max)
 *     u = gptoss_sample_uniform(seed, position)
 *     walk the kept ids in ascending id order summing w in double; return the
 *     first id whose running sum exceeds u * (w-sum of the kept set), else the
 *     last kept id.
 * The draw depends only on (seed, position), never on the batch or on earlier
 * draws. */
#ifndef GPTOSS_SAMPLER_H
#define GPTOSS_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "counter_rng.h"
#include "../../contract/device_contract.h" /* the rows' sampling, logit bias and logprobs */
#include "status.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

typedef enum { GPTOSS_SAMPLE_DEFAULT = 0, GPTOSS_SAMPLE_COURSE = 1 } gptoss_sample_mode;

typedef struct {
    gptoss_sample_mode mode;
    double temperature; /* >= 0; the arithmetic uses it as a float */
    double top_p;       /* [0, 1]; the course mode uses it as a float */
    double min_p;       /* [0, 1], default mode */
    int top_k;         /* >= 0, 0 = off, default mode */
    uint64_t seed;     /* default mode: the draw key; course mode: the initial xorshift state */
    /* [-2, 2], default mode, used as floats: penalty.h's rule over the ids
     * drawn since they were set (0 and 0: none) */
    double presence_penalty, frequency_penalty;
} gptoss_sample_params;

/* whether p penalizes the ids drawn before */
static inline int gptoss_sample_penalized(const gptoss_sample_params *p) {
    return p->presence_penalty != 0 || p->frequency_penalty != 0;
}

/* why a row cannot be drawn when its bias is to blame */
#define GPTOSS_BIAS_BANS_ALL "logit_bias bans every token that could be chosen (every logit is -inf after the bias)"
/* why a row cannot be drawn when its constraint's mask is to blame */
#define GPTOSS_MASK_BANS_ALL "the constraint allows no token whose logit is above -inf (after any logit_bias)"

/* A slot's default-mode parameters (checked) as one row's sampling, keyed
 * by the position the row's token will take (penalize is the caller's). */
gptoss_row_sampling gptoss_row_sampling_of(const gptoss_sample_params *p, uint64_t position);

typedef struct gptoss_sampler gptoss_sampler;

/* GPTOSS_E_INVALID with err set (no prefix) when a parameter is out of
 * range or the course mode is given top_k or min_p */
gptoss_status gptoss_sample_params_check(const gptoss_sample_params *p, char *err);

/* NULL with err set on a parameter out of range or when memory is short */
gptoss_sampler *gptoss_sampler_new(const gptoss_sample_params *p, char *err);
void gptoss_sampler_free(gptoss_sampler *s);
const gptoss_sample_params *gptoss_sampler_params(const gptoss_sampler *s);
/* the course mode's xorshift64* state */
uint64_t gptoss_sampler_state(const gptoss_sampler *s);
/* The ids s's penalized draws counted (one slot, 0), for gptoss_penalty_row,
 * and id counted once more (the table grows; GPTOSS_E_HOST_MEMORY). */
const gptoss_drawn_counts *gptoss_sampler_drawn(const gptoss_sampler *s);
gptoss_status gptoss_sampler_count(gptoss_sampler *s, int id, char *err);

/* Returns the chosen id, or -1 with err set (invalid logits, no memory).
 * position keys the default mode's draw and is unused by the course mode. */
int gptoss_sample(gptoss_sampler *s, const float *logits, int n, uint64_t position, char *err);

/* A default-mode draw under p (already checked), using scratch only for its
 * buffers: one scratch sampler serves rows of many per-slot settings. */
int gptoss_sample_with(gptoss_sampler *scratch, const gptoss_sample_params *p, const float *logits,
                       int n, uint64_t position, char *err);

/* GPTOSS_E_INVALID with err set (no prefix) unless the n entries of b are
 * at most GPTOSS_MAX_LOGIT_BIAS, in ascending id order, each id once and
 * within 0..vocab-1 (any id >= 0 when vocab <= 0), each bias -inf or finite. */
gptoss_status gptoss_logit_bias_check(const gptoss_logit_bias *b, int n, int vocab, char *err);

/* The row a draw sees under the n_bias entries of b (checked): *out is
 * logits itself when there are none, else a copy in scratch's buffer with
 * each entry's bias added. Fails as a draw would on invalid logits, on an id
 * outside the row, and with GPTOSS_E_DRAW (GPTOSS_BIAS_BANS_ALL) when the
 * biases leave no token that could be chosen. */
gptoss_status gptoss_bias_row(gptoss_sampler *scratch, const float *logits, int n, const gptoss_logit_bias *b,
                              int n_bias, const float **out, char *err);

/* The row a constrained draw sees: *row (logits, or the biased copy
 * gptoss_bias_row made) with every token mask does not allow at -inf, in
 * scratch's buffer; the draw's filters and logprobs then see only the
 * allowed tokens. GPTOSS_E_DRAW (GPTOSS_MASK_BANS_ALL) when no allowed
 * token's logit is above -inf. */
gptoss_status gptoss_mask_row(gptoss_sampler *scratch, const float **row, int n, const uint32_t *mask, char *err);

/* The row a penalized draw sees: *row (logits, or the copy an earlier rule
 * made) with each id slot counted in c at gptoss_penalized_logit, in
 * scratch's buffer. GPTOSS_E_INVALID for a counted id outside the row. */
gptoss_status gptoss_penalty_row(gptoss_sampler *scratch, const float **row, int n, const gptoss_drawn_counts *c,
                                 int slot, float presence, float frequency, char *err);

/* id counted once more among slot's ids in c (host memory); GPTOSS_E_INVALID
 * when slot holds c->cap distinct ids already. */
gptoss_status gptoss_drawn_counts_add(gptoss_drawn_counts *c, int slot, int id, char *err);

/* One token for each of the n rows of a batch that rows lists (0-based,
 * ascending; NULL: rows 0..n-1), from logits [n][vocab] (row k of logits is
 * rows[k]'s), as the GPU sampler draws them: each row's logits plus its
 * slot's bias (slot_bias[slot], n_bias entries; slot_bias may be NULL when
 * no row has any), penalized where its sampling says penalize (its slot's
 * ids in drawn, which counts the id the row draws; drawn may be NULL when no
 * row penalizes), masked where its sampling names a mask (row r's is
 * masks + (sampling[r].mask - 1) * gptoss_mask_words(vocab); masks may be
 * NULL when no row has any); then a row without sampling (sampling NULL) or at
 * temperature 0 takes the first maximum, NaN never winning; any other
 * follows gptoss_sample_with. A row that cannot be drawn gets -1. sampling,
 * tokens and logprobs are indexed by the batch's rows; logprobs (NULL, or
 * [rows]) receives each row's gptoss_logprobs where it asks (n_top -1
 * elsewhere). Returns the first row that cannot be drawn with why set ("row
 * N: ..." in 1-based rows), or -1. *scratch is made when the first row
 * needs it and may be reused by later calls. */
int gptoss_draw_rows(gptoss_sampler **scratch, const float *logits, const int *rows, int n, int vocab,
                     const gptoss_row_sampling *sampling, const gptoss_logit_bias *const *slot_bias,
                     const uint32_t *masks, gptoss_drawn_counts *drawn, int *tokens, gptoss_row_logprobs *logprobs,
                     char *why);

/* log-softmax of the logits given (a draw's: after bias, penalties and
 * mask; temperature 1, before any filter), in
 * double: fills lp with the value for id, and the top_n highest-logit ids
 * (logit desc, id asc) with theirs. -1 with err on invalid logits. */
int gptoss_logprobs(const float *logits, int n, int id, int top_n, double *lp, int *top_ids,
                    double *top_lps, char *err);

#ifdef __cplusplus
}
#endif

#endif
