/* The sampler (sampler.h): its parameters, lifecycle and buffers, the
 * logits checks and the ranking both modes share, and the draw's entry
 * points, which hand a row to the course mode (sampler_course.c) or the
 * default mode (sampler_default.c). Logit bias, logprobs and
 * gptoss_draw_rows are sampler_rows.c's. */
#include "sampler_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grow.h"

gptoss_status gptoss_sample_params_check(const gptoss_sample_params *p, char *err) {
    const char *bad = NULL;
    double got = 0;
    if (!(p->temperature >= 0) || isinf((float)p->temperature))
        bad = "temperature must be a finite number >= 0", got = p->temperature;
    else if (p->temperature > 0 && (float)p->temperature == 0)
        bad = "temperature is too small for float arithmetic (0 means greedy)", got = p->temperature;
    else if (!(p->top_p >= 0 && p->top_p <= 1))
        bad = "top_p must be within [0, 1]", got = p->top_p;
    else if (!(p->min_p >= 0 && p->min_p <= 1))
        bad = "min_p must be within [0, 1]", got = p->min_p;
    else if (p->top_k < 0)
        bad = "top_k must be >= 0 (0 turns it off)", got = p->top_k;
    else if (!(fabs(p->presence_penalty) <= GPTOSS_MAX_PENALTY))
        bad = "presence_penalty must be within [-2, 2]", got = p->presence_penalty;
    else if (!(fabs(p->frequency_penalty) <= GPTOSS_MAX_PENALTY))
        bad = "frequency_penalty must be within [-2, 2]", got = p->frequency_penalty;
    if (bad)
        return gptoss_fail(err, GPTOSS_E_INVALID, "%s (got %g)", bad, got);
    const char *missing = p->top_k              ? "top_k"
                          : p->min_p            ? "min_p"
                          : p->presence_penalty ? "presence_penalty"
                                                : "frequency_penalty";
    if (p->mode == GPTOSS_SAMPLE_COURSE && (p->top_k != 0 || p->min_p != 0 || gptoss_sample_penalized(p)))
        return gptoss_fail(err, GPTOSS_E_INVALID, "the course sampler has no %s", missing);
    return GPTOSS_OK;
}

gptoss_sampler *gptoss_sampler_new(const gptoss_sample_params *p, char *err) {
    char why[GPTOSS_ERR_LEN - 16];
    if (gptoss_sample_params_check(p, why)) {
        snprintf(err, GPTOSS_ERR_LEN, "sampler: %s", why);
        return NULL;
    }
    gptoss_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, GPTOSS_ERR_LEN, "sampler: out of host memory");
        return NULL;
    }
    s->p = *p;
    s->state = p->seed;
    s->drawn.n = &s->n_drawn;
    return s;
}

void gptoss_sampler_free(gptoss_sampler *s) {
    if (!s)
        return;
    free(s->w);
    free(s->biased);
    free(s->order);
    free(s->keys);
    free(s->spare);
    free(s->drawn.id);
    free(s->drawn.count);
    free(s);
}

const gptoss_sample_params *gptoss_sampler_params(const gptoss_sampler *s) { return &s->p; }
uint64_t gptoss_sampler_state(const gptoss_sampler *s) { return s->state; }

gptoss_status gptoss_sampler_reserve(gptoss_sampler *s, int n, char *err) {
    if (n <= s->cap)
        return GPTOSS_OK;
    size_t m = (size_t)n;
    if (gptoss_grow(&s->w, m * sizeof *s->w) || gptoss_grow(&s->biased, m * sizeof *s->biased) ||
        gptoss_grow(&s->order, m * sizeof *s->order) ||
        gptoss_grow(&s->keys, m * sizeof *s->keys) || gptoss_grow(&s->spare, m * sizeof *s->spare))
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                           "sampler: out of host memory for a row of %d logits", n);
    s->cap = n;
    return GPTOSS_OK;
}

gptoss_status gptoss_sampler_check_logits(const float *x, int n, char *err) {
    if (n <= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "sampler: the logits row is empty");
    /* one branch-free pass (it vectorises); the offender is looked up only on failure */
    int bad = 0, any = 0;
    for (int i = 0; i < n; i++) {
        bad |= (x[i] != x[i]) | (x[i] == INFINITY);
        any |= x[i] != -INFINITY;
    }
    for (int i = 0; bad && i < n; i++)
        if (isnan(x[i]) || x[i] == INFINITY)
            return gptoss_fail(err, GPTOSS_E_DRAW, "sampler: the logit of token %d is %s", i,
                               isnan(x[i]) ? "NaN" : "+inf");
    if (!any)
        return gptoss_fail(err, GPTOSS_E_DRAW,
                           "sampler: every logit is -inf, no token can be chosen");
    return GPTOSS_OK;
}

int gptoss_sampler_argmax(const float *x, int n) {
    float top = x[0];
    for (int i = 1; i < n; i++)
        top = x[i] > top ? x[i] : top;
    int i = 0;
    while (x[i] != top)
        i++;
    return i;
}

/* value descending, then id ascending: the order that makes ties reproducible */
static int by_rank(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Sorts s->order[0..n) as by_rank does. Long lists (a flat row under top-p
 * ranks nearly the whole vocabulary) go through an LSD radix sort of
 * (value descending, id ascending) packed in 64 bits, about ten times
 * faster than qsort there. */
void gptoss_sampler_sort_ranks(gptoss_sampler *s, int n) {
    if (n < 4096) {
        qsort(s->order, (size_t)n, sizeof *s->order, by_rank);
        return;
    }
    uint64_t *keys = s->keys, *spare = s->spare;
    for (int i = 0; i < n; i++) {
        union { float f; uint32_t u; } v = {s->order[i].value + 0.0f}; /* -0 sorts as +0 */
        uint32_t up = v.u & 0x80000000u ? ~v.u : v.u | 0x80000000u; /* ascending as unsigned */
        keys[i] = (uint64_t)~up << 32 | (uint32_t)s->order[i].id;
    }
    for (int shift = 0; shift < 64; shift += 8) {
        uint32_t count[256] = {0};
        for (int i = 0; i < n; i++)
            count[keys[i] >> shift & 0xFF]++;
        if (count[keys[0] >> shift & 0xFF] == (uint32_t)n)
            continue; /* every key has this digit: the pass would move nothing */
        uint32_t sum = 0;
        for (int d = 0; d < 256; d++) {
            uint32_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (int i = 0; i < n; i++)
            spare[count[keys[i] >> shift & 0xFF]++] = keys[i];
        uint64_t *t = keys;
        keys = spare;
        spare = t;
    }
    for (int i = 0; i < n; i++) {
        uint32_t up = ~(uint32_t)(keys[i] >> 32);
        union { uint32_t u; float f; } v = {up & 0x80000000u ? up & 0x7FFFFFFFu : ~up};
        s->order[i] = (ranked){v.f, (int32_t)(uint32_t)keys[i]};
    }
}

int gptoss_sample(gptoss_sampler *s, const float *logits, int n, uint64_t position, char *err) {
    if (s->p.mode == GPTOSS_SAMPLE_DEFAULT)
        return gptoss_sample_with(s, &s->p, logits, n, position, err);
    if (gptoss_sampler_check_logits(logits, n, err))
        return -1;
    if (s->p.temperature == 0)
        return gptoss_sampler_argmax(logits, n);
    if (gptoss_sampler_reserve(s, n, err))
        return -1;
    return gptoss_course_sample(s, logits, n);
}

int gptoss_sample_with(gptoss_sampler *scratch, const gptoss_sample_params *p, const float *logits,
                       int n, uint64_t position, char *err) {
    if (gptoss_sampler_check_logits(logits, n, err))
        return -1;
    if (p->temperature == 0)
        return gptoss_sampler_argmax(logits, n);
    if (gptoss_sampler_reserve(scratch, n, err))
        return -1;
    return gptoss_default_sample(scratch, p, logits, n, position);
}
