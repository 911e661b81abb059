/* Presence and frequency penalties on the host (sampler.h): a row under a
 * slot's counted ids, and the counts kept as penalized rows draw. The GPU's
 * sampler (kernels/sample.hip) applies the same rule (penalty.h) to the same
 * counts, kept on the device. */
#include "sampler_internal.h"

#include "grow.h"

gptoss_status gptoss_penalty_row(gptoss_sampler *scratch, const float **row, int n, const gptoss_drawn_counts *c,
                                 int slot, float presence, float frequency, char *err) {
    const int32_t *id = c->id + (size_t)slot * (size_t)c->cap, *count = c->count + (size_t)slot * (size_t)c->cap;
    int counted = c->n[slot];
    for (int j = 0; j < counted; j++)
        if (id[j] >= n)
            return gptoss_fail(err, GPTOSS_E_INVALID,
                               "sampler: token %d, drawn before and penalized, is outside the row of %d logits",
                               (int)id[j], n);
    float *x = gptoss_sampler_row_copy(scratch, row, n, err);
    if (!x)
        return GPTOSS_E_HOST_MEMORY;
    for (int j = 0; j < counted; j++)
        x[id[j]] = gptoss_penalized_logit(x[id[j]], count[j], presence, frequency);
    return GPTOSS_OK;
}

gptoss_status gptoss_drawn_counts_add(gptoss_drawn_counts *c, int slot, int id, char *err) {
    int32_t *ids = c->id + (size_t)slot * (size_t)c->cap, *count = c->count + (size_t)slot * (size_t)c->cap;
    int counted = c->n[slot], j = 0;
    while (j < counted && ids[j] != id)
        j++;
    if (j < counted) {
        count[j]++;
        return GPTOSS_OK;
    }
    if (counted == c->cap)
        return gptoss_fail(err, GPTOSS_E_INVALID, "the penalties have counted %d distinct ids already, their most",
                           (int)c->cap);
    ids[counted] = id;
    count[counted] = 1;
    c->n[slot] = counted + 1;
    return GPTOSS_OK;
}

const gptoss_drawn_counts *gptoss_sampler_drawn(const gptoss_sampler *s) { return &s->drawn; }

gptoss_status gptoss_sampler_count(gptoss_sampler *s, int id, char *err) {
    gptoss_drawn_counts *c = &s->drawn;
    if (s->n_drawn == c->cap) {
        size_t cap = c->cap ? 2 * (size_t)c->cap : 64;
        if (cap > INT32_MAX || gptoss_grow(&c->id, cap * sizeof *c->id) || gptoss_grow(&c->count, cap * sizeof *c->count))
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "sampler: out of host memory for the penalties' counts");
        c->cap = (int32_t)cap;
    }
    return gptoss_drawn_counts_add(c, 0, id, err);
}
