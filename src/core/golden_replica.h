/* Inside a golden replica: what golden.c (lifecycle, the engine interface)
 * and golden_forward.c (the forward pass) share. Not part of the engine
 * interface (golden.h). */
#ifndef GPTOSS_GOLDEN_REPLICA_H
#define GPTOSS_GOLDEN_REPLICA_H

#include <stddef.h>

#include "engine.h"
#include "pool.h"
#include "rope.h"
#include "trace.h"

typedef struct {
    gptoss_model *m;
    gptoss_config c;
    gptoss_engine_opts o;
    gptoss_rope rope;
    gptoss_pool *pool;
    float *kcache, *vcache; /* [slot][layer][ctx][kv_dim] */
    int *length;            /* positions held per slot */
    float *wround;          /* bf16 mode: per task, 4 rounded weight rows */
    size_t wround_row;      /* floats per weight row in wround (the widest input) */
    gptoss_sampler *sampler; /* buffers for drawing sampled rows, made on the first */
    /* the latest step's logits, of the rows it drew, for gptoss_engine_i.logits:
     * the step whose ticket is latest_ticket (0: none), every row's when all drew */
    float *latest;
    uint64_t latest_ticket, tickets;
    int latest_all;
} gptoss_golden;

/* The matmul's tasks per pool thread; each rounds its 4 weight rows into
 * its own part of wround, which is sized by it. */
enum { GPTOSS_GOLDEN_MM_TASKS_PER_THREAD = 4 };

/* Position pos of slot's layer in a KV cache. */
static inline float *gptoss_golden_kv_at(const gptoss_golden *g, float *cache, int slot, int layer, int pos) {
    size_t kvd = (size_t)gptoss_kv_dim(&g->c);
    return cache + (((size_t)slot * g->c.n_layers + layer) * g->o.ctx + pos) * kvd;
}

/* The batch run into the cache, and the logits of the n rows rows lists
 * (0-based; NULL: every row) into logits [n][vocab], in that order: the
 * other rows' final norm and unembedding are not computed. Every stage is
 * recorded into trace when it is given (one row). On error nothing
 * changes. */
gptoss_status gptoss_golden_forward(gptoss_golden *g, const gptoss_batch *b, const int *rows, int n, float *logits,
                                    gptoss_trace *trace, char *err);

#endif
