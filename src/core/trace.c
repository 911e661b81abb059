#include "trace.h"

#include <stdlib.h>
#include <string.h>

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
