/* A GPU replica: one model on one device. Creation plans every buffer
 * (weights, KV pool, step scratch) as one arena so that a short device is
 * refused before anything is allocated, then fills the weights on the
 * device (synthetic recipe, or the file converted to bf16 there). Steps are
 * enqueued on the replica's stream with their uploads and token copies in a
 * ring of pinned buffers; results are delivered into the caller's memory
 * when asked, or when the ring needs the entry again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/rope.h"
#include "../core/synth_params.h"
#include "gpu_replica.h"

static const double GIB = 1073741824.0;
/* left free for the runtime, the kernels' stacks and other users */
static const size_t HEADROOM = (size_t)256 << 20;

static int is_matrix(int t) {
    return t == GPTOSS_T_EMBEDDING || t == GPTOSS_T_OUT || t == GPTOSS_T_W_QKV ||
           t == GPTOSS_T_W_O || t == GPTOSS_T_W_ROUTER || t == GPTOSS_T_W_MLP1 ||
           t == GPTOSS_T_W_MLP2;
}

/* bytes of one element of the tensor on the device */
static size_t elem_bytes(const gptoss_gpu *g, int tensor) {
    return g->o.weights_bf16 && is_matrix(tensor) ? 2 : 4;
}

/* Which bf16 weights are tiled (launchers.h). The experts' when a step that
 * decodes every slot expects at most 16 rows per expert: their GEMMs then
 * stream, where tiles are faster. With more rows they run staged, and there
 * rows of k were faster (H100, getp of 1024 requests, 256 steps: 15940
 * tok/s against 14797 and 14916 tiled). The attention's qkv and output
 * projections' up to 64 slots, where their decode GEMMs stream 16-row tiles
 * (H100, 64 rows: qkv 0.682 -> 0.618 ms a step, o 0.698 -> 0.655); with more
 * rows each weight is re-read by several row tiles, and tiles were 15-35%
 * slower there. Either way a row gets the same bits. */
int gptoss_gpu_tiled(const gptoss_gpu *g, int tensor) {
    const gptoss_config *c = &g->c;
    if (!g->o.weights_bf16)
        return 0;
    if (tensor == GPTOSS_T_W_MLP1 || tensor == GPTOSS_T_W_MLP2)
        return (int64_t)g->o.slots * c->experts_per_token <= 16 * (int64_t)c->n_experts;
    return (tensor == GPTOSS_T_W_QKV || tensor == GPTOSS_T_W_O) && g->o.slots <= 64;
}

static gptoss_tiling tiling_of(const gptoss_gpu *g, int t) {
    const gptoss_tensor_desc *d = &g->m->layout.t[t];
    gptoss_tiling none = {0, 0};
    if (!gptoss_gpu_tiled(g, t))
        return none;
    gptoss_tiling tiled = {d->dims[d->ndim - 2], d->dims[d->ndim - 1]};
    return tiled;
}

/* elements tensor t takes on the device, a tiled one's padding included */
static uint64_t device_elems(const gptoss_gpu *g, int t) {
    const gptoss_tensor_desc *d = &g->m->layout.t[t];
    gptoss_tiling tl = tiling_of(g, t);
    if (!tl.n || !tl.k)
        return d->count;
    return d->count / ((uint64_t)tl.n * tl.k) * gptoss_tiled_elems(tl.n, tl.k);
}

const void *gptoss_gpu_layer_weight(const gptoss_gpu *g, int tensor, int layer) {
    const gptoss_tensor_desc *d = &g->m->layout.t[tensor];
    size_t per_layer = device_elems(g, tensor) / (uint64_t)d->dims[0];
    return (const char *)g->w[tensor] + (size_t)layer * per_layer * elem_bytes(g, tensor);
}

int gptoss_gpu_fail(char *err, const gptoss_gpu *g, const char *what, hipError_t e) {
    snprintf(err, GPTOSS_ERR_LEN, "device %d: %s: %s", g->o.device + 1, what, hipGetErrorString(e));
    return -1;
}

/* ---- the arena plan ---------------------------------------------------------- */

typedef struct {
    void **field;
    size_t bytes;
    int category; /* 0 weights fp32, 1 weights bf16, 2 kv, 3 scratch */
} part;

enum { MAX_PARTS = 128 };

typedef struct {
    part p[MAX_PARTS];
    int n;
} plan;

static void add(plan *pl, void *field, size_t bytes, int category) {
    pl->p[pl->n++] = (part){(void **)field, (bytes + 255) & ~(size_t)255, category};
}

static void make_plan(gptoss_gpu *g, plan *pl) {
    const gptoss_config *c = &g->c;
    const gptoss_gpu_opts *o = &g->o;
    size_t R = (size_t)o->rows, H = c->hidden_dim, D = c->head_dim, Hq = c->n_attn_heads;
    size_t E = c->n_experts, K = c->experts_per_token, I = c->intermediate_dim;
    size_t Q = gptoss_qkv_dim(c), HqD = Hq * D, kvd = gptoss_kv_dim(c), V = c->vocab_size;
    size_t P = R * K, act = o->weights_bf16 ? 2 : 4, kv = o->kv_bf16 ? 2 : 4;
    pl->n = 0;
    for (int t = 0; t < GPTOSS_N_TENSORS; t++)
        add(pl, &g->w[t], device_elems(g, t) * elem_bytes(g, t),
            elem_bytes(g, t) == 2 ? 1 : 0);
    for (int l = 0; l < c->n_layers; l++) {
        size_t bytes = (size_t)o->slots * g->layer_positions[l] * kvd * kv;
        add(pl, &g->k_layer[l], bytes, 2);
        add(pl, &g->v_layer[l], bytes, 2);
    }
    size_t half = D / 2;
    add(pl, &g->cos, (size_t)o->ctx * half * 4, 3);
    add(pl, &g->sin, (size_t)o->ctx * half * 4, 3);
    add(pl, &g->x, R * H * 4, 3);
    add(pl, &g->t, R * H * 4, 3);
    add(pl, &g->qkv, R * Q * 4, 3);
    add(pl, &g->q, R * HqD * 4, 3);
    add(pl, &g->attn, R * HqD * 4, 3);
    if (o->weights_bf16) {
        add(pl, &g->t_in, R * H * 2, 3);
        add(pl, &g->attn_in, R * HqD * 2, 3);
    }
    add(pl, &g->router_logits, R * E * 4, 3);
    add(pl, &g->topk_w, R * K * 4, 3);
    add(pl, &g->topk_i, R * K * 4, 3);
    add(pl, &g->pair_row, P * 4, 3);
    add(pl, &g->pair_of, P * 4, 3);
    g->max_tiles = gptoss_moe_max_tiles(o->rows, (int)K, (int)E, 16);
    add(pl, &g->tiles, (size_t)g->max_tiles * 16, 3);
    add(pl, &g->tile_count, 4, 3);
    add(pl, &g->act, P * I * act, 3);
    add(pl, &g->m2, P * H * 4, 3);
    add(pl, &g->logits, R * V * 4, 3);
    add(pl, &g->tokens_dev, R * 4, 3);
    /* attention partials: splits of 128 keys (two chunks: blocks enough for
     * one row, and fewer partials to fold at many rows; 64 measured 2% slower
     * at 256 rows, 256 6% slower at one), longer ones past 64 splits */
    size_t split_len = ((size_t)o->ctx + 63) / 64;
    split_len = (split_len + 63) / 64 * 64;
    if (split_len < 128)
        split_len = 128;
    g->split_len = (int)split_len;
    size_t splits = ((size_t)o->ctx + split_len - 1) / split_len;
    add(pl, &g->part_o, R * Hq * splits * D * 4, 3);
    add(pl, &g->part_ml, R * Hq * splits * 2 * 4, 3);
    add(pl, &g->sample_ws, gptoss_sample_workspace_bytes(o->rows, c->vocab_size), 3);
    g->sampling_at = (R * 3 * 4 + 15) & ~(size_t)15; /* after tokens, slots, positions */
    g->upload_bytes = g->sampling_at + R * sizeof(gptoss_row_sampling);
    add(pl, &g->upload_dev, g->upload_bytes, 3);
    add(pl, &g->m1, K * 2 * I * 4, 3);
    add(pl, &g->y_trace, K * I * 4, 3);
    add(pl, &g->proj, H * 4, 3);
    add(pl, &g->k_trace, kvd * 4, 3);
    add(pl, &g->agg, H * 4, 3);
    add(pl, &g->scores, Hq * ((size_t)o->ctx + 1) * 4, 3);
    add(pl, &g->probs, Hq * ((size_t)o->ctx + 1) * 4, 3);
}

/* set, and neither empty nor "0" */
static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* ---- weights ------------------------------------------------------------------ */

/* tensor t's values into g->w[t]: generated, copied, or converted to bf16
 * through the staging (a file model's fp32 tensors) */
static hipError_t fill_tensor(gptoss_gpu *g, int t, float *staging, size_t staging_floats) {
    const gptoss_model *m = g->m;
    const gptoss_tensor_desc *d = &m->layout.t[t];
    int to_bf16 = elem_bytes(g, t) == 2;
    gptoss_tiling tiling = tiling_of(g, t);
    if (m->synthetic) {
        gptoss_synth_param p = gptoss_synth_params(&m->config, m->seed, t);
        return gptoss_launch_synth_fill(p, 0, d->count, g->w[t], to_bf16, tiling, g->stream);
    }
    if (!to_bf16)
        return hipMemcpyAsync(g->w[t], m->map + d->offset, d->count * 4, hipMemcpyHostToDevice, g->stream);
    hipError_t e = hipSuccess;
    for (uint64_t first = 0; first < d->count && e == hipSuccess; first += staging_floats) {
        uint64_t n = d->count - first < staging_floats ? d->count - first : staging_floats;
        e = hipMemcpyAsync(staging, m->map + d->offset + first * 4, n * 4, hipMemcpyHostToDevice,
                           g->stream);
        if (e == hipSuccess)
            e = gptoss_launch_to_bf16(staging, first, n, tiling.n ? g->w[t] : (char *)g->w[t] + first * 2,
                                      tiling, g->stream);
        if (e == hipSuccess) /* the staging is reused by the next chunk */
            e = hipStreamSynchronize(g->stream);
    }
    return e;
}

static int upload_weights(gptoss_gpu *g, char *err) {
    /* a file model's fp32 tensors reach bf16 through the step scratch */
    float *staging = g->x;
    size_t staging_floats = ((char *)g->upload_dev - (char *)g->x) / 4;
    for (int t = 0; t < GPTOSS_N_TENSORS; t++) {
        hipError_t e = hipSuccess;
        if (device_elems(g, t) != g->m->layout.t[t].count) /* the tiles' padding */
            e = hipMemsetAsync(g->w[t], 0, device_elems(g, t) * elem_bytes(g, t), g->stream);
        if (e == hipSuccess)
            e = fill_tensor(g, t, staging, staging_floats);
        if (e == hipSuccess)
            e = hipStreamSynchronize(g->stream);
        if (e != hipSuccess) {
            snprintf(err, GPTOSS_ERR_LEN, "device %d: uploading %s: %s", g->o.device + 1,
                     g->m->layout.t[t].name, hipGetErrorString(e));
            return -1;
        }
    }
    return 0;
}

static int upload_rope(gptoss_gpu *g, char *err) {
    gptoss_rope rope;
    if (gptoss_rope_init(&rope, &g->c, err))
        return -1;
    size_t half = g->c.head_dim / 2, n = (size_t)g->o.ctx * half;
    float *cs = (float *)malloc(sizeof(float) * n * 2);
    if (!cs) {
        gptoss_rope_free(&rope);
        snprintf(err, GPTOSS_ERR_LEN, "replica: out of host memory");
        return -1;
    }
    for (int p = 0; p < g->o.ctx; p++)
        gptoss_rope_cos_sin(&rope, p, cs + p * half, cs + n + p * half);
    gptoss_rope_free(&rope);
    hipError_t e = hipMemcpy(g->cos, cs, n * 4, hipMemcpyHostToDevice);
    if (e == hipSuccess)
        e = hipMemcpy(g->sin, cs + n, n * 4, hipMemcpyHostToDevice);
    free(cs);
    return e == hipSuccess ? 0 : gptoss_gpu_fail(err, g, "uploading the RoPE table", e);
}

/* ---- lifecycle ------------------------------------------------------------------ */

static int check_shape(const gptoss_gpu *g, char *err) {
    const gptoss_config *c = &g->c;
    const gptoss_gpu_opts *o = &g->o;
    if (o->slots < 1 || o->ctx < 1 || o->rows < 1 || o->chunk < 1 || o->chunk > o->rows) {
        snprintf(err, GPTOSS_ERR_LEN,
                 "replica: slots = %d, ctx = %d, rows = %d must be positive and chunk = %d in 1..rows",
                 o->slots, o->ctx, o->rows, o->chunk);
        return -1;
    }
    if (!gptoss_attention_limits(c->n_attn_heads, c->n_kv_heads, c->head_dim) ||
        !gptoss_router_limits(c->n_experts, c->experts_per_token, c->hidden_dim)) {
        snprintf(err, GPTOSS_ERR_LEN,
                 "replica: the GPU engine supports up to 32 query heads per KV head, heads of up "
                 "to 256 values, 2048 values per KV group, 256 experts, top-32 and hidden size %d "
                 "(this model: %d heads, %d KV heads of %d, %d experts, top-%d, hidden size %d)",
                 gptoss_router_max_hidden(), c->n_attn_heads, c->n_kv_heads, c->head_dim, c->n_experts,
                 c->experts_per_token, c->hidden_dim);
        return -1;
    }
    return 0;
}

int gptoss_gpu_new(gptoss_model *m, const gptoss_gpu_opts *o, gptoss_gpu **out, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)calloc(1, sizeof *g);
    if (!g) {
        snprintf(err, GPTOSS_ERR_LEN, "replica: out of host memory");
        return -1;
    }
    g->m = m;
    g->c = m->config;
    g->o = *o;
    const gptoss_config *c = &g->c;
    plan pl;
    size_t total = 0, free_b = 0, total_b = 0;
    hipError_t e;
    if (check_shape(g, err))
        goto fail;
    if ((e = hipSetDevice(o->device)) != hipSuccess) {
        gptoss_gpu_fail(err, g, "cannot select the device", e);
        goto fail;
    }
    (void)hipDeviceGetAttribute(&g->dev.warp, hipDeviceAttributeWarpSize, o->device);
    (void)hipDeviceGetAttribute(&g->dev.multiprocessors, hipDeviceAttributeMultiprocessorCount, o->device);
    (void)hipDeviceGetAttribute(&g->dev.shared_per_sm, hipDeviceAttributeMaxSharedMemoryPerMultiprocessor, o->device);
    g->k_layer = (void **)calloc((size_t)c->n_layers, sizeof(void *));
    g->v_layer = (void **)calloc((size_t)c->n_layers, sizeof(void *));
    g->layer_positions = (int *)calloc((size_t)c->n_layers, sizeof(int));
    g->length = (int *)calloc((size_t)o->slots, sizeof(int));
    g->slot_rows = (int *)calloc((size_t)o->slots, sizeof(int));
    if (!g->k_layer || !g->v_layer || !g->layer_positions || !g->length || !g->slot_rows) {
        snprintf(err, GPTOSS_ERR_LEN, "replica: out of host memory");
        goto fail;
    }
    for (int l = 0; l < c->n_layers; l++) {
        /* a windowed layer keeps a ring: the window plus what one step's chunk adds */
        int ring = c->sliding_window + o->chunk - 1;
        g->layer_positions[l] = c->sliding_window > 0 && l % 2 == 0 && ring < o->ctx ? ring : o->ctx;
    }
    make_plan(g, &pl);
    for (int i = 0; i < pl.n; i++) {
        total += pl.p[i].bytes;
        uint64_t *cat[] = {&g->mem.weights_fp32, &g->mem.weights_bf16, &g->mem.kv, &g->mem.scratch};
        *cat[pl.p[i].category] += pl.p[i].bytes;
    }
    g->mem.total = total;
    if ((e = hipMemGetInfo(&free_b, &total_b)) != hipSuccess) {
        gptoss_gpu_fail(err, g, "cannot read free memory", e);
        goto fail;
    }
    if (total + HEADROOM > free_b) {
        snprintf(err, GPTOSS_ERR_LEN,
                 "device %d: need %.2f GiB for weights (%.2f GiB fp32 + %.2f GiB bf16), KV cache "
                 "(%.2f GiB) and scratch (%.2f GiB) plus %.2f GiB headroom; %.2f GiB free",
                 o->device + 1, total / GIB, g->mem.weights_fp32 / GIB, g->mem.weights_bf16 / GIB,
                 g->mem.kv / GIB, g->mem.scratch / GIB, HEADROOM / GIB, free_b / GIB);
        goto fail;
    }
    if ((e = hipMalloc((void **)&g->arena, total)) != hipSuccess) {
        (void)hipGetLastError();
        snprintf(err, GPTOSS_ERR_LEN, "device %d: cannot allocate %.2f GiB: %s", o->device + 1,
                 total / GIB, hipGetErrorString(e));
        goto fail;
    }
    {
        char *cur = g->arena;
        for (int i = 0; i < pl.n; i++) {
            *pl.p[i].field = cur;
            cur += pl.p[i].bytes;
        }
    }
    if (!o->weights_bf16) { /* the GEMM inputs are the fp32 buffers themselves */
        g->t_in = g->t;
        g->attn_in = g->attn;
    }
    g->sync_launches = env_flag("GPTOSS_SYNC_LAUNCHES");
    if ((e = hipStreamCreateWithFlags(&g->stream, hipStreamNonBlocking)) != hipSuccess) {
        gptoss_gpu_fail(err, g, "cannot create a stream", e);
        goto fail;
    }
    for (int i = 0; i < GPTOSS_RING; i++) {
        struct ring_entry *r = &g->ring[i];
        if ((e = hipHostMalloc((void **)&r->upload_host, g->upload_bytes, 0)) != hipSuccess ||
            (e = hipHostMalloc((void **)&r->tokens_host, sizeof(int) * (size_t)o->rows, 0)) !=
                hipSuccess ||
            (e = hipEventCreateWithFlags(&r->done, hipEventDisableTiming)) != hipSuccess) {
            gptoss_gpu_fail(err, g, "cannot allocate pinned host buffers", e);
            goto fail;
        }
    }
    if (upload_weights(g, err) || upload_rope(g, err))
        goto fail;
    g->next_ticket = 1;
    g->last_kernel = "(none)";
    *out = g;
    return 0;
fail:
    gptoss_gpu_free(g);
    return -1;
}

static void deliver(gptoss_gpu *g, struct ring_entry *r) {
    gptoss_gpu_result *res = r->result;
    if (!res)
        return;
    r->result = NULL;
    if (hipEventSynchronize(r->done) != hipSuccess)
        return; /* the caller's wait reports the error */
    memcpy(res->tokens, r->tokens_host, sizeof(int) * (size_t)r->rows);
    res->bad_row = -1;
    for (int i = 0; i < r->rows && res->bad_row < 0; i++)
        if (res->tokens[i] < 0)
            res->bad_row = i;
    res->delivered = 1;
}

void gptoss_gpu_free(gptoss_gpu *g) {
    if (!g)
        return;
    if (g->stream) {
        (void)hipSetDevice(g->o.device);
        (void)hipStreamSynchronize(g->stream);
        for (int i = 0; i < GPTOSS_RING; i++)
            deliver(g, &g->ring[i]);
    }
    for (int i = 0; i < GPTOSS_RING; i++) {
        struct ring_entry *r = &g->ring[i];
        if (r->upload_host)
            (void)hipHostFree(r->upload_host);
        if (r->tokens_host)
            (void)hipHostFree(r->tokens_host);
        if (r->done)
            (void)hipEventDestroy(r->done);
    }
    for (int i = 0; i < g->made_prof_events; i++)
        (void)hipEventDestroy(g->prof_events[i]);
    gptoss_gpu_free_graphs(g);
    if (g->stream)
        (void)hipStreamDestroy(g->stream);
    if (g->arena)
        (void)hipFree(g->arena);
    (void)hipGetLastError();
    free(g->prof);
    free(g->prof_events);
    free(g->prof_labels);
    free(g->k_layer);
    free(g->v_layer);
    free(g->layer_positions);
    free(g->length);
    free(g->slot_rows);
    free(g);
}

const gptoss_gpu_opts *gptoss_gpu_options(const gptoss_gpu *g) { return &g->o; }
void gptoss_gpu_memory_use(const gptoss_gpu *g, gptoss_gpu_memory *out) { *out = g->mem; }
int gptoss_gpu_length(const gptoss_gpu *g, int slot) { return g->length[slot]; }
void gptoss_gpu_reset(gptoss_gpu *g, int slot) { g->length[slot] = 0; }

/* ---- launches and profiling ------------------------------------------------------ */

static int grow_events(gptoss_gpu *g, char *err) {
    if (g->n_prof_events + 2 <= g->cap_prof_events)
        return 0;
    int cap = g->cap_prof_events ? 2 * g->cap_prof_events : 1024;
    hipEvent_t *ev = (hipEvent_t *)realloc(g->prof_events, sizeof(hipEvent_t) * (size_t)cap);
    const char **lb = ev ? (const char **)realloc(g->prof_labels, sizeof(char *) * (size_t)cap) : NULL;
    if (ev)
        g->prof_events = ev;
    if (lb)
        g->prof_labels = lb;
    if (!ev || !lb) {
        snprintf(err, GPTOSS_ERR_LEN, "profile: out of host memory");
        return -1;
    }
    g->cap_prof_events = cap;
    return 0;
}

int gptoss_gpu_launch_begin(gptoss_gpu *g, const char *label, char *err) {
    if (!g->profiling)
        return 0;
    if (grow_events(g, err))
        return -1;
    while (g->made_prof_events < g->n_prof_events + 2) {
        hipError_t e = hipEventCreate(&g->prof_events[g->made_prof_events]);
        if (e != hipSuccess)
            return gptoss_gpu_fail(err, g, "profile: cannot create an event", e);
        g->made_prof_events++;
    }
    g->prof_labels[g->n_prof_events / 2] = label;
    hipError_t e = hipEventRecord(g->prof_events[g->n_prof_events], g->stream);
    g->n_prof_events += 2;
    return e == hipSuccess ? 0 : gptoss_gpu_fail(err, g, "profile: cannot record an event", e);
}

int gptoss_gpu_launched(gptoss_gpu *g, const char *label, hipError_t e, char *err) {
    g->last_kernel = label;
    if (e == hipSuccess && g->sync_launches)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess) {
        snprintf(err, GPTOSS_ERR_LEN, "step: device %d: kernel %s: %s", g->o.device + 1, label,
                 hipGetErrorString(e));
        return -1;
    }
    if (g->profiling) {
        e = hipEventRecord(g->prof_events[g->n_prof_events - 1], g->stream);
        if (e != hipSuccess)
            return gptoss_gpu_fail(err, g, "profile: cannot record an event", e);
    }
    return 0;
}

/* Folds the timed launches of the steps so far into the totals. */
static int collect_profile(gptoss_gpu *g, char *err) {
    hipError_t e = hipSetDevice(g->o.device);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "profile", e);
    for (int i = 0; i < g->n_prof_events; i += 2) {
        float ms = 0;
        (void)hipEventElapsedTime(&ms, g->prof_events[i], g->prof_events[i + 1]);
        const char *label = g->prof_labels[i / 2];
        int at = 0;
        while (at < g->n_prof && strcmp(g->prof[at].label, label) != 0)
            at++;
        if (at == g->n_prof) {
            if (g->n_prof == g->cap_prof) {
                int cap = g->cap_prof ? 2 * g->cap_prof : 32;
                struct profile_entry *p =
                    (struct profile_entry *)realloc(g->prof, sizeof *p * (size_t)cap);
                if (!p) {
                    snprintf(err, GPTOSS_ERR_LEN, "profile: out of host memory");
                    return -1;
                }
                g->prof = p;
                g->cap_prof = cap;
            }
            g->prof[g->n_prof++] = (struct profile_entry){label, 0.0, 0};
        }
        g->prof[at].seconds += ms / 1000.0;
        g->prof[at].calls++;
    }
    g->n_prof_events = 0;
    return 0;
}

int gptoss_gpu_profile(gptoss_gpu *g, int on, char *err) {
    if (collect_profile(g, err))
        return -1;
    if (!on)
        g->n_prof = 0;
    g->profiling = on;
    return 0;
}

void gptoss_gpu_profile_read(const gptoss_gpu *g,
                             void (*each)(void *ctx, const char *label, double seconds, long calls),
                             void *ctx) {
    char err[GPTOSS_ERR_LEN];
    if (collect_profile((gptoss_gpu *)g, err))
        return;
    for (int i = 0; i < g->n_prof; i++)
        each(ctx, g->prof[i].label, g->prof[i].seconds, g->prof[i].calls);
}

/* ---- steps ------------------------------------------------------------------------ */

static int check_chunks(gptoss_gpu *g, const gptoss_batch *b, char *err) {
    if (b->n > g->o.rows) {
        snprintf(err, GPTOSS_ERR_LEN,
                 "step: %d rows, but this replica takes at most rows = %d in one step", b->n,
                 g->o.rows);
        return -1;
    }
    /* slots are in range here (gptoss_batch_check ran first) */
    int over = -1;
    for (int r = 0; r < b->n; r++)
        if (++g->slot_rows[b->slots[r]] > g->o.chunk && over < 0)
            over = b->slots[r];
    int n = over >= 0 ? g->slot_rows[over] : 0;
    for (int r = 0; r < b->n; r++)
        g->slot_rows[b->slots[r]] = 0;
    if (over >= 0) {
        snprintf(err, GPTOSS_ERR_LEN,
                 "step: slot %d has %d or more rows, but this replica takes at most chunk = %d rows "
                 "of one slot in one step",
                 over + 1, n, g->o.chunk);
        return -1;
    }
    return 0;
}

static int begin_step(gptoss_gpu *g, const gptoss_batch *b, const gptoss_row_sampling *sampling,
                      struct ring_entry **entry, char *err) {
    if (gptoss_batch_check(b, g->o.slots, g->o.ctx, g->c.vocab_size, g->length, err) ||
        check_chunks(g, b, err))
        return -1;
    hipError_t e = hipSetDevice(g->o.device);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "step: cannot select the device", e);
    struct ring_entry *r = &g->ring[g->next_ticket % GPTOSS_RING];
    deliver(g, r);
    e = hipEventSynchronize(r->done); /* its upload buffer is free again */
    if (e != hipSuccess && r->ticket)
        return gptoss_gpu_fail(err, g, "step: an earlier step failed", e);
    int R = b->n, cap = g->o.rows;
    int *ints = (int *)r->upload_host;
    memcpy(ints, b->tokens, sizeof(int) * (size_t)R);
    memcpy(ints + cap, b->slots, sizeof(int) * (size_t)R);
    memcpy(ints + 2 * cap, b->positions, sizeof(int) * (size_t)R);
    gptoss_row_sampling *rs = (gptoss_row_sampling *)(r->upload_host + g->sampling_at);
    if (sampling)
        memcpy(rs, sampling, sizeof *rs * (size_t)R);
    else
        memset(rs, 0, sizeof *rs * (size_t)R);
    e = hipMemcpyAsync(g->upload_dev, r->upload_host, g->upload_bytes, hipMemcpyHostToDevice,
                       g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "step: uploading the batch", e);
    *entry = r;
    return 0;
}

int gptoss_gpu_step(gptoss_gpu *g, const gptoss_batch *b, const gptoss_row_sampling *sampling,
                    gptoss_gpu_result *res, float *logits, char *err) {
    struct ring_entry *r;
    if (begin_step(g, b, sampling, &r, err) || gptoss_gpu_forward_step(g, b, err))
        return -1;
    int R = b->n;
    const gptoss_row_sampling *rs = (const gptoss_row_sampling *)(g->upload_dev + g->sampling_at);
    if (gptoss_gpu_launch_begin(g, "sample", err) ||
        gptoss_gpu_launched(g, "sample",
                            gptoss_launch_sample(g->logits, R, g->c.vocab_size, rs, g->tokens_dev,
                                                 g->sample_ws, g->stream),
                            err))
        return -1;
    hipError_t e = hipMemcpyAsync(r->tokens_host, g->tokens_dev, sizeof(int) * (size_t)R,
                                  hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess && logits)
        e = hipMemcpyAsync(logits, g->logits, sizeof(float) * (size_t)R * g->c.vocab_size,
                           hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipEventRecord(r->done, g->stream);
    if (e == hipSuccess && logits)
        e = hipEventSynchronize(r->done);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "step: copying the results back", e);
    gptoss_batch_commit(b, g->length);
    r->ticket = g->next_ticket++;
    r->rows = R;
    r->result = res;
    res->ticket = r->ticket;
    res->rows = R;
    res->delivered = 0;
    res->bad_row = -1;
    return 0;
}

int gptoss_gpu_wait(gptoss_gpu *g, gptoss_gpu_result *res, char *err) {
    if (res->delivered)
        return 0;
    struct ring_entry *r = &g->ring[res->ticket % GPTOSS_RING];
    if (r->ticket != res->ticket || r->result != res) {
        snprintf(err, GPTOSS_ERR_LEN, "step: this step's result is gone (internal error)");
        return -1;
    }
    hipError_t e = hipEventSynchronize(r->done);
    if (e != hipSuccess) {
        snprintf(err, GPTOSS_ERR_LEN, "step: device %d: %s (while running a step; last kernel "
                 "enqueued: %s; with GPTOSS_SYNC_LAUNCHES=1 each kernel is waited for and the "
                 "failing one named)", g->o.device + 1, hipGetErrorString(e), g->last_kernel);
        return -1;
    }
    deliver(g, r);
    return 0;
}

void gptoss_gpu_forget(gptoss_gpu *g, gptoss_gpu_result *res) {
    if (res->delivered)
        return;
    struct ring_entry *r = &g->ring[res->ticket % GPTOSS_RING];
    if (r->result == res)
        r->result = NULL;
}

int gptoss_gpu_logits(gptoss_gpu *g, const gptoss_gpu_result *res, float *out, char *err) {
    if (res->ticket + 1 != g->next_ticket) {
        snprintf(err, GPTOSS_ERR_LEN,
                 "step:logits: a later step on this replica has replaced these logits; ask for them "
                 "before the next step, or pass logits = true to r:step");
        return -1;
    }
    hipError_t e = hipSetDevice(g->o.device);
    if (e == hipSuccess)
        e = hipMemcpyAsync(out, g->logits, sizeof(float) * (size_t)res->rows * g->c.vocab_size,
                                  hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess) {
        snprintf(err, GPTOSS_ERR_LEN, "step:logits: device %d: %s (last kernel enqueued: %s)",
                 g->o.device + 1, hipGetErrorString(e), g->last_kernel);
        return -1;
    }
    return 0;
}

int gptoss_gpu_trace(gptoss_gpu *g, int slot, int token, int pos, gptoss_trace *trace,
                     float *logits, char *err) {
    gptoss_batch b = {1, &slot, &pos, &token, 0};
    struct ring_entry *r;
    if (begin_step(g, &b, NULL, &r, err) || gptoss_gpu_forward(g, &b, trace, err))
        return -1;
    hipError_t e = hipMemcpyAsync(logits, g->logits, sizeof(float) * (size_t)g->c.vocab_size,
                                  hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "trace: reading the logits", e);
    gptoss_batch_commit(&b, g->length);
    g->next_ticket++; /* the logits of earlier steps are gone */
    return 0;
}

int gptoss_gpu_copy_bandwidth(int device, size_t bytes, double *out, char *err) {
    char *a = NULL, *b = NULL;
    hipEvent_t t0 = NULL, t1 = NULL;
    float ms = 0;
    const int reps = 20;
    hipError_t e = hipSetDevice(device);
    if (e == hipSuccess)
        e = hipMalloc((void **)&a, bytes);
    if (e == hipSuccess)
        e = hipMalloc((void **)&b, bytes);
    if (e == hipSuccess)
        e = hipMemset(a, 1, bytes);
    if (e == hipSuccess)
        e = hipEventCreate(&t0);
    if (e == hipSuccess)
        e = hipEventCreate(&t1);
    for (int i = 0; i < 3 && e == hipSuccess; i++) /* warm up */
        e = hipMemcpy(b, a, bytes, hipMemcpyDeviceToDevice);
    if (e == hipSuccess)
        e = hipEventRecord(t0, 0);
    for (int i = 0; i < reps && e == hipSuccess; i++)
        e = hipMemcpyAsync(b, a, bytes, hipMemcpyDeviceToDevice, 0);
    if (e == hipSuccess)
        e = hipEventRecord(t1, 0);
    if (e == hipSuccess)
        e = hipEventSynchronize(t1);
    if (e == hipSuccess)
        e = hipEventElapsedTime(&ms, t0, t1);
    if (a)
        (void)hipFree(a);
    if (b)
        (void)hipFree(b);
    if (t0)
        (void)hipEventDestroy(t0);
    if (t1)
        (void)hipEventDestroy(t1);
    if (e != hipSuccess) {
        (void)hipGetLastError();
        snprintf(err, GPTOSS_ERR_LEN, "device %d: copy bandwidth: %s", device + 1,
                 hipGetErrorString(e));
        return -1;
    }
    *out = 2.0 * (double)bytes * reps / (ms / 1000.0);
    return 0;
}
