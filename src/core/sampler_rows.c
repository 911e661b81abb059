/* Rows as the engines draw them (sampler.h): logit bias checked and added,
 * a slot's parameters as a row's sampling, gptoss_draw_rows, and the
 * logprobs of a row. Penalties are sampler_penalty.c's. */
#include "sampler_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tensor.h"

gptoss_status gptoss_logit_bias_check(const gptoss_logit_bias *b, int n, int vocab, char *err) {
    if (n < 0 || n > GPTOSS_MAX_LOGIT_BIAS)
        return gptoss_fail(err, GPTOSS_E_INVALID, "logit_bias has %d entries; at most %d", n,
                           GPTOSS_MAX_LOGIT_BIAS);
    for (int i = 0; i < n; i++) {
        if (b[i].id < 0 || (vocab > 0 && b[i].id >= vocab))
            return gptoss_fail(err, GPTOSS_E_INVALID, "logit_bias: token %d is out of range 0..%d", (int)b[i].id,
                               vocab - 1);
        if (i > 0 && b[i].id <= b[i - 1].id)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "logit_bias: entries must be in ascending id order, each id once (%d follows %d)",
                               (int)b[i].id, (int)b[i - 1].id);
        if (isnan(b[i].bias) || b[i].bias == INFINITY)
            return gptoss_fail(err, GPTOSS_E_INVALID, "logit_bias: token %d's bias is %g; a bias is finite or -inf",
                               (int)b[i].id, (double)b[i].bias);
    }
    return GPTOSS_OK;
}

gptoss_status gptoss_bias_row(gptoss_sampler *scratch, const float *logits, int n, const gptoss_logit_bias *b,
                              int n_bias, const float **out, char *err) {
    *out = logits;
    if (n_bias == 0)
        return GPTOSS_OK;
    gptoss_status s = gptoss_sampler_check_logits(logits, n, err);
    if (s || (s = gptoss_sampler_reserve(scratch, n, err)))
        return s;
    for (int i = 0; i < n_bias; i++)
        if (b[i].id >= n)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "sampler: logit_bias names token %d, outside the row of %d logits", (int)b[i].id, n);
    float *x = scratch->biased;
    memcpy(x, logits, sizeof *x * (size_t)n);
    for (int i = 0; i < n_bias; i++)
        x[b[i].id] += b[i].bias;
    int any = 0;
    for (int i = 0; i < n && !any; i++)
        any = x[i] != -INFINITY;
    if (!any)
        return gptoss_fail(err, GPTOSS_E_DRAW, "sampler: " GPTOSS_BIAS_BANS_ALL);
    *out = x;
    return GPTOSS_OK;
}

float *gptoss_sampler_row_copy(gptoss_sampler *s, const float **row, int n, char *err) {
    if (gptoss_sampler_reserve(s, n, err))
        return NULL;
    float *x = s->biased;
    if (*row != x)
        memcpy(x, *row, sizeof *x * (size_t)n);
    *row = x;
    return x;
}

gptoss_status gptoss_mask_row(gptoss_sampler *scratch, const float **row, int n, const uint32_t *mask, char *err) {
    float *x = gptoss_sampler_row_copy(scratch, row, n, err);
    if (!x)
        return GPTOSS_E_HOST_MEMORY;
    int any = 0;
    for (int i = 0; i < n; i++) {
        x[i] = gptoss_masked_logit(x, mask, i);
        any |= x[i] != -INFINITY;
    }
    return any ? GPTOSS_OK : gptoss_fail(err, GPTOSS_E_DRAW, "sampler: " GPTOSS_MASK_BANS_ALL);
}

gptoss_row_sampling gptoss_row_sampling_of(const gptoss_sample_params *p, uint64_t position) {
    gptoss_row_sampling rs;
    memset(&rs, 0, sizeof rs);
    rs.seed = p->seed;
    rs.position = position;
    rs.top_p = p->top_p;
    rs.min_p = p->min_p;
    rs.temperature = (float)p->temperature;
    rs.top_k = p->top_k;
    rs.presence_penalty = (float)p->presence_penalty;
    rs.frequency_penalty = (float)p->frequency_penalty;
    return rs;
}

/* the sampler whose buffers draw_rows uses, made on first need */
static gptoss_sampler *scratch_of(gptoss_sampler **scratch, char *err) {
    static const gptoss_sample_params defaults = {GPTOSS_SAMPLE_DEFAULT, 1.0, 1.0, 0.0, 0, 0, 0, 0};
    if (!*scratch)
        *scratch = gptoss_sampler_new(&defaults, err);
    return *scratch;
}

/* row's token under rs (NULL: greedy), -1 with err when none can be drawn;
 * *seen: the row the draw saw (biased, penalized, masked), for its logprobs */
static int draw_row(gptoss_sampler **scratch, const float *row, int vocab, const gptoss_row_sampling *rs,
                    const gptoss_logit_bias *const *slot_bias, const uint32_t *masks,
                    const gptoss_drawn_counts *drawn, const float **seen, char *err) {
    *seen = row;
    if (rs && rs->n_bias &&
        (!scratch_of(scratch, err) ||
         gptoss_bias_row(*scratch, row, vocab, slot_bias[rs->slot], rs->n_bias, seen, err)))
        return -1;
    if (rs && rs->penalize &&
        (!scratch_of(scratch, err) || gptoss_penalty_row(*scratch, seen, vocab, drawn, rs->slot, rs->presence_penalty,
                                                         rs->frequency_penalty, err)))
        return -1;
    /* a masked token's logit is never read, as on the GPU */
    if (rs && rs->mask &&
        (!scratch_of(scratch, err) ||
         gptoss_mask_row(*scratch, seen, vocab, masks + (size_t)(rs->mask - 1) * gptoss_mask_words(vocab), err)))
        return -1;
    row = *seen;
    if (!rs || rs->temperature == 0) /* greedy refuses the rows sampling refuses (a NaN would otherwise win) */
        return gptoss_sampler_check_logits(row, vocab, err) ? -1 : (int)gptoss_argmax(GPTOSS_F32, row, (size_t)vocab);
    /* the sampler reads the temperature as a float: the row's is exact; row holds the penalties already */
    gptoss_sample_params p = {GPTOSS_SAMPLE_DEFAULT, rs->temperature, rs->top_p, rs->min_p, rs->top_k, rs->seed, 0, 0};
    return scratch_of(scratch, err) ? gptoss_sample_with(*scratch, &p, row, vocab, rs->position, err) : -1;
}

int gptoss_draw_rows(gptoss_sampler **scratch, const float *logits, const int *rows, int n, int vocab,
                     const gptoss_row_sampling *sampling, const gptoss_logit_bias *const *slot_bias,
                     const uint32_t *masks, gptoss_drawn_counts *drawn, int *tokens, gptoss_row_logprobs *logprobs,
                     char *why) {
    int bad = -1;
    for (int k = 0; k < n; k++) {
        int r = rows ? rows[k] : k;
        const gptoss_row_sampling *rs = sampling ? &sampling[r] : NULL;
        const float *seen;
        char err[GPTOSS_ERR_LEN - 24]; /* room for "row N: " */
        tokens[r] = draw_row(scratch, logits + (size_t)k * vocab, vocab, rs, slot_bias, masks, drawn, &seen, err);
        /* the slot's next penalized row sees this id counted */
        if (tokens[r] >= 0 && rs && rs->penalize && gptoss_drawn_counts_add(drawn, rs->slot, tokens[r], err))
            tokens[r] = -1;
        if (tokens[r] < 0 && bad < 0) {
            bad = r;
            snprintf(why, GPTOSS_ERR_LEN, "row %d: %s", r + 1, err);
        }
        if (!logprobs)
            continue;
        gptoss_row_logprobs *lp = &logprobs[r];
        lp->n_top = -1;
        if (tokens[r] >= 0 && rs && rs->want_logprobs) /* the row is valid: this cannot fail */
            lp->n_top = gptoss_logprobs(seen, vocab, tokens[r], rs->top_logprobs, &lp->logprob, lp->top_id,
                                        lp->top_logprob, err);
    }
    return bad;
}

int gptoss_logprobs(const float *logits, int n, int id, int top_n, double *lp, int *top_ids,
                    double *top_lps, char *err) {
    if (gptoss_sampler_check_logits(logits, n, err))
        return -1;
    double m = logits[gptoss_sampler_argmax(logits, n)], sum = 0;
    for (int i = 0; i < n; i++)
        sum += exp((double)logits[i] - m);
    double lse = m + log(sum);
    *lp = (double)logits[id] - lse;
    /* insertion into a short sorted list: top_n is small (at most 20) */
    int have = 0;
    for (int i = 0; i < n; i++) {
        int at = have;
        while (at > 0 && logits[i] > logits[top_ids[at - 1]])
            at--;
        if (at >= top_n)
            continue;
        int end = have < top_n ? have : top_n - 1;
        memmove(top_ids + at + 1, top_ids + at, sizeof *top_ids * (size_t)(end - at));
        top_ids[at] = i;
        if (have < top_n)
            have++;
    }
    for (int k = 0; k < have; k++)
        top_lps[k] = (double)logits[top_ids[k]] - lse;
    return have;
}
