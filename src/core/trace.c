#include "trace.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"

const char *const gptoss_stage_names[GPTOSS_N_STAGES] = {
    "embedding", "attn_norm", "qkv",    "q_rope",  "k_rope", "scores",    "probs",
    "attn_out",  "attn_proj", "resid_attn", "ffn_norm", "router", "topk_idx", "topk_w",
    "mlp1",      "swiglu",    "mlp2",   "moe_out", "resid_ffn", "final_norm", "logits",
};

void gptoss_trace_add(gptoss_trace *t, gptoss_stage_id id, int layer, int64_t rows, int64_t cols,
                      const void *src) {
    if (t->failed)
        return;
    if (t->n == t->cap) {
        if (t->cap > INT_MAX / 2) { /* stages are counted in int */
            t->failed = 1;
            return;
        }
        int cap = t->cap ? 2 * t->cap : 32;
        gptoss_stage *s = realloc(t->stages, (size_t)cap * sizeof *s);
        if (!s) {
            t->failed = 1;
            return;
        }
        t->stages = s;
        t->cap = cap;
    }
    int overflow = 0;
    uint64_t bytes = gptoss_checked_mul(gptoss_checked_mul((uint64_t)(rows ? rows : 1), (uint64_t)cols, &overflow), 4,
                                        &overflow);
    void *copy = overflow || bytes > SIZE_MAX ? NULL : malloc(bytes ? (size_t)bytes : 1);
    if (!copy) {
        t->failed = 1;
        return;
    }
    memcpy(copy, src, bytes);
    gptoss_stage *s = &t->stages[t->n++];
    memset(s, 0, sizeof *s);
    s->id = id;
    s->layer = layer;
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
