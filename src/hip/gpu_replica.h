/* Inside a GPU replica: what gpu_replica.hip (lifecycle, the engine
 * interface), gpu_weights.hip (the weights' upload), gpu_step.hip (the step
 * ring, forks), gpu_forward.hip (the forward pass, graphs) and
 * gpu_profile.hip (per-kernel timing) share. Not part of the C API
 * (backend.h). */
#ifndef GPTOSS_HIP_GPU_REPLICA_H
#define GPTOSS_HIP_GPU_REPLICA_H

#include "../../contract/launchers.h"
#include "backend.h"
#include "gpu_buffers.h"

/* Steps in flight before the oldest must have finished: each has its own
 * pinned upload and token buffers and an event. */
enum { GPTOSS_RING = 8 };

struct ring_entry {
    char *upload_host;     /* pinned: tokens, slots, positions, row sampling */
    int *tokens_host;      /* pinned: the ids drawn */
    gptoss_row_logprobs *logprobs_host; /* pinned: their logprobs, made on a step's first need */
    int has_logprobs;      /* the step copies them back */
    uint32_t *masks_host;  /* pinned: the constrained rows' masks on their way up, grown on need */
    size_t masks_bytes;
    hipEvent_t done;
    uint64_t ticket;       /* 0: unused */
    int rows;
    gptoss_result *result; /* NULL once delivered or forgotten */
};

typedef struct {
    struct ring_entry entry[GPTOSS_RING]; /* a step's entry: its ticket % GPTOSS_RING */
    uint64_t next_ticket;                 /* the ticket of the next step; tickets start at 1 */
} gptoss_gpu_ring;

/* Forward passes captured as graphs, replayed by later steps of the same
 * shape (rows and attention splits: the only host values in the launches):
 * one graph launch instead of some 300 kernel launches. A step's rows are
 * padded to a bucket (gptoss_gpu_padded_rows), so that a server's steps of
 * ever-changing sizes replay a few dozen graphs rather than capture one
 * most steps; the buckets up to 4096 rows and a few split counts fit. */
enum { GPTOSS_GRAPHS = 64 };

struct graph_entry {
    int rows, splits_full, splits_window;
    hipGraphExec_t exec; /* NULL: unused */
    uint64_t used;       /* clock of the last use, for eviction */
};

typedef struct {
    struct graph_entry entry[GPTOSS_GRAPHS];
    uint64_t clock;
} gptoss_gpu_graphs;

struct profile_total {
    const char *label;
    double seconds;
    long calls;
};

/* Per-kernel timing: events around each launch, folded into totals by
 * label when read. */
typedef struct {
    int on;
    struct profile_total *totals; /* in first-launch order */
    int n_totals, cap_totals;
    hipEvent_t *events;           /* pairs around each launch since the last fold */
    const char **labels;          /* one per pair */
    int n_events, cap_events;
    int made_events;              /* created so far; reused by later steps */
} gptoss_gpu_profiler;

struct gptoss_gpu {
    gptoss_model *m;
    gptoss_config c;
    gptoss_engine_opts o;
    gptoss_gpu_shape dev;
    hipStream_t stream;
    char *arena;            /* every device buffer (buf) */
    gptoss_gpu_buffers buf;
    int *length;            /* host: positions held per slot */
    int *ring_from;         /* host: per slot, the first position whose keys its rings still hold */
    int ring_positions;     /* positions a windowed layer's ring keeps (gptoss_kv_positions), 0: no ring */
    int *slot_rows;         /* host scratch per slot while checking a step: rows, then first position + 1 */
    gptoss_logit_bias *bias_host;  /* pinned: each slot's bias list on its way up, made on first use */
    unsigned char *bias_pending;   /* per slot: its upload may not have run yet */
    hipEvent_t bias_sent;          /* recorded after the latest bias upload */
    uint32_t *masks;               /* device: room for a step's masks, o.rows of them, made on first need */
    const char *last_kernel;
    int sync_launches;      /* GPTOSS_SYNC_LAUNCHES: wait after each kernel, no graphs */
    gptoss_gpu_ring ring;
    gptoss_gpu_graphs graphs;
    gptoss_gpu_profiler prof;
};

/* gpu_weights.hip: every weight tensor filled on the device in its format
 * there, generated (synthetic models) or read from the model file; the RoPE
 * table of the replica's ctx positions */
gptoss_status gptoss_gpu_upload_weights(gptoss_gpu *g, char *err);
gptoss_status gptoss_gpu_upload_rope(gptoss_gpu *g, char *err);
/* Layer l's part of a per-layer weight tensor (all its experts), as the
 * device holds it (tiled or not). */
const void *gptoss_gpu_layer_weight(const gptoss_gpu *g, int tensor, int layer);

/* gpu_step.hip: the engine interface's step, wait, forget, logits, trace,
 * fork and rewind_limit (gptoss_engine_i), and delivering a ring entry's
 * results into the caller's memory (nothing when they are delivered or
 * forgotten) */
gptoss_status gptoss_gpu_step(void *ctx, const gptoss_batch *b, const gptoss_step_args *a, gptoss_result *res,
                              char *err);
gptoss_status gptoss_gpu_wait(void *ctx, gptoss_result *res, char *err);
int gptoss_gpu_ready(void *ctx, const gptoss_result *res);
void gptoss_gpu_forget(void *ctx, gptoss_result *res);
gptoss_status gptoss_gpu_logits(void *ctx, const gptoss_result *res, float *out, char *err);
gptoss_status gptoss_gpu_trace(void *ctx, const gptoss_batch *b, gptoss_trace *trace, float *logits, char *err);
gptoss_status gptoss_gpu_fork(void *ctx, int from, int to, int length, char *err);
int gptoss_gpu_rewind_limit(const void *ctx, int slot);
void gptoss_gpu_deliver(gptoss_gpu *g, struct ring_entry *r);

/* Enqueues the forward pass of the rows already uploaded (buf.s.upload:
 * tokens, slots, positions); with trace != NULL (one row) it waits after
 * each stage and records it. Fills buf.s.logits. */
gptoss_status gptoss_gpu_forward(gptoss_gpu *g, const gptoss_batch *b, gptoss_trace *trace, char *err);
/* The rows a step of `rows` rows launches: a power of two up to 64, beyond
 * a multiple of an eighth of the next power of two (at most an eighth more
 * rows than asked: the step's cost at those sizes grows with its rows), at
 * most the replica's rows. The rows past the batch repeat its last one. */
int gptoss_gpu_padded_rows(const gptoss_gpu *g, int rows);
/* The same without a trace over `rows` uploaded rows (gptoss_gpu_padded_rows
 * of b->n), from the graph of its shape (captured on first use, its kernels
 * launched programmatically where g->dev says so), or launched kernel by
 * kernel over b->n rows while profiling or syncing launches. */
gptoss_status gptoss_gpu_forward_step(gptoss_gpu *g, const gptoss_batch *b, int rows, char *err);
void gptoss_gpu_free_graphs(gptoss_gpu *g);

/* err = "device N: what: <the HIP error>"; returns the status for e (out of
 * device memory, or a device failure) */
gptoss_status gptoss_gpu_fail(char *err, const gptoss_gpu *g, const char *what, hipError_t e);
/* Launch bookkeeping: names the kernel in errors and times it when profiling. */
gptoss_status gptoss_gpu_launch_begin(gptoss_gpu *g, const char *label, char *err);
gptoss_status gptoss_gpu_launched(gptoss_gpu *g, const char *label, hipError_t e, char *err);

/* gpu_profile.hip: the engine interface's profile calls, and freeing the
 * profiler's events and totals */
gptoss_status gptoss_gpu_profile(void *ctx, int on, char *err);
void gptoss_gpu_profile_read(void *ctx, void (*each)(void *arg, const char *label, double seconds, long calls),
                             void *arg);
void gptoss_gpu_profile_free(gptoss_gpu *g);

#endif
