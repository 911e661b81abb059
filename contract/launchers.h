/* Host-side launchers of the kernels in kernels/, one group per kernel
 * file. src/hip calls these; only kernel files contain __global__ code. The
 * argument blocks they take are the contract of device_contract.h.
 * Every launcher enqueues on the stream and returns the launch status; none
 * synchronises. */
#ifndef GPTOSS_CONTRACT_LAUNCHERS_H
#define GPTOSS_CONTRACT_LAUNCHERS_H

#include <stddef.h>
#include <stdint.h>

#include "device_contract.h"
#include "../src/core/synth.h" /* gptoss_synth_param */
#include "layout.h"
#include "platform.h"

/* How launchers launch: the device attributes they size their grids by,
 * read once per replica, and the launch's manner */
typedef struct {
    int warp;            /* hipDeviceAttributeWarpSize */
    int multiprocessors; /* hipDeviceAttributeMultiprocessorCount */
    int shared_per_sm;   /* hipDeviceAttributeMaxSharedMemoryPerMultiprocessor */
    int wgmma;           /* the build has sm_90a's GEMM and the device runs it (gptoss_gemm_wgmma_built) */
    int programmatic;    /* launch the kernels that wait for their predecessor (kernels/launch.h) with
                            programmatic stream serialization: they may start before it ends */
    int narrow;          /* the build has the streaming GEMM's 8-row tiles (gptoss_gemm_narrow_built) */
} gptoss_gpu_shape;

/* launch.hip: 1 if the device code built for the stream's device has the
 * programmatic waits (NVIDIA, compiled for sm_90 or later) */
int gptoss_programmatic_built(hipStream_t stream);

/* weights.hip: elements first .. first + count - 1 of a tensor (its flat
 * index, as in the file), as float or rounded to nearest even bf16: the
 * synthetic value of each element, or the fp32 values at in. Flat, out
 * receives them in order; tiled, out is the whole tensor and each goes to
 * its tile (a tiled tensor's padding must be zeroed first). */
hipError_t gptoss_launch_synth_fill(const gptoss_synth_param &p, uint64_t first, uint64_t count,
                                    void *out, int out_bf16, gptoss_tiling tiling, hipStream_t stream);
hipError_t gptoss_launch_to_bf16(const float *in, uint64_t first, uint64_t count, void *out,
                                 gptoss_tiling tiling, hipStream_t stream);
/* A block format's matrices [n][k] into their tiles (layout: the
 * format's gptoss_weight_layout; layout.h): rows [first, first + rows)
 * counted over the matrices, from the host codec's rows (codes
 * [rows][blocks][block_bytes], scales [rows][blocks]: weight_format.h) or,
 * for a synthetic model's tensor, from the recipe (codes NULL). MXFP4
 * (mxfp4.h): scales are clamped to the ones the kernels take; only all-zero
 * blocks have others. */
hipError_t gptoss_launch_place_coded(int layout, const uint8_t *codes, const uint8_t *scales,
                                     const gptoss_synth_param *p, uint64_t first, uint64_t rows, int64_t n,
                                     int64_t k, void *out, hipStream_t stream);

/* embedding.hip: x[r] = table[tokens[r]] widened to fp32; a fed token
 * (gptoss_fed_row) is fed[row], the previous step's sample (NaN row if invalid) */
hipError_t gptoss_launch_embedding(const void *table, int bf16_mode, const int *tokens, const int *fed,
                                   int vocab, int rows, int hidden, float *x, const gptoss_gpu_shape *dev,
                                   hipStream_t stream);

/* rmsnorm.hip: out[r] = rmsnorm(x[r]) * w (out may be x); out_bf16 (may be
 * NULL) gets the bf16-rounded copy */
hipError_t gptoss_launch_rmsnorm(const float *x, const float *w, int rows, int hidden, float *out,
                                 void *out_bf16, const gptoss_gpu_shape *dev, hipStream_t stream);

/* pairs per tile of the experts' grouped GEMMs, one table serving both,
 * at rows_per_expert expected pairs per expert; the table is built with it
 * and both GEMMs' tile_rows set to it */
int gptoss_moe_tile_rows(const gptoss_gemm_args *mlp1, const gptoss_gemm_args *mlp2, int rows_per_expert,
                         const gptoss_gpu_shape *dev);
/* 1 if the launch takes the ROPE_KV epilogue (rows, n, k and rope set) */
int gptoss_gemm_takes_rope(const gptoss_gemm_args *a);
/* the kernel family and its weight format follow a->w_layout (gemm.hip) */
hipError_t gptoss_launch_gemm(const gptoss_gemm_args *a, int max_tiles, const gptoss_gpu_shape *dev,
                              hipStream_t stream);
/* 1 if this build has the sm_90a GEMM and the stream's device runs it */
int gptoss_gemm_wgmma_built(hipStream_t stream);
/* 1 if the stream's device code has the streaming GEMM's 8-row tiles (mma.sync) */
int gptoss_gemm_narrow_built(hipStream_t stream);

/* rope_kv.hip */
hipError_t gptoss_launch_rope_kv(const gptoss_rope_kv_args *a, const gptoss_gpu_shape *dev, hipStream_t stream);

/* 1 if the head shape is supported (heads per KV head, their width) */
int gptoss_attention_limits(int n_heads, int n_kv_heads, int head_dim);
hipError_t gptoss_launch_attention(const gptoss_attention_args *a, int kv_bf16, int exact,
                                   const gptoss_gpu_shape *dev, hipStream_t stream);

/* 1 if the router takes the shape; the largest hidden size it takes (its
 * normalized row lives in shared memory) */
int gptoss_router_limits(int n_experts, int k, int hidden);
int gptoss_router_max_hidden(void);
/* the device's multiprocessors decide how many blocks a row takes */
hipError_t gptoss_launch_router(const gptoss_router_args *a, int bf16_mode, const gptoss_gpu_shape *dev,
                                hipStream_t stream);

/* moe_dispatch.hip */
hipError_t gptoss_launch_moe_dispatch(const gptoss_moe_dispatch_args *a, const gptoss_gpu_shape *dev,
                                      hipStream_t stream);
hipError_t gptoss_launch_moe_combine(const gptoss_moe_combine_args *a, const gptoss_gpu_shape *dev,
                                     hipStream_t stream);

/* trace_stages.hip: one row's scores and probabilities [Hq][pos + 2];
 * SwiGLU of stored mlp1 outputs (y as float, act in the mode's type); x += y */
hipError_t gptoss_launch_trace_scores(const gptoss_attention_args *a, int kv_bf16, float *scores,
                                      float *probs, hipStream_t stream);
hipError_t gptoss_launch_trace_swiglu(const float *m1, int pairs, int inter, float limit, float *y,
                                      void *act, int bf16_mode, hipStream_t stream);
hipError_t gptoss_launch_trace_add(float *x, const float *y, size_t n, hipStream_t stream);

/* sample.hip: one token per row of logits [rows][vocab] (device), under
 * params[row] (device), as gptoss_draw_rows draws on the host: the row's
 * slot's bias list (bias + slot * GPTOSS_MAX_LOGIT_BIAS, n_bias entries)
 * added first, then a penalized row's slot's counted ids in drawn
 * penalized (both in place, the logits restored after; the row's id is
 * counted there); then a row with
 * temperature 0 takes the first maximum, NaN never winning; any other row
 * follows gptoss_sample_with (docs/api.md "Sampling"). A row gets -1 where
 * that raises on a NaN or +inf logit, -2 where no logit is above -inf. A
 * row whose params name a mask (masks: gptoss_mask_words(vocab) words
 * each, device; NULL when no row has one) reads the tokens it leaves out as
 * -inf. logprobs (NULL, or [rows]) receives each row's log-probabilities
 * where it asks (n_top -1 elsewhere). */
hipError_t gptoss_launch_sample(float *logits, int rows, int vocab, const gptoss_row_sampling *params,
                                const gptoss_logit_bias *bias, const uint32_t *masks, gptoss_drawn_counts drawn,
                                int *tokens, gptoss_row_logprobs *logprobs, hipStream_t stream);

/* kv_fork.hip: slot to of every layer (layers: [n_layers] on the device)
 * receives what slot from keeps for the positions below length (the last
 * `positions` of them in a ring); row_bytes per position. */
hipError_t gptoss_launch_kv_fork(const gptoss_kv_layer *layers, int n_layers, size_t row_bytes, int from, int to,
                                 int length, hipStream_t stream);

#endif
