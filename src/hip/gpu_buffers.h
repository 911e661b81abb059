/* A GPU replica's device memory: weights, KV pool, step scratch and the
 * tracer's buffers, all carved from one arena by gptoss_gpu_layout. Plain C
 * (compiled in every build), so that the memory plan is known without a
 * device: model:replica_bytes and getp size replicas from it. Shapes use
 * R = opts.rows, H hidden, D head_dim, Hq / Hkv query / KV heads, E
 * experts, K experts per token, I intermediate, V vocabulary, P = R K. */
#ifndef GPTOSS_HIP_GPU_BUFFERS_H
#define GPTOSS_HIP_GPU_BUFFERS_H

#include <stddef.h>
#include <stdint.h>

#include "../../contract/layout.h"
#include "../../contract/device_contract.h"
#include "../core/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What each buffer's bytes count as in a replica's memory report: a weight
 * tensor's as its format on the device (a gptoss_weights value: fp32, bf16
 * or a block format's), the rest as the KV cache or scratch. */
enum { GPTOSS_GPU_KV = GPTOSS_N_WEIGHT_FORMATS, GPTOSS_GPU_SCRATCH, GPTOSS_GPU_CATEGORIES };

typedef struct {
    /* per tensor: matrices in the replica's type (bf16 ones perhaps tiled,
     * gptoss_gpu_tiled), vectors fp32; per-layer tensors layer after layer */
    void *w[GPTOSS_N_TENSORS];
    float *cos, *sin; /* [ctx][D / 2]: the RoPE table of every position */
} gptoss_gpu_weights;

typedef struct {
    void **k, **v;  /* per layer: [slots][positions[l]][Hkv D] in the cache's type */
    int *positions; /* per layer: ctx, or a windowed layer's ring (gptoss_kv_positions) */
    gptoss_kv_layer *layers; /* [layers] the same on the device, for forks */
} gptoss_gpu_kv;

typedef struct {
    float *x;             /* [R][H] the residual stream */
    float *t;             /* [R][H] a norm's output */
    float *qkv;           /* [R][Hq D + 2 Hkv D] the projection, where RoPE runs apart */
    float *q;             /* [R][Hq D] rotated queries */
    float *attn;          /* [R][Hq D] attention's output */
    void *t_in, *attn_in; /* GEMM inputs in the mode's type: bf16 copies, or t and attn */
    void *x_perm;         /* bf16 mode: the Hopper GEMM's permuted inputs (kernels/gemm_wgmma.h),
                             [R][max(H, Hq D)] or [P][max(H, I)], widths rounded up to 32 */
    float *router_logits; /* [R][E] */
    unsigned *router_done; /* [R] the router's per-row counters, zeroed at creation (not in the staging run) */
    float *topk_w;        /* [R][K] */
    int *topk_i;          /* [R][K] */
    int *pair_row;        /* [P] the row of each (row, expert) pair, sorted by expert */
    int *pair_of;         /* [P] each row's pairs' places in that order */
    int *tiles;           /* [max_tiles][4] the experts' GEMM tiles (expert, begin, end, 0) */
    int *tile_count;      /* [1] */
    void *act;            /* [P][I] SwiGLU's output in the mode's type */
    float *m2;            /* [P][H] the experts' outputs */
    float *logits;        /* [R][V] */
    int *tokens;          /* [R] the ids drawn; the next step's fed rows read them */
    float *part_o;        /* [R][Hq][splits][D] attention's partial outputs */
    float *part_ml;       /* [R][Hq][splits][2] their running max and sum */
    char *upload;         /* a step's tokens, slots, positions [R] each, then row sampling */
    gptoss_logit_bias *bias;        /* [slots][GPTOSS_MAX_LOGIT_BIAS] each slot's list, uploaded when set */
    gptoss_drawn_counts drawn;      /* [slots][ctx] each slot's ids counted for its penalties */
    gptoss_row_logprobs *logprobs;  /* [R] the rows' log-probabilities, where asked */
} gptoss_gpu_scratch;

typedef struct {              /* one traced row's stages that a step fuses away */
    float *m1;                /* [K][2 I] */
    float *y;                 /* [K][I] */
    float *proj;              /* [H] */
    float *k;                 /* [Hkv D] */
    float *agg;               /* [H] */
    float *scores, *probs;    /* [Hq][ctx + 1] */
} gptoss_gpu_trace_buffers;

typedef struct {
    gptoss_gpu_weights w;
    gptoss_gpu_kv kv;
    gptoss_gpu_scratch s;
    gptoss_gpu_trace_buffers trace;
    int split_len;      /* keys per attention split: from ctx alone (batch invariance) */
    int max_tiles;      /* rows of s.tiles */
    size_t sampling_at; /* byte offset of the row sampling in an upload */
    size_t upload_bytes;
    uint64_t bytes[GPTOSS_GPU_CATEGORIES]; /* the arena's bytes by category */
    uint64_t total;
    int overflow; /* some size left 64 bits: the plan is refused */
} gptoss_gpu_buffers;

/* Device memory the runtime, the kernels' stacks and other users keep. */
#define GPTOSS_GPU_HEADROOM ((uint64_t)256 << 20)

/* How the replica holds tensor t (a gptoss_weights value): the experts in
 * the replica's block format where it has one, matrices in bf16 where the
 * format computes in bf16, anything else in fp32. */
int gptoss_gpu_weight_format(const gptoss_engine_opts *o, int tensor);
/* Whether the replica holds tensor t's matrices tiled (kernels/layout.h). */
int gptoss_gpu_tiled(const gptoss_config *c, const gptoss_engine_opts *o, int tensor);
/* How matrix tensor t lies on the device, as its GEMMs take it. */
gptoss_weight_layout gptoss_gpu_weight_layout(const gptoss_config *c, const gptoss_engine_opts *o, int tensor);
/* bytes tensor t takes on the device, a tiled one's padding included;
 * UINT64_MAX when they pass 2^64 (the plan then refuses the options) */
uint64_t gptoss_gpu_tensor_bytes(const gptoss_model *m, const gptoss_engine_opts *o, int tensor);

/* Lays the buffers out from base (NULL: sizes only, every pointer NULL;
 * b->kv's per-layer arrays are filled where allocated). */
void gptoss_gpu_layout(const gptoss_model *m, const gptoss_engine_opts *o, char *base,
                       gptoss_gpu_buffers *b);

/* The engine interface's options and plan for GPU replicas. */
gptoss_status gptoss_gpu_resolve(gptoss_model *m, gptoss_engine_opts *o, char *err);
gptoss_status gptoss_gpu_plan(const gptoss_model *m, const gptoss_engine_opts *o, gptoss_memory *out,
                              uint64_t *headroom, char *err);

#ifdef __cplusplus
}
#endif

#endif
