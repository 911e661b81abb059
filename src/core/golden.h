/* The CPU golden engine: the course's run.cpp forward (course-spec §4),
 * reproduced operation for operation, over a pool of independent sequences
 * (slots), one ragged batch of rows per step. Rows are computed layer by
 * layer so that each weight row is read once per step, but every row's
 * arithmetic (summation order, float/double mix) is exactly run.cpp's. */
#ifndef GPTOSS_GOLDEN_H
#define GPTOSS_GOLDEN_H

#include "batch.h"
#include "model.h"
#include "trace.h"

typedef struct {
    int slots;        /* independent sequences */
    int ctx;          /* positions per slot */
    int threads;      /* worker threads including the caller; <= 0: all online CPUs */
    int weights_bf16; /* read weight matrices rounded to bf16 and round GEMM inputs */
    int kv_bf16;      /* store K and V rounded to bf16 */
} gptoss_golden_opts;

typedef struct gptoss_golden gptoss_golden;

/* The model must outlive the engine. */
int gptoss_golden_new(gptoss_model *m, const gptoss_golden_opts *o, gptoss_golden **out, char *err);
void gptoss_golden_free(gptoss_golden *g);

const gptoss_golden_opts *gptoss_golden_options(const gptoss_golden *g);
uint64_t gptoss_golden_kv_bytes(const gptoss_golden *g);

/* Runs the batch; logits receives n * vocab floats. With trace != NULL the
 * batch must be one row and every stage is recorded. On error nothing
 * changes. */
int gptoss_golden_step(gptoss_golden *g, const gptoss_batch *b, float *logits, gptoss_trace *trace,
                       char *err);

int gptoss_golden_length(const gptoss_golden *g, int slot);
void gptoss_golden_reset(gptoss_golden *g, int slot);

#endif
