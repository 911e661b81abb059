/* The host-to-device contract: every plain struct a kernel reads, and
 * nothing else. The GPU engine (src/hip) fills them and passes them to the
 * launchers (launchers.h, beside this file); the CPU golden and the sampler use the
 * sampling rows too, so that both engines draw from one definition. Plain
 * C, no HIP: a struct here means the same bytes on the host and the device.
 * Shapes: R rows, Hq / Hkv query / KV heads, D head_dim. */
#ifndef GPTOSS_DEVICE_CONTRACT_H
#define GPTOSS_DEVICE_CONTRACT_H

#include <math.h> /* INFINITY */
#include <stdint.h>

#include "../src/core/host_device.h"
#include "../src/core/penalty.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- a step's rows ---- */

/* A batch's token t < 0 is no id but a reference to the feeding step: -1 - j
 * stands for the token that step drew for its row j (0-based). The GPU reads
 * it on the device (embedding.hip), any other engine resolves it on the host
 * before the step (engine.c). */
GPTOSS_HD static inline int32_t gptoss_fed_token(int32_t row) { return -1 - row; }
GPTOSS_HD static inline int gptoss_token_is_fed(int32_t token) { return token < 0; }
/* the feeding step's row a reference names */
GPTOSS_HD static inline int32_t gptoss_fed_row(int32_t token) { return -1 - token; }

/* ---- sampling (sample.hip; the host's gptoss_draw_rows) ---- */

/* One entry of a logit bias: the draw sees logits[id] + bias, a float sum
 * (bias -inf bans the token). A list holds each id once, in ascending order. */
typedef struct {
    int32_t id;
    float bias;
} gptoss_logit_bias;

/* entries one list may hold; top entries logprobs may ask for */
#define GPTOSS_MAX_LOGIT_BIAS 1024
#define GPTOSS_MAX_LOGPROBS 20

/* One row's default-mode sampling as the GPU sampler reads it (plain data,
 * uploaded with the step; all zero is a greedy row without bias or
 * logprobs). temperature 0 is greedy; the other fields are
 * gptoss_sample_params' after gptoss_sample_params_check. */
typedef struct {
    uint64_t seed;
    uint64_t position; /* the draw key: the position the chosen token will take */
    double top_p, min_p;
    float temperature;
    int32_t top_k;
    int32_t slot;          /* whose logit bias list applies (an engine keeps one per slot) */
    int32_t n_bias;        /* its entries; 0: none */
    int32_t want_logprobs; /* 1: report the row's log-probabilities */
    int32_t top_logprobs;  /* with that many most likely tokens (0..GPTOSS_MAX_LOGPROBS) */
    int32_t mask;          /* 1 + the row's mask among the step's (a constraint); 0: none */
    float presence_penalty, frequency_penalty; /* the slot's (gptoss_penalized_logit) */
    int32_t penalize;      /* 1: the draw applies its slot's counted ids and counts its own */
} gptoss_row_sampling;

/* The ids the penalized rows of each slot drew, counted since the slot's
 * penalties were set (docs/api.md#penalties): slot s holds n[s] distinct
 * ids, id[s * cap + j] drawn count[s * cap + j] times. One row of a slot
 * reads and extends its counts in a step, so no two rows race on them. */
typedef struct {
    int32_t *id, *count;
    float *saved; /* the GPU's: the logits a row's penalties replaced, put back after its draw */
    int32_t *n;
    int32_t cap;
} gptoss_drawn_counts;

/* the uint32 words of a mask over a vocabulary: bit id % 32 of word id / 32
 * is set for each allowed id */
GPTOSS_HD static inline int gptoss_mask_words(int vocab) { return (vocab + 31) / 32; }
GPTOSS_HD static inline int gptoss_mask_allows(const uint32_t *mask, int id) { return mask[id >> 5] >> (id & 31) & 1; }
/* logit id of x as a constrained draw reads it: -inf where mask (when given) leaves it out */
GPTOSS_HD static inline float gptoss_masked_logit(const float *x, const uint32_t *mask, int id) {
    return mask && !gptoss_mask_allows(mask, id) ? -INFINITY : x[id];
}

/* One row's log-probabilities, as gptoss_logprobs defines them, of the
 * logits after the row's bias (plain data, written on the device too). */
typedef struct {
    double logprob;                          /* the chosen token's */
    double top_logprob[GPTOSS_MAX_LOGPROBS]; /* the n_top most likely tokens' */
    int32_t top_id[GPTOSS_MAX_LOGPROBS];     /* (logit desc, id asc) */
    int32_t n_top;                           /* -1: the row asked for none */
} gptoss_row_logprobs;

/* ---- the forward pass's kernels ---- */

/* A tensor the weight kernels write in tiles (layout.h), or not. */
typedef struct {
    int64_t n, k; /* 0, 0: not tiled */
} gptoss_tiling;

/* One layer's KV cache as a fork walks every layer (kv_fork.hip): keys and
 * values [slots][positions][Hkv D], position p at p % positions (ctx, or
 * a windowed layer's ring). */
typedef struct {
    void *k, *v;
    int32_t positions;
} gptoss_kv_layer;

/* rope_kv.hip's arguments: RoPE on a qkv projection's rows, fused with the
 * KV cache write */
typedef struct {
    const float *qkv;  /* [rows][(Hq + 2 Hkv) D] */
    const float *cos, *sin; /* [ctx][D / 2] */
    const int *slots, *positions;
    int rows, n_heads, n_kv_heads, head_dim;
    int positions_per_slot; /* of this layer's cache: ctx, or the window ring */
    float *q;               /* [rows][Hq D] */
    void *k_cache, *v_cache; /* this layer's [slots][positions_per_slot][Hkv D] */
    int kv_bf16;             /* the cache's type: bf16, else float */
    float *k_trace;          /* NULL, or [rows][Hkv D] */
} gptoss_rope_kv_args;

/* How a GEMM's weight matrices lie on the device (layout.h): the
 * layout picks the kernel family and its weight format
 * (kernels/weight_formats.h). All zero is bf16 [n][k]. */
typedef enum {
    GPTOSS_W_BF16_ROWS,   /* bf16 [n][k] */
    GPTOSS_W_BF16_TILES,  /* bf16 in tiles of 16 rows by 32 k */
    GPTOSS_W_MXFP4_TILES, /* MXFP4 codes and scales in such tiles (the experts only) */
    GPTOSS_W_FP32_ROWS    /* float [n][k], the inputs float too: fp32 mode's exact GEMM */
} gptoss_weight_layout;

/* whether a layout's matrices lie in tiles */
GPTOSS_HD static inline int gptoss_layout_tiled(int layout) {
    return layout == GPTOSS_W_BF16_TILES || layout == GPTOSS_W_MXFP4_TILES;
}

/* gemm.hip: one linear layer, dense or grouped by expert, and its epilogue */
enum { GPTOSS_GEMM_STORE, GPTOSS_GEMM_RESIDUAL, GPTOSS_GEMM_SWIGLU, GPTOSS_GEMM_ROPE_KV };
typedef struct {
    const void *x;      /* [.][k] inputs: float with GPTOSS_W_FP32_ROWS weights, else bf16 */
    const int *x_rows;  /* NULL: row p reads x[p]; else x[x_rows[p]] */
    const void *w;      /* the weights as w_layout says (grouped: expert e's
                           matrix one matrix's bytes further on) */
    int w_layout;       /* gptoss_weight_layout */
    const float *bias;  /* [n] or NULL (grouped: expert e at bias + e * n) */
    int rows, n, k;     /* rows: the pair space (dense: rows of x and y) */
    const int *tiles;   /* NULL: dense; else the (expert, begin, end, 0) table */
    int tile_rows;      /* grouped: its pairs per tile at most (gptoss_moe_tile_rows) */
    int n_experts;      /* grouped: the matrices w holds */
    const int *tile_count;
    int epilogue;
    float *y;           /* STORE: y[p][o] = v; RESIDUAL: y[p][o] += v */
    void *act;          /* SWIGLU: act[p][o / 2], the inputs' type */
    float swiglu_limit;
    void *x_perm;       /* NULL, or bf16 scratch of rows x k rounded up to 32, for the
                           Hopper GEMM's permuted copy of x (gemm_wgmma.h; grouped:
                           the pairs' rows) */
    /* ROPE_KV, where gptoss_gemm_takes_rope (a dense qkv projection): the
     * outputs go through RoPE into q and the KV cache (rope_kv.hip's work),
     * y is not written */
    gptoss_rope_kv_args rope;
} gptoss_gemm_args;

/* attention.hip (and the tracer's scores in trace_stages.hip): decode attention over
 * the KV cache, split over positions */
typedef struct {
    const float *q;
    const void *k_cache, *v_cache;
    const int *slots, *positions;
    const float *sinks; /* [Hq] of this layer */
    int rows, n_heads, n_kv_heads, head_dim;
    int positions_per_slot;
    int window;          /* 0: every earlier key is visible */
    int splits, split_len;
    float *part_o;       /* [rows][Hq][splits][D] */
    float *part_ml;      /* [rows][Hq][splits][2]: running max, sum */
    float *out;          /* [rows][Hq D] */
    void *out_bf16;      /* NULL, or the bf16 copy */
} gptoss_attention_args;

/* router.hip: the RMSNorm before the MoE block fused with the router */
typedef struct {
    const float *x;      /* [rows][hidden] the residual stream */
    const float *norm_w; /* [hidden] */
    float *normed;       /* [rows][hidden] the normalized rows */
    void *normed_bf16;   /* NULL (fp32 mode), or their bf16 copy: the experts' input */
    const void *w;       /* [n_experts][hidden], the mode's type */
    const float *bias;
    int rows, hidden, n_experts, k;
    float *logits;    /* [rows][n_experts] */
    int *topk_idx;    /* [rows][k] */
    float *topk_w;    /* [rows][k] */
    unsigned *row_done; /* [rows] a row's blocks that finished; zero before and after a launch */
} gptoss_router_args;

/* moe_dispatch.hip: the (row, expert) pairs sorted by expert into the tile table,
 * and the experts' outputs combined per row */
typedef struct {
    const int *topk_idx;
    int rows, k, n_experts, tile_rows;
    int *pair_row;   /* [rows * k] */
    int *pair_of;    /* [rows * k] */
    int *tiles;      /* [gptoss_moe_max_tiles][4] */
    int *tile_count;
} gptoss_moe_dispatch_args;
typedef struct {
    const float *expert_out; /* [pairs][hidden], sorted pair order */
    const int *pair_of, *topk_idx;
    const float *topk_w;
    int rows, k, hidden;
    float *x;                /* += the weighted sum */
    float *agg_trace;        /* NULL, or [rows][hidden] */
    /* the RMSNorm that follows (the next layer's or the final one), fused:
     * NULL norm_w, or rmsnorm's outputs (norm_out may be x) */
    const float *norm_w;
    float *norm_out;
    void *norm_out_bf16;
} gptoss_moe_combine_args;

#ifdef __cplusplus
}
#endif

#endif
