/* The engine interface: what runs a replica (a model placed on a device with
 * a pool of KV slots) behind one set of calls. An engine is a table of
 * functions (gptoss_engine_i) plus its own context; gptoss_engine wraps one
 * with what every engine shares: the options, the per-slot sampling
 * settings, the step counter, fed tokens and the step results. The CPU
 * golden engine (golden.c) and the GPU engine (src/hip) implement it; a
 * third engine is a new file with its own table, nothing more. */
#ifndef GPTOSS_ENGINE_H
#define GPTOSS_ENGINE_H

#include <stdint.h>

#include "batch.h"
#include "model.h"
#include "sampler.h"
#include "status.h"
#include "tensor.h"
#include "trace.h"
#include "weight_format.h"

#ifdef __cplusplus
extern "C" { /* the HIP engine is C++ */
#endif

/* A replica's options as the caller gives them; an engine fills in its own
 * defaults (gptoss_engine_i.resolve) and refuses those it does not take. */
typedef struct {
    int device;       /* -1: the CPU; else a 0-based GPU */
    int slots, ctx;   /* independent sequences, positions each */
    int weights;      /* gptoss_weights: a row of weight_format.h's table, or UNSET */
    int kv_bf16;      /* K and V stored in bf16 (else fp32); -1 not given: bf16 unless the weights are fp32 */
    int threads;      /* CPU worker threads: 0 all online CPUs; -1 not given */
    int rows, chunk;  /* GPU: most rows in one step, of one slot in one step; 0 not given */
} gptoss_engine_opts;

/* Bytes an engine takes, by named category ("weights", "kv", ...), in the
 * order a report should list them. */
enum { GPTOSS_MEMORY_PARTS = GPTOSS_N_WEIGHT_FORMATS + 4 };
typedef struct {
    int n;
    struct {
        char name[32];
        uint64_t bytes;
    } part[GPTOSS_MEMORY_PARTS];
} gptoss_memory;

/* What becomes of a row's token: drawn (the default), not drawn (the step
 * was told which rows to draw and this is not one), or failed because the
 * token fed to the row is one the step before could not draw (an engine
 * that reads fed tokens on the host; the row is not drawn). */
enum { GPTOSS_ROW_DRAWS = 0, GPTOSS_ROW_UNDRAWN, GPTOSS_ROW_FED_FAILED };

/* gptoss_result.tokens of a row that was not drawn; any other negative
 * value is a row no token could be drawn for */
#define GPTOSS_TOKEN_UNDRAWN INT32_MIN

/* One step's results, owned by the caller from gptoss_engine_step until
 * gptoss_result_release. Tokens (and log-probabilities, where rows asked)
 * arrive when the step is done (delivered); logits are on the host when the
 * step was asked to keep them, else readable from the engine while no later
 * step has run. */
typedef struct {
    uint64_t seq;            /* the engine's step number (1, 2, ...) */
    uint64_t ticket;         /* the engine's own handle on the step */
    int rows, vocab;
    int *tokens;             /* [rows], valid once delivered (and settled: gptoss_engine_tokens) */
    gptoss_row_logprobs *logprobs; /* [rows] where a row's slot asks, valid once delivered; else NULL */
    gptoss_storage *logits;  /* [logits_rows][vocab] on the host, or NULL */
    int logits_rows;         /* rows logits holds: the step's, or those it was asked to keep */
    int *logit_rows;         /* which rows (0-based, in that order) when asked for some; NULL: all */
    unsigned char *fate;     /* [rows] GPTOSS_ROW_*, or NULL: every row draws */
    int delivered;
    int settled;             /* the fates applied to tokens, bad_row and why */
    int bad_row;             /* >= 0: the first row no token could be drawn for */
    char why[GPTOSS_ERR_LEN]; /* bad_row's reason */
} gptoss_result;

/* What a step hands an engine besides the batch. */
typedef struct {
    const gptoss_row_sampling *sampling;       /* per row; NULL: every row greedy, no bias, no logprobs */
    const gptoss_logit_bias *const *slot_bias; /* per slot: the list a row's n_bias counts (host) */
    /* the constrained rows' masks, gptoss_mask_words(vocab) words each (row
     * r's is mask sampling[r].mask - 1); NULL when no row has one (host) */
    const uint32_t *masks;
    float *logits;         /* NULL, or room for the logits of the rows below, filled before step returns */
    const int *logit_rows; /* those rows (0-based, in order); NULL: every row */
    int n_logit_rows;
    /* per row GPTOSS_ROW_*, or NULL: every row draws. A row that does not
     * draw needs no token (an engine may leave its logits uncomputed) */
    const unsigned char *fate;
    /* the counts the penalized rows read and extend, per slot (host); NULL
     * where the engine keeps them on the device (gptoss_engine_i.drawn_reset)
     * or no slot has penalties */
    gptoss_drawn_counts *drawn;
} gptoss_step_args;

/* What an engine implements. ctx is its own state. Every function that can
 * fail returns a status and writes err (GPTOSS_ERR_LEN bytes). */
typedef struct {
    /* 1 if the engine's steps read fed tokens (gptoss_batch.fed_rows) on the
     * device; else they are resolved to ids on the host before a step */
    int reads_fed_tokens;
    /* checks the options it takes and fills in its defaults */
    gptoss_status (*resolve)(gptoss_model *m, gptoss_engine_opts *o, char *err);
    /* the bytes a replica of these (resolved) options takes, before making it;
     * headroom: what must stay free besides (0 where nothing is refused).
     * GPTOSS_E_INVALID when a size leaves 64 bits */
    gptoss_status (*plan)(const gptoss_model *m, const gptoss_engine_opts *o, gptoss_memory *out,
                          uint64_t *headroom, char *err);
    /* progress: reports the weights being materialised on the host (NULL: not
     * reported; an engine that has nothing to materialise never calls it) */
    gptoss_status (*create)(gptoss_model *m, const gptoss_engine_opts *o, const gptoss_progress *progress,
                            void **ctx, char *err);
    /* delivers the results of steps still running, then frees everything */
    void (*destroy)(void *ctx);
    /* runs or enqueues one checked batch. Rows draw as a->sampling says
     * (those a->fate lets draw), and fill res->logprobs where they ask; the
     * logits of a->logit_rows go into a->logits when it is given. res->bad_row
     * may name a row fed a token that could not be drawn already: a row that
     * cannot draw replaces it only when it comes first. On success
     * res->ticket is the engine's and res is delivered into later (wait), or
     * already */
    gptoss_status (*step)(void *ctx, const gptoss_batch *b, const gptoss_step_args *a, gptoss_result *res,
                          char *err);
    /* waits for res's step and delivers its tokens */
    gptoss_status (*wait)(void *ctx, gptoss_result *res, char *err);
    /* 1 once res's step has finished (or failed), so that wait returns at
     * once; never blocks. NULL where every step is done when step returns */
    int (*ready)(void *ctx, const gptoss_result *res);
    /* res's memory is going away: never deliver into it */
    void (*forget)(void *ctx, gptoss_result *res);
    /* the logits of res's step into out, while no later step has run
     * (GPTOSS_E_STATE when they are gone, or were not all computed) */
    gptoss_status (*logits)(void *ctx, const gptoss_result *res, float *out, char *err);
    /* one row run like a step with every stage recorded */
    gptoss_status (*trace)(void *ctx, const gptoss_batch *b, gptoss_trace *trace, float *logits,
                           char *err);
    int (*length)(const void *ctx, int slot);
    /* the lowest position above 0 that slot can go back to: where a step's
     * rows of it may start, or a fork of it may end (0 always may); 0 when
     * any position up to its length may. NULL where every position is kept */
    int (*rewind_limit)(const void *ctx, int slot);
    void (*reset)(void *ctx, int slot);
    /* slot to (not from) holds the first length positions of slot from
     * (length <= its length), as if prefilled with their tokens; in step
     * order. GPTOSS_E_UNSUPPORTED where the engine no longer holds what the
     * copy needs (a windowed layer's ring) */
    gptoss_status (*fork)(void *ctx, int from, int to, int length, char *err);
    /* slot's logit bias list is b (n entries, checked) for the steps that
     * follow; NULL where the engine reads the lists on the host
     * (gptoss_step_args.slot_bias) */
    gptoss_status (*logit_bias)(void *ctx, int slot, const gptoss_logit_bias *b, int n, char *err);
    /* slot's penalties count no id from the steps that follow on (its
     * counts kept on the device, cap the context); NULL where the engine
     * reads the counts on the host (gptoss_step_args.drawn) */
    gptoss_status (*drawn_reset)(void *ctx, int slot, char *err);
    /* per-kernel timing; NULL where the engine has none */
    gptoss_status (*profile)(void *ctx, int on, char *err);
    void (*profile_read)(void *ctx, void (*each)(void *arg, const char *label, double seconds, long calls),
                         void *arg);
} gptoss_engine_i;

/* Whether weight matrices are bf16 values and GEMM inputs rounded to bf16
 * (the weights' format says; resolved options only). */
static inline int gptoss_weights_bf16(const gptoss_engine_opts *o) {
    const gptoss_weight_format *f = gptoss_weight_format_of(o->weights);
    return f && f->bf16_arithmetic;
}

/* Resolves a format that holds the experts in a block format: refused,
 * saying why, when m's experts are not exactly in it
 * (gptoss_model_experts_in). */
gptoss_status gptoss_weights_check(gptoss_model *m, const gptoss_engine_opts *o, char *err);

typedef struct gptoss_engine gptoss_engine;

/* The bytes a replica of these options would take on engine i (the memory
 * field of gptoss_engine_memory), and the headroom it keeps free besides;
 * the options are resolved in place. */
gptoss_status gptoss_engine_plan(const gptoss_engine_i *i, gptoss_model *m, gptoss_engine_opts *o,
                                 gptoss_memory *out, uint64_t *headroom, char *err);

/* Makes a replica of m on engine i, which holds a reference to m
 * (gptoss_model_retain) until gptoss_engine_free. progress: as
 * gptoss_engine_i.create's. */
gptoss_status gptoss_engine_new(const gptoss_engine_i *i, gptoss_model *m, const gptoss_engine_opts *o,
                                const gptoss_progress *progress, gptoss_engine **out, char *err);
/* Delivers pending results, frees everything, lets go of the model; NULL is
 * a no-op. */
void gptoss_engine_free(gptoss_engine *e);
/* The model the engine computes with (kept as long as the engine). */
const gptoss_model *gptoss_engine_model(const gptoss_engine *e);

/* the options with the engine's defaults filled in */
const gptoss_engine_opts *gptoss_engine_options(const gptoss_engine *e);
void gptoss_engine_memory(const gptoss_engine *e, gptoss_memory *out);
/* steps taken so far: the latest step's seq */
uint64_t gptoss_engine_steps(const gptoss_engine *e);

/* A slot's sampling: the default mode's parameters (checked), a logit bias
 * list (n_bias entries, checked here against the vocabulary) and the top
 * entries of each row's logprobs (-1: none). Penalties count the ids the
 * slot's rows draw from when it is set: of a step's rows of the slot, the
 * last (the one whose id is fed next) applies them and counts its id. */
typedef struct {
    gptoss_sample_params params;
    const gptoss_logit_bias *bias;
    int n_bias;
    int logprobs;
} gptoss_slot_sampling;

/* Whether e would take s for a slot (gptoss_engine_sampling's checks,
 * without setting anything): GPTOSS_E_INVALID with err saying why. */
gptoss_status gptoss_engine_sampling_check(const gptoss_engine *e, const gptoss_slot_sampling *s, char *err);

/* How slot (0-based, in range) draws its rows' tokens from now on: as s
 * says (its bias list copied), or greedy without bias or logprobs when s is
 * NULL. A refused setting changes nothing. */
gptoss_status gptoss_engine_sampling(gptoss_engine *e, int slot, const gptoss_slot_sampling *s, char *err);

/* What one step is asked to do: its batch, the step feeding it and which
 * logits to keep on the host. */
typedef struct {
    const gptoss_batch *batch;
    /* the engine's latest step when the batch holds fed tokens (the tokens
     * it drew, referred to as device_contract.h's gptoss_fed_token says),
     * else NULL */
    gptoss_result *fed_by;
    /* 1: the result keeps the logits of the n_keep rows keep lists
     * (0-based, distinct, in that order) on the host, or of every row when
     * keep is NULL */
    int keep_logits;
    const int *keep;
    int n_keep;
    /* NULL: every row draws a token; else only the n_draw rows draw lists
     * (0-based, distinct; none when n_draw is 0): the others' tokens are
     * GPTOSS_TOKEN_UNDRAWN and no later step may be fed them */
    const int *draw;
    int n_draw;
    /* the n_masks rows (0-based, distinct, each one that draws) that draw
     * under a constraint, mask_rows[k] taking only the tokens masks' k-th
     * mask of gptoss_mask_words(vocab) words allows (the caller's memory,
     * read before the step returns) */
    const int *mask_rows;
    const uint32_t *masks;
    int n_masks;
} gptoss_step_request;

/* Runs or enqueues the step q asks for (its batch checked as a whole
 * first: a refused batch changes nothing). Rows draw as their slots'
 * sampling says, keyed by the position the token will take. A row fed a
 * token the step before could not draw runs, and fails to draw itself. res
 * is initialised here; release it with gptoss_result_release. */
gptoss_status gptoss_engine_step(gptoss_engine *e, const gptoss_step_request *q, gptoss_result *res, char *err);

/* The step's tokens (and res->logprobs), waiting for them (e may be NULL
 * once the engine is freed: its results were delivered then). GPTOSS_E_DRAW
 * when a row's logits allowed no draw (res->why says which and why); the
 * tokens of the other rows are in res->tokens even then. */
gptoss_status gptoss_engine_tokens(gptoss_engine *e, gptoss_result *res, char *err);

/* After gptoss_engine_tokens: 1 when no token could be drawn for row
 * (0-based), with why (GPTOSS_ERR_LEN bytes) saying why, without the "row
 * N: " that res->why begins with; else 0. */
int gptoss_result_row_failed(const gptoss_result *res, int row, char *why);

/* 1 when gptoss_engine_tokens would return without waiting for the
 * device: res is delivered, or its step has finished (an event loop polls
 * this between other work). */
int gptoss_engine_ready(const gptoss_engine *e, const gptoss_result *res);

/* Makes res->logits hold the step's logits, copying them from the engine
 * while no later step has run. */
gptoss_status gptoss_engine_logits(gptoss_engine *e, gptoss_result *res, char *err);

/* res's memory is going away (e may be NULL); then frees what it holds. */
void gptoss_result_release(gptoss_engine *e, gptoss_result *res);

/* One row (slot, token, pos) run like a step, every stage recorded into
 * trace; logits receives vocab floats. */
gptoss_status gptoss_engine_trace(gptoss_engine *e, int slot, int token, int pos, gptoss_trace *trace,
                                  float *logits, char *err);

int gptoss_engine_length(const gptoss_engine *e, int slot);
/* gptoss_engine_i.rewind_limit's answer: where slot can go back to, 0 for
 * anywhere (an engine without the entry keeps every position). */
int gptoss_engine_rewind_limit(const gptoss_engine *e, int slot);
void gptoss_engine_reset(gptoss_engine *e, int slot);
/* Slot to holds the first length positions of slot from (-1: all of them),
 * as if prefilled with the same tokens; it keeps its own sampling. Enqueued
 * in step order where steps are. */
gptoss_status gptoss_engine_fork(gptoss_engine *e, int from, int to, int length, char *err);

/* Per-kernel timing on/off (off clears the totals), and the totals so far
 * (label, seconds, calls) in first-launch order. */
gptoss_status gptoss_engine_profile(gptoss_engine *e, int on, char *err);
gptoss_status gptoss_engine_profile_read(gptoss_engine *e,
                                         void (*each)(void *arg, const char *label, double seconds,
                                                      long calls),
                                         void *arg, char *err);

#ifdef __cplusplus
}
#endif

#endif
