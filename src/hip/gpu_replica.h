/* Inside a GPU replica: what gpu_replica.hip (lifecycle, memory, results,
 * profiling) and gpu_forward.hip (the forward pass) share. Not part of the
 * C API (backend.h). */
#ifndef GPTOSS_HIP_GPU_REPLICA_H
#define GPTOSS_HIP_GPU_REPLICA_H

#include "../../kernels/launchers.h"
#include "backend.h"

/* Steps in flight before the oldest must have finished: each has its own
 * pinned upload and token buffers and an event. */
enum { GPTOSS_RING = 8 };

struct ring_entry {
    char *upload_host;   /* pinned: tokens, slots, positions, row sampling */
    int *tokens_host;    /* pinned: the sampled ids */
    hipEvent_t done;
    uint64_t ticket;     /* 0: unused */
    int rows;
    gptoss_gpu_result *result; /* NULL once delivered or forgotten */
};

/* Forward passes captured as graphs, replayed by later steps of the same
 * shape (rows and attention splits: the only host values in the launches):
 * one graph launch instead of some 300 kernel launches. */
enum { GPTOSS_GRAPHS = 16 };
struct graph_entry {
    int rows, splits_full, splits_window;
    hipGraphExec_t exec; /* NULL: unused */
    uint64_t used;       /* clock of the last use, for eviction */
};

struct profile_entry {
    const char *label;
    double seconds;
    long calls;
};

struct gptoss_gpu {
    gptoss_model *m;
    gptoss_config c;
    gptoss_gpu_opts o;
    gptoss_gpu_shape dev;
    hipStream_t stream;
    char *arena;
    gptoss_gpu_memory mem;

    /* weights: matrices in the mode's type, vectors fp32 */
    void *w[GPTOSS_N_TENSORS];
    float *cos, *sin; /* [ctx][head_dim / 2] */

    /* KV: per layer [slots][positions][kv_dim] */
    void **k_layer, **v_layer;
    int *layer_positions;

    /* step scratch, sized for o.rows rows */
    float *x, *t, *qkv, *q, *attn, *router_logits, *topk_w, *m2, *logits;
    void *t_in, *attn_in, *act; /* GEMM inputs in the mode's type (fp32 mode: t, attn) */
    int *topk_i, *pair_row, *pair_of, *tiles, *tile_count, *tokens_dev;
    float *part_o, *part_ml;
    int split_len;        /* keys per attention split, from ctx alone */
    int max_tiles;
    void *sample_ws;
    char *upload_dev;
    size_t upload_bytes;
    size_t sampling_at; /* byte offset of the rows' sampling in an upload */
    /* the tracer's unfused stages (one row) */
    float *m1, *y_trace, *proj, *k_trace, *agg, *scores, *probs;

    struct ring_entry ring[GPTOSS_RING];
    uint64_t next_ticket; /* the ticket of the next step; tickets start at 1 */
    int *length;          /* host: positions held per slot */
    int *slot_rows;       /* host scratch: rows per slot while checking a step */
    const char *last_kernel;
    int sync_launches; /* GPTOSS_SYNC_LAUNCHES: wait after each kernel, no graphs */
    struct graph_entry graphs[GPTOSS_GRAPHS];
    uint64_t graph_clock;

    int profiling;
    struct profile_entry *prof;
    int n_prof, cap_prof;
    hipEvent_t *prof_events; /* pairs around each launch since the last collection */
    const char **prof_labels;
    int n_prof_events, cap_prof_events;
    int made_prof_events; /* created so far; reused by later steps */
};

/* Whether the device holds the tensor's matrices tiled (launchers.h). */
int gptoss_gpu_tiled(const gptoss_gpu *g, int tensor);
/* Layer l's part of a per-layer weight tensor (all its experts), as the
 * device holds it (tiled or not). */
const void *gptoss_gpu_layer_weight(const gptoss_gpu *g, int tensor, int layer);

/* Enqueues the forward pass of the rows already uploaded to upload_dev
 * (rows, slots, positions); with trace != NULL (one row) it waits after each
 * stage and records it. Fills g->logits. */
int gptoss_gpu_forward(gptoss_gpu *g, const gptoss_batch *b, gptoss_trace *trace, char *err);
/* The same without a trace, from the graph of its shape (captured on first
 * use), or launched kernel by kernel while profiling or syncing launches. */
int gptoss_gpu_forward_step(gptoss_gpu *g, const gptoss_batch *b, char *err);
void gptoss_gpu_free_graphs(gptoss_gpu *g);

/* err = "device N: what: <the HIP error>"; returns -1 */
int gptoss_gpu_fail(char *err, const gptoss_gpu *g, const char *what, hipError_t e);
/* Launch bookkeeping: names the kernel in errors and times it when profiling. */
int gptoss_gpu_launched(gptoss_gpu *g, const char *label, hipError_t e, char *err);
int gptoss_gpu_launch_begin(gptoss_gpu *g, const char *label, char *err);

#endif
