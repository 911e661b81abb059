#include "rope.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "course_math.h"

gptoss_status gptoss_rope_init(gptoss_rope *r, const gptoss_config *c, char *err) {
    gptoss_status st = gptoss_config_check_rope(c, NULL, err);
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
        gptoss_config_rope_bounds(c, &low, &high);
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
