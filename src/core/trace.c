#include "trace.h"

#include <stdlib.h>
#include <string.h>

void gptoss_trace_add(gptoss_trace *t, const char *name, int layer, int is_int, int64_t rows,
                      int64_t cols, const void *src) {
    if (t->failed)
        return;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 32;
        gptoss_stage *s = realloc(t->stages, (size_t)cap * sizeof *s);
        if (!s) {
            t->failed = 1;
            return;
        }
        t->stages = s;
        t->cap = cap;
    }
    size_t bytes = (size_t)(rows ? rows : 1) * (size_t)cols * 4;
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) {
        t->failed = 1;
        return;
    }
    memcpy(copy, src, bytes);
    gptoss_stage *s = &t->stages[t->n++];
    memset(s, 0, sizeof *s);
    strncpy(s->name, name, sizeof s->name - 1);
    s->layer = layer;
    s->is_int = is_int;
    s->ndim = rows ? 2 : 1;
    s->dims[0] = rows ? rows : cols;
    s->dims[1] = rows ? cols : 0;
    s->data = copy;
}

void gptoss_trace_clear(gptoss_trace *t) {
    for (int i = 0; i < t->n; i++)
        free(t->stages[i].data);
    free(t->stages);
    memset(t, 0, sizeof *t);
}
