#include "sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "grow.h"
#include "softmax.h"
#include "tensor.h"

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
};

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
    if (bad)
        return gptoss_fail(err, GPTOSS_E_INVALID, "%s (got %g)", bad, got);
    if (p->mode == GPTOSS_SAMPLE_COURSE && (p->top_k != 0 || p->min_p != 0))
        return gptoss_fail(err, GPTOSS_E_INVALID, "the course sampler has no %s",
                           p->top_k ? "top_k" : "min_p");
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
    free(s);
}

const gptoss_sample_params *gptoss_sampler_params(const gptoss_sampler *s) { return &s->p; }
uint64_t gptoss_sampler_state(const gptoss_sampler *s) { return s->state; }

static gptoss_status reserve(gptoss_sampler *s, int n, char *err) {
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

/* NaN and +inf are errors; -inf is a token that can never be chosen.
 * GPTOSS_E_INVALID for an empty row, GPTOSS_E_DRAW when no token can be
 * drawn from it. */
static gptoss_status check_logits(const float *x, int n, char *err) {
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

/* the first maximum, as the course's argmax (strict >); the logits hold no
 * NaN here, so the maximum value and then its first index are two passes
 * the compiler vectorises */
static int argmax(const float *x, int n) {
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
static void sort_ranks(gptoss_sampler *s, int n) {
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

/* ---- course mode ---- */

static float course_random(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    uint32_t u = (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
    return (float)(u >> 8) / 16777216.0f;
}

static int course_sample(gptoss_sampler *s, const float *logits, int n) {
    float *p = s->w;
    for (int i = 0; i < n; i++)
        p[i] = logits[i] / (float)s->p.temperature;
    gptoss_course_softmax(p, n);
    float coin = course_random(&s->state);
    float top_p = (float)s->p.top_p;
    if (top_p <= 0 || top_p >= 1 || n == 1) {
        float cdf = 0;
        for (int i = 0; i < n; i++) {
            cdf += p[i];
            if (coin < cdf)
                return i;
        }
        return n - 1;
    }
    /* tokens below the cutoff cannot be in the top-p set: their total mass
     * is under 1 - top_p */
    float cutoff = (1.0f - top_p) / (float)(n - 1);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (p[i] >= cutoff)
            s->order[kept++] = (ranked){p[i], i};
    /* run.cpp reads before its array when nothing reaches the cutoff (top_p
     * below 1/n on a flat row); the top token alone is what top-p means there */
    if (kept == 0) {
        int top = 0;
        for (int i = 1; i < n; i++)
            if (p[i] > p[top])
                top = i;
        return top;
    }
    sort_ranks(s, kept);
    float cum = 0;
    int last = kept - 1;
    for (int i = 0; i < kept; i++) {
        cum += s->order[i].value;
        if (cum > top_p) {
            last = i;
            break;
        }
    }
    float r = coin * cum, cdf = 0;
    for (int i = 0; i <= last; i++) {
        cdf += s->order[i].value;
        if (r < cdf)
            return s->order[i].id;
    }
    return s->order[last].id;
}

/* ---- default mode ---- */

/* The kept set is a prefix of the ranks (logit desc, id asc). Returns the
 * last kept rank as (logit, id). Candidates are the tokens with w >= tau, an
 * upper set of that order because w rises with the logit; tau is lowered
 * until the candidates hold the whole kept prefix, so the result is the
 * same as sorting the full row, which is the last resort (tau = 0). */
static ranked last_kept(gptoss_sampler *s, const gptoss_sample_params *p, const float *logits, int n,
                        double total) {
    int have_k = p->top_k > 0 && p->top_k < n;
    int have_p = p->top_p > 0 && p->top_p < 1;
    const float *w = s->w;
    for (float tau = 1.0f / 16;; tau = tau > 1e-30f ? tau * tau : 0) {
        int nc = 0;
        for (int i = 0; i < n; i++)
            if (w[i] >= tau || tau == 0)
                s->order[nc++] = (ranked){logits[i], i};
        if (have_k && nc < p->top_k && tau > 0)
            continue;
        sort_ranks(s, nc);
        int len = have_k ? p->top_k : nc;
        if (have_p) {
            double z = 0;
            if (have_k)
                for (int r = 0; r < len; r++)
                    z += w[s->order[r].id];
            else
                z = total;
            double cum = 0, goal = p->top_p * z;
            int reached = 0;
            for (int r = 0; r < len && !reached; r++) {
                cum += w[s->order[r].id];
                if (cum >= goal) {
                    reached = 1;
                    len = r + 1;
                }
            }
            if (!reached && tau > 0)
                continue;
        }
        /* min_p: w falls along the ranks and the top has w = 1 >= min_p */
        while (len > 1 && w[s->order[len - 1].id] < p->min_p)
            len--;
        return s->order[len - 1];
    }
}

static int default_sample(gptoss_sampler *s, const gptoss_sample_params *p, const float *logits, int n,
                          uint64_t position) {
    float *w = s->w;
    float m = logits[argmax(logits, n)];
    double total = 0;
    for (int i = 0; i < n; i++) {
        w[i] = expf((logits[i] - m) / (float)p->temperature);
        total += w[i];
    }
    int filtered = (p->top_k > 0 && p->top_k < n) || (p->top_p > 0 && p->top_p < 1);
    ranked cut = {-INFINITY, n - 1};
    if (filtered)
        cut = last_kept(s, p, logits, n, total);
    double min_w = filtered ? 0 : p->min_p; /* last_kept applied min_p already */
#define KEPT(i) ((logits[i] > cut.value || (logits[i] == cut.value && (i) <= cut.id)) && w[i] >= min_w)
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (KEPT(i))
            sum += w[i];
    double target = gptoss_sample_uniform(p->seed, position) * sum, run = 0;
    int last = -1;
    for (int i = 0; i < n; i++)
        if (KEPT(i) && w[i] > 0) {
            run += w[i];
            last = i;
            if (run > target)
                return i;
        }
#undef KEPT
    return last;
}

int gptoss_sample(gptoss_sampler *s, const float *logits, int n, uint64_t position, char *err) {
    if (s->p.mode == GPTOSS_SAMPLE_DEFAULT)
        return gptoss_sample_with(s, &s->p, logits, n, position, err);
    if (check_logits(logits, n, err))
        return -1;
    if (s->p.temperature == 0)
        return argmax(logits, n);
    if (reserve(s, n, err))
        return -1;
    return course_sample(s, logits, n);
}

int gptoss_sample_with(gptoss_sampler *scratch, const gptoss_sample_params *p, const float *logits,
                       int n, uint64_t position, char *err) {
    if (check_logits(logits, n, err))
        return -1;
    if (p->temperature == 0)
        return argmax(logits, n);
    if (reserve(scratch, n, err))
        return -1;
    return default_sample(scratch, p, logits, n, position);
}

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
    gptoss_status s = check_logits(logits, n, err);
    if (s || (s = reserve(scratch, n, err)))
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

gptoss_row_sampling gptoss_row_sampling_of(const gptoss_sample_params *p, uint64_t position) {
    gptoss_row_sampling rs;
    memset(&rs, 0, sizeof rs);
    rs.seed = p->seed;
    rs.position = position;
    rs.top_p = p->top_p;
    rs.min_p = p->min_p;
    rs.temperature = (float)p->temperature;
    rs.top_k = p->top_k;
    return rs;
}

/* the sampler whose buffers draw_rows uses, made on first need */
static gptoss_sampler *scratch_of(gptoss_sampler **scratch, char *err) {
    static const gptoss_sample_params defaults = {GPTOSS_SAMPLE_DEFAULT, 1.0, 1.0, 0.0, 0, 0};
    if (!*scratch)
        *scratch = gptoss_sampler_new(&defaults, err);
    return *scratch;
}

/* row's token under rs (NULL: greedy), -1 with err when none can be drawn;
 * *seen: the row the draw saw (biased), for its logprobs */
static int draw_row(gptoss_sampler **scratch, const float *row, int vocab, const gptoss_row_sampling *rs,
                    const gptoss_logit_bias *const *slot_bias, const float **seen, char *err) {
    *seen = row;
    if (rs && rs->n_bias &&
        (!scratch_of(scratch, err) ||
         gptoss_bias_row(*scratch, row, vocab, slot_bias[rs->slot], rs->n_bias, seen, err)))
        return -1;
    row = *seen;
    if (!rs || rs->temperature == 0) /* greedy refuses the rows sampling refuses (a NaN would otherwise win) */
        return check_logits(row, vocab, err) ? -1 : (int)gptoss_argmax(GPTOSS_F32, row, (size_t)vocab);
    /* the sampler reads the temperature as a float: the row's is exact */
    gptoss_sample_params p = {GPTOSS_SAMPLE_DEFAULT, rs->temperature, rs->top_p, rs->min_p, rs->top_k, rs->seed};
    return scratch_of(scratch, err) ? gptoss_sample_with(*scratch, &p, row, vocab, rs->position, err) : -1;
}

int gptoss_draw_rows(gptoss_sampler **scratch, const float *logits, int rows, int vocab,
                     const gptoss_row_sampling *sampling, const gptoss_logit_bias *const *slot_bias,
                     int *tokens, gptoss_row_logprobs *logprobs, char *why) {
    int bad = -1;
    for (int r = 0; r < rows; r++) {
        const gptoss_row_sampling *rs = sampling ? &sampling[r] : NULL;
        const float *seen;
        char err[GPTOSS_ERR_LEN - 16];
        tokens[r] = draw_row(scratch, logits + (size_t)r * vocab, vocab, rs, slot_bias, &seen, err);
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
    if (check_logits(logits, n, err))
        return -1;
    double m = logits[argmax(logits, n)], sum = 0;
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
