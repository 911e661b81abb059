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
    const gptoss_held *w;   /* the weights, as the model holds them for this format */
    float *tiles;           /* per matmul task, 4 weight rows widened to fp32 */
    size_t tile_row;        /* floats per weight row in tiles (the widest input) */
    gptoss_sampler *sampler; /* buffers for drawing sampled rows, made on the first */
    /* the latest step's logits, of the rows it drew, for gptoss_engine_i.logits:
     * the step whose ticket is latest_ticket (0: none), every row's when all drew */
    float *latest;
    uint64_t latest_ticket, tickets;
    int latest_all;
} gptoss_golden;

/* The matmul's tasks per pool thread; each widens its 4 weight rows into
 * its own part of tiles, which is sized by it. */
enum { GPTOSS_GOLDEN_MM_TASKS_PER_THREAD = 4 };

/* A weight matrix [d][n] of the held weights: its tensor's source, from
 * element first (a layer's or an expert's slice). */
typedef struct {
    const gptoss_source *src;
    uint64_t first;
} gptoss_golden_matrix;

/* Y[r][o] = sum_i W[o][i] * X[r][i] for rows rows of x (golden_matmul.c);
 * x must already be bf16-rounded in bf16 mode. */
void gptoss_golden_matmul(gptoss_golden *g, float *y, const float *x, int rows, gptoss_golden_matrix w, int n, int d);

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
