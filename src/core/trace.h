/* A trace: the named intermediate stages of one token's forward, recorded by
 * an engine as host copies. The stages and their forward order are one
 * table, gptoss_stage_names, which every engine records under and the Lua
 * layer reads (gptoss.core.trace_stages). */
#ifndef GPTOSS_TRACE_H
#define GPTOSS_TRACE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

/* In forward order: the embedding, each layer's stages, then the final
 * norm and the logits. */
typedef enum {
    GPTOSS_STAGE_EMBEDDING,
    GPTOSS_STAGE_ATTN_NORM,
    GPTOSS_STAGE_QKV,
    GPTOSS_STAGE_Q_ROPE,
    GPTOSS_STAGE_K_ROPE,
    GPTOSS_STAGE_SCORES,
    GPTOSS_STAGE_PROBS,
    GPTOSS_STAGE_ATTN_OUT,
    GPTOSS_STAGE_ATTN_PROJ,
    GPTOSS_STAGE_RESID_ATTN,
    GPTOSS_STAGE_FFN_NORM,
    GPTOSS_STAGE_ROUTER,
    GPTOSS_STAGE_TOPK_IDX,
    GPTOSS_STAGE_TOPK_W,
    GPTOSS_STAGE_MLP1,
    GPTOSS_STAGE_SWIGLU,
    GPTOSS_STAGE_MLP2,
    GPTOSS_STAGE_MOE_OUT,
    GPTOSS_STAGE_RESID_FFN,
    GPTOSS_STAGE_FINAL_NORM,
    GPTOSS_STAGE_LOGITS,
    GPTOSS_N_STAGES
} gptoss_stage_id;

/* "embedding", "attn_norm", ...: the names traces and the Lua layer use */
extern const char *const gptoss_stage_names[GPTOSS_N_STAGES];

/* whether a stage is recorded once per layer (else once per token) */
static inline int gptoss_stage_per_layer(gptoss_stage_id s) {
    return s > GPTOSS_STAGE_EMBEDDING && s < GPTOSS_STAGE_FINAL_NORM;
}

/* whether a stage holds int32 values (the chosen experts' ids), else float */
static inline int gptoss_stage_is_int(gptoss_stage_id s) { return s == GPTOSS_STAGE_TOPK_IDX; }

typedef struct {
    gptoss_stage_id id;
    int layer;    /* 0-based, -1 for the stages recorded once per token */
    int ndim;     /* 1 or 2 */
    int64_t dims[2];
    void *data;
} gptoss_stage;

typedef struct {
    int n, cap;
    int failed; /* an allocation failed: the trace is incomplete */
    gptoss_stage *stages;
} gptoss_trace;

/* Copies rows*cols values of 4 bytes (ndim 1 when rows == 0). */
void gptoss_trace_add(gptoss_trace *t, gptoss_stage_id id, int layer, int64_t rows, int64_t cols,
                      const void *src);
void gptoss_trace_clear(gptoss_trace *t);

#ifdef __cplusplus
}
#endif

#endif
