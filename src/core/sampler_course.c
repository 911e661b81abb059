/* The course mode's draw (sampler.h: GPTOSS_SAMPLE_COURSE): run.cpp's
 * xorshift64* coin, temperature, the course softmax, then multinomial or
 * the course's top-p. */
#include "sampler_internal.h"

#include "softmax.h"

static float course_random(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    uint32_t u = (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
    return (float)(u >> 8) / 16777216.0f;
}

int gptoss_course_sample(gptoss_sampler *s, const float *logits, int n) {
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
    gptoss_sampler_sort_ranks(s, kept);
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
