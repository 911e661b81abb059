/* A GPU replica: one model on one device, behind the engine interface
 * (gptoss_gpu_engine). Creation lays every buffer out in one arena
 * (gpu_buffers.c) so that a short device is refused before anything is
 * allocated, then fills the weights on the device (gpu_weights.hip); steps
 * and forks are gpu_step.hip's. Here: creation and destruction, a slot's
 * length and logit bias, and the engine's table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_replica.h"

static const double GIB = 1073741824.0;

gptoss_status gptoss_gpu_fail(char *err, const gptoss_gpu *g, const char *what, hipError_t e) {
    return gptoss_fail(err, e == hipErrorOutOfMemory ? GPTOSS_E_DEVICE_MEMORY : GPTOSS_E_DEVICE,
                       "device %d: %s: %s", g->o.device, what, hipGetErrorString(e));
}

/* set, and neither empty nor "0" */
static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* ---- lifecycle ------------------------------------------------------------------ */

/* the per-layer cache table forks walk on the device */
static gptoss_status upload_kv_layers(gptoss_gpu *g, char *err) {
    int n = g->c.n_layers;
    gptoss_kv_layer *layers = (gptoss_kv_layer *)malloc(sizeof *layers * (size_t)(n ? n : 1));
    if (!layers)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    for (int l = 0; l < n; l++) {
        layers[l].k = g->buf.kv.k[l];
        layers[l].v = g->buf.kv.v[l];
        layers[l].positions = g->buf.kv.positions[l];
    }
    hipError_t e = hipMemcpy(g->buf.kv.layers, layers, sizeof *layers * (size_t)n, hipMemcpyHostToDevice);
    free(layers);
    return e == hipSuccess ? GPTOSS_OK : gptoss_gpu_fail(err, g, "uploading the KV cache table", e);
}

/* The router's per-row counters start at zero; each launch leaves them so. */
static gptoss_status zero_router_counters(gptoss_gpu *g, char *err) {
    hipError_t e = hipMemset(g->buf.s.router_done, 0, sizeof(unsigned) * (size_t)g->o.rows);
    return e == hipSuccess ? GPTOSS_OK : gptoss_gpu_fail(err, g, "zeroing the router's counters", e);
}

static gptoss_status check_shape(const gptoss_config *c, char *err) {
    if (!gptoss_attention_limits(c->n_attn_heads, c->n_kv_heads, c->head_dim) ||
        !gptoss_router_limits(c->n_experts, c->experts_per_token, c->hidden_dim))
        return gptoss_fail(err, GPTOSS_E_UNSUPPORTED,
                           "the GPU engine supports up to 32 query heads per KV head, heads of up to 256 "
                           "values, 2048 values per KV group, 256 experts, top-32 and hidden size %d "
                           "(this model: %d heads, %d KV heads of %d, %d experts, top-%d, hidden size %d)",
                           gptoss_router_max_hidden(), c->n_attn_heads, c->n_kv_heads, c->head_dim,
                           c->n_experts, c->experts_per_token, c->hidden_dim);
    return GPTOSS_OK;
}

static void gpu_destroy(void *ctx) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    if (g->stream) {
        (void)hipSetDevice(g->o.device);
        (void)hipStreamSynchronize(g->stream);
        for (int i = 0; i < GPTOSS_RING; i++)
            gptoss_gpu_deliver(g, &g->ring.entry[i]);
    }
    for (int i = 0; i < GPTOSS_RING; i++) {
        struct ring_entry *r = &g->ring.entry[i];
        if (r->upload_host)
            (void)hipHostFree(r->upload_host);
        if (r->tokens_host)
            (void)hipHostFree(r->tokens_host);
        if (r->logprobs_host)
            (void)hipHostFree(r->logprobs_host);
        if (r->masks_host)
            (void)hipHostFree(r->masks_host);
        if (r->done)
            (void)hipEventDestroy(r->done);
    }
    if (g->bias_host)
        (void)hipHostFree(g->bias_host);
    if (g->masks)
        (void)hipFree(g->masks);
    if (g->bias_sent)
        (void)hipEventDestroy(g->bias_sent);
    gptoss_gpu_profile_free(g);
    gptoss_gpu_free_graphs(g);
    if (g->stream)
        (void)hipStreamDestroy(g->stream);
    if (g->arena)
        (void)hipFree(g->arena);
    (void)hipGetLastError();
    free(g->buf.kv.k);
    free(g->buf.kv.v);
    free(g->buf.kv.positions);
    free(g->length);
    free(g->ring_from);
    free(g->bias_pending);
    free(g->slot_rows);
    free(g);
}

/* The arena, refused with the sizes when the device is short of memory. */
static gptoss_status allocate(gptoss_gpu *g, char *err) {
    const gptoss_engine_opts *o = &g->o;
    gptoss_gpu_layout(g->m, o, NULL, &g->buf);
    const uint64_t total = g->buf.total, *bytes = g->buf.bytes;
    size_t free_b = 0, total_b = 0;
    hipError_t e = hipMemGetInfo(&free_b, &total_b);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot read free memory", e);
    if (total + GPTOSS_GPU_HEADROOM > free_b) {
        char weights[160] = ""; /* "x GiB fp32 + y GiB bf16 + ..." */
        for (int f = 0; f < GPTOSS_N_WEIGHT_FORMATS; f++)
            snprintf(weights + strlen(weights), sizeof weights - strlen(weights), "%s%.2f GiB %s", f ? " + " : "",
                     bytes[f] / GIB, gptoss_weight_format_of(f)->name);
        return gptoss_fail(err, GPTOSS_E_DEVICE_MEMORY,
                           "device %d: need %.2f GiB for weights (%s), KV cache (%.2f GiB) and scratch (%.2f GiB) "
                           "plus %.2f GiB headroom; %.2f GiB free",
                           o->device, total / GIB, weights, bytes[GPTOSS_GPU_KV] / GIB,
                           bytes[GPTOSS_GPU_SCRATCH] / GIB, GPTOSS_GPU_HEADROOM / GIB, free_b / GIB);
    }
    if ((e = hipMalloc((void **)&g->arena, total)) != hipSuccess) {
        (void)hipGetLastError();
        return gptoss_fail(err, GPTOSS_E_DEVICE_MEMORY, "device %d: cannot allocate %.2f GiB: %s",
                           o->device, total / GIB, hipGetErrorString(e));
    }
    gptoss_gpu_layout(g->m, o, g->arena, &g->buf);
    return GPTOSS_OK;
}

static gptoss_status make_ring(gptoss_gpu *g, char *err) {
    for (int i = 0; i < GPTOSS_RING; i++) {
        struct ring_entry *r = &g->ring.entry[i];
        hipError_t e;
        if ((e = hipHostMalloc((void **)&r->upload_host, g->buf.upload_bytes, 0)) != hipSuccess ||
            (e = hipHostMalloc((void **)&r->tokens_host, sizeof(int) * (size_t)g->o.rows, 0)) != hipSuccess ||
            (e = hipEventCreateWithFlags(&r->done, hipEventDisableTiming)) != hipSuccess)
            return gptoss_gpu_fail(err, g, "cannot allocate pinned host buffers", e);
    }
    g->ring.next_ticket = 1;
    return GPTOSS_OK;
}

/* progress is not reported: the weights go to the device through a staging
 * buffer, never materialised on the host */
static gptoss_status gpu_create(gptoss_model *m, const gptoss_engine_opts *o, const gptoss_progress *,
                                void **out, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)calloc(1, sizeof *g);
    if (!g)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    g->m = m;
    g->c = m->config;
    g->o = *o;
    g->last_kernel = "(none)";
    const gptoss_config *c = &g->c;
    gptoss_status s = check_shape(c, err);
    hipError_t e;
    if (s)
        goto fail;
    if ((e = hipSetDevice(o->device)) != hipSuccess) {
        s = gptoss_gpu_fail(err, g, "cannot select the device", e);
        goto fail;
    }
    (void)hipDeviceGetAttribute(&g->dev.warp, hipDeviceAttributeWarpSize, o->device);
    (void)hipDeviceGetAttribute(&g->dev.multiprocessors, hipDeviceAttributeMultiprocessorCount, o->device);
    (void)hipDeviceGetAttribute(&g->dev.shared_per_sm, hipDeviceAttributeMaxSharedMemoryPerMultiprocessor,
                                o->device);
    g->buf.kv.k = (void **)calloc((size_t)c->n_layers, sizeof(void *));
    g->buf.kv.v = (void **)calloc((size_t)c->n_layers, sizeof(void *));
    g->buf.kv.positions = (int *)calloc((size_t)c->n_layers, sizeof(int));
    g->length = (int *)calloc((size_t)o->slots, sizeof(int));
    g->ring_from = (int *)calloc((size_t)o->slots, sizeof(int));
    g->bias_pending = (unsigned char *)calloc((size_t)o->slots, 1);
    g->slot_rows = (int *)calloc((size_t)o->slots, sizeof(int));
    if (!g->buf.kv.k || !g->buf.kv.v || !g->buf.kv.positions || !g->length || !g->ring_from || !g->bias_pending ||
        !g->slot_rows) {
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
        goto fail;
    }
    if ((s = allocate(g, err)))
        goto fail;
    g->sync_launches = env_flag("GPTOSS_SYNC_LAUNCHES");
    if ((e = hipStreamCreateWithFlags(&g->stream, hipStreamNonBlocking)) != hipSuccess) {
        s = gptoss_gpu_fail(err, g, "cannot create a stream", e);
        goto fail;
    }
    /* GPTOSS_NO_WGMMA: the other families instead, for comparing them in one process */
    g->dev.wgmma = !env_flag("GPTOSS_NO_WGMMA") && gptoss_gemm_wgmma_built(g->stream);
    /* GPTOSS_NO_NARROW: the streaming GEMM's 16-row tiles at every row count */
    g->dev.narrow = !env_flag("GPTOSS_NO_NARROW") && gptoss_gemm_narrow_built(g->stream);
    /* GPTOSS_NO_PDL: graphs of plainly launched kernels, for comparing the two */
    g->dev.programmatic = !env_flag("GPTOSS_NO_PDL") && gptoss_programmatic_built(g->stream);
    if ((e = hipEventCreateWithFlags(&g->bias_sent, hipEventDisableTiming)) != hipSuccess) {
        s = gptoss_gpu_fail(err, g, "cannot create an event", e);
        goto fail;
    }
    if ((s = make_ring(g, err)) || (s = gptoss_gpu_upload_weights(g, err)) ||
        (s = gptoss_gpu_upload_rope(g, err)) || (s = upload_kv_layers(g, err)) ||
        (s = zero_router_counters(g, err)))
        goto fail;
    if (c->sliding_window > 0 && gptoss_kv_positions(c, 0, o->ctx, o->chunk) < o->ctx)
        g->ring_positions = gptoss_kv_positions(c, 0, o->ctx, o->chunk); /* layer 0 is windowed */
    *out = g;
    return GPTOSS_OK;
fail:
    gpu_destroy(g);
    return s;
}

static int gpu_length(const void *ctx, int slot) { return ((const gptoss_gpu *)ctx)->length[slot]; }

static void gpu_reset(void *ctx, int slot) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    g->length[slot] = g->ring_from[slot] = 0;
}

/* ---- logit biases ---------------------------------------------------------------- */

/* Uploads slot's list into its place in the device's table, on the stream:
 * steps enqueued before read the old list. The list passes through a
 * pinned buffer; a slot's part of it is rewritten only once its previous
 * upload has run. */
static gptoss_status gpu_logit_bias(void *ctx, int slot, const gptoss_logit_bias *b, int n, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    size_t per_slot = GPTOSS_MAX_LOGIT_BIAS;
    hipError_t e = hipSetDevice(g->o.device);
    if (e == hipSuccess && !g->bias_host)
        e = hipHostMalloc((void **)&g->bias_host, sizeof *g->bias_host * per_slot * (size_t)g->o.slots, 0);
    if (e == hipSuccess && g->bias_pending[slot]) {
        e = hipEventSynchronize(g->bias_sent);
        memset(g->bias_pending, 0, (size_t)g->o.slots);
    }
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "uploading a logit bias", e);
    gptoss_logit_bias *host = g->bias_host + per_slot * (size_t)slot;
    memcpy(host, b, sizeof *b * (size_t)n);
    e = hipMemcpyAsync(g->buf.s.bias + per_slot * (size_t)slot, host, sizeof *b * (size_t)n, hipMemcpyHostToDevice,
                       g->stream);
    if (e == hipSuccess)
        e = hipEventRecord(g->bias_sent, g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "uploading a logit bias", e);
    g->bias_pending[slot] = 1;
    return GPTOSS_OK;
}

/* ---- penalties ------------------------------------------------------------------- */

/* slot's counted ids, read and extended by the sampling kernel, are none
 * from the steps enqueued after this on */
static gptoss_status gpu_drawn_reset(void *ctx, int slot, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    hipError_t e = hipSetDevice(g->o.device);
    if (e == hipSuccess)
        e = hipMemsetAsync(g->buf.s.drawn.n + slot, 0, sizeof *g->buf.s.drawn.n, g->stream);
    return e == hipSuccess ? GPTOSS_OK : gptoss_gpu_fail(err, g, "resetting a slot's penalties", e);
}

/* ---- the engine's table ------------------------------------------------------------ */

/* a function's static, not a namespace-scope constant, which clang's device
 * pass would place in device memory with host functions' addresses */
extern "C" const gptoss_engine_i *gptoss_gpu_engine(void) {
    static const gptoss_engine_i engine = {
        /* reads_fed_tokens */ 1,
        gptoss_gpu_resolve,
        gptoss_gpu_plan,
        gpu_create,
        gpu_destroy,
        gptoss_gpu_step,
        gptoss_gpu_wait,
        gptoss_gpu_ready,
        gptoss_gpu_forget,
        gptoss_gpu_logits,
        gptoss_gpu_trace,
        gpu_length,
        gptoss_gpu_rewind_limit,
        gpu_reset,
        gptoss_gpu_fork,
        gpu_logit_bias,
        gpu_drawn_reset,
        gptoss_gpu_profile,
        gptoss_gpu_profile_read,
    };
    return &engine;
}
