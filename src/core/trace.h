/* A trace: the named intermediate stages of one token's forward, recorded by
 * an engine as host copies (layer = -1 for whole-model stages). */
#ifndef GPTOSS_TRACE_H
#define GPTOSS_TRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

typedef struct {
    char name[16];
    int layer;    /* 0-based, -1 for embedding, final_norm, logits */
    int is_int;   /* int32 data (topk_idx), else float */
    int ndim;     /* 1 or 2 */
    int64_t dims[2];
    void *data;
} gptoss_stage;

typedef struct {
    int n, cap;
    int failed; /* an allocation failed: the trace is incomplete */
    gptoss_stage *stages;
} gptoss_trace;

/* Copies rows*cols values (ndim 1 when rows == 0). */
void gptoss_trace_add(gptoss_trace *t, const char *name, int layer, int is_int, int64_t rows,
                      int64_t cols, const void *src);
void gptoss_trace_clear(gptoss_trace *t);

#ifdef __cplusplus
}
#endif

#endif
