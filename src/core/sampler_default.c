/* The default mode's draw (sampler.h: GPTOSS_SAMPLE_DEFAULT,
 * docs/api.md#default-mode), whose ids the GPU's sampler
 * (kernels/sample.hip) gives too: the weights, the kept rank prefix under
 * top_k, top_p and min_p, then the walk in id order to the counter-based
 * coin. */
#include "sampler_internal.h"

#include <math.h>

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
        gptoss_sampler_sort_ranks(s, nc);
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

int gptoss_default_sample(gptoss_sampler *s, const gptoss_sample_params *p, const float *logits, int n,
                          uint64_t position) {
    float *w = s->w;
    float m = logits[gptoss_sampler_argmax(logits, n)];
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
