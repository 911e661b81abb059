#include "tensor.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

gptoss_storage *gptoss_storage_new(gptoss_dtype dtype, size_t count) {
    gptoss_storage *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    s->data = calloc(count ? count : 1, 4);
    if (!s->data) {
        free(s);
        return NULL;
    }
    s->refs = 1;
    s->dtype = dtype;
    s->count = count;
    return s;
}

void gptoss_storage_retain(gptoss_storage *s) { s->refs++; }

void gptoss_storage_release(gptoss_storage *s) {
    if (s && --s->refs == 0) {
        free(s->data);
        free(s);
    }
}

double gptoss_elem(gptoss_dtype dtype, const void *data, size_t i) {
    return dtype == GPTOSS_F32 ? (double)((const float *)data)[i] : (double)((const int32_t *)data)[i];
}

size_t gptoss_argmax(gptoss_dtype dtype, const void *data, size_t n) {
    size_t best = 0;
    double v = gptoss_elem(dtype, data, 0);
    for (size_t i = 1; i < n; i++) {
        double x = gptoss_elem(dtype, data, i);
        if (x > v || (isnan(v) && !isnan(x))) {
            v = x;
            best = i;
        }
    }
    return best;
}

double gptoss_max_abs_diff(gptoss_dtype da, const void *a, gptoss_dtype db, const void *b, size_t n) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = gptoss_elem(da, a, i), y = gptoss_elem(db, b, i);
        if (isnan(x) || isnan(y))
            return NAN;
        double d = x == y ? 0.0 : fabs(x - y); /* equal infinities differ by 0 */
        if (d > worst)
            worst = d;
    }
    return worst;
}

size_t gptoss_allclose(gptoss_dtype da, const void *a, gptoss_dtype db, const void *b, size_t n,
                       double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double x = gptoss_elem(da, a, i), y = gptoss_elem(db, b, i);
        if (x == y)
            continue;
        if (!(fabs(x - y) <= atol + rtol * fabs(y)))
            return i;
    }
    return n;
}
