#include "rope.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "course_math.h"

/* ntk_beta and ntk_alpha are hard-coded in run.cpp's forward, not in the
 * header. The float/double mix below is deliberate: (beta * 2.0f) is float,
 * times M_PI promotes to double, and logf takes the quotient back to float. */
static const float NTK_BETA = 32.0f;
static const float NTK_ALPHA = 1.0f;
static const double PI = 3.14159265358979323846; /* M_PI, which strict C11 lacks */

void gptoss_rope_bounds(const gptoss_config *c, float *low, float *high) {
    int half = c->head_dim / 2;
    float ctx = (float)c->initial_context_length;
    float base = c->rope_theta;
    *low = half * logf((float)(ctx / (NTK_BETA * 2.0f * PI))) / logf(base);
    *high = half * logf((float)(ctx / (NTK_ALPHA * 2.0f * PI))) / logf(base);
}

#define NAME(field) gptoss_field_name(names, offsetof(gptoss_config, field))
gptoss_status gptoss_rope_check(const gptoss_config *c, const char *const *names, char *err) {
    if (!(c->rope_scaling_factor > 1.0f))
        return GPTOSS_OK;
    float low, high;
    gptoss_rope_bounds(c, &low, &high);
    int half = c->head_dim / 2;
    if (!(0 < low && low < high && high < half - 1))
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "rope: YaRN bounds low=%g high=%g must satisfy 0 < low < high < "
                           "%s/2-1 = %d (%s=%d, %s=%d, %s=%g)",
                           low, high, NAME(head_dim), half - 1, NAME(head_dim), c->head_dim,
                           NAME(initial_context_length), c->initial_context_length, NAME(rope_theta),
                           c->rope_theta);
    return GPTOSS_OK;
}
#undef NAME

gptoss_status gptoss_rope_init(gptoss_rope *r, const gptoss_config *c, char *err) {
    gptoss_status st = gptoss_rope_check(c, NULL, err);
    if (st)
        return st;
    int half = c->head_dim / 2;
    r->half = half;
    r->inv_freq = malloc(sizeof(float) * (size_t)half);
    if (!r->inv_freq)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "rope: out of host memory");
    float base = c->rope_theta, s = c->rope_scaling_factor;
    if (s > 1.0f) {
        r->concentration = 0.1f * logf(s) + 1.0f;
        float low, high;
        gptoss_rope_bounds(c, &low, &high);
        for (int i = 0; i < half; i++) {
            float freq = powf(base, (float)(2 * i) / (float)c->head_dim);
            float interpolation = 1.0f / (s * freq);
            float extrapolation = 1.0f / freq;
            float ramp = ((float)i - low) / (high - low);
            if (ramp < 0)
                ramp = 0;
            if (ramp > 1)
                ramp = 1;
            /* run.cpp weights by (1 - (1 - ramp)), which is not always ramp
             * in float: keep its form. */
            float keep = 1.0f - ramp;
            r->inv_freq[i] = interpolation * (1.0f - keep) + extrapolation * keep;
        }
    } else {
        r->concentration = 1.0f;
        for (int i = 0; i < half; i++)
            r->inv_freq[i] = 1.0f / powf(base, (float)(2 * i) / (float)c->head_dim);
    }
    return GPTOSS_OK;
}

void gptoss_rope_free(gptoss_rope *r) {
    free(r->inv_freq);
    r->inv_freq = NULL;
}

void gptoss_rope_cos_sin(const gptoss_rope *r, int pos, float *cos_out, float *sin_out) {
    for (int j = 0; j < r->half; j++) {
        float angle = (float)pos * r->inv_freq[j];
        cos_out[j] = cosf(angle) * r->concentration;
        sin_out[j] = sinf(angle) * r->concentration;
    }
}

void gptoss_rope_apply(float *x, const float *cos_v, const float *sin_v, int n_heads, int head_dim) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++)
            gptoss_rope_rotate(v[i], v[i + half], cos_v[i], sin_v[i], &v[i], &v[i + half]);
    }
}
