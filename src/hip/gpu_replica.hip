/* A GPU replica: one model on one device, behind the engine interface
 * (gptoss_gpu_engine). Creation lays every buffer out in one arena
 * (gpu_buffers.c) so that a short device is refused before anything is
 * allocated, then fills the weights on the device (synthetic recipe, or the
 * file converted to bf16 there). Steps are enqueued on the replica's stream
 * with their uploads and token copies in a ring of pinned buffers; results
 * are delivered into the caller's memory when asked, or when the ring needs
 * the entry again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/rope.h"
#include "../core/mxfp4.h"
#include "../core/synth_params.h"
#include "gpu_replica.h"

static const double GIB = 1073741824.0;

static gptoss_tiling tiling_of(const gptoss_gpu *g, int t) {
    const gptoss_tensor_desc *d = &g->m->layout.t[t];
    gptoss_tiling none = {0, 0};
    if (!gptoss_gpu_tiled(&g->c, &g->o, t))
        return none;
    gptoss_tiling tiled = {d->dims[d->ndim - 2], d->dims[d->ndim - 1]};
    return tiled;
}

const void *gptoss_gpu_layer_weight(const gptoss_gpu *g, int tensor, int layer) {
    uint64_t per_layer = gptoss_gpu_tensor_bytes(g->m, &g->o, tensor) / (uint64_t)g->m->layout.t[tensor].dims[0];
    return (const char *)g->buf.w.w[tensor] + (size_t)layer * per_layer;
}

gptoss_status gptoss_gpu_fail(char *err, const gptoss_gpu *g, const char *what, hipError_t e) {
    return gptoss_fail(err, e == hipErrorOutOfMemory ? GPTOSS_E_DEVICE_MEMORY : GPTOSS_E_DEVICE,
                       "device %d: %s: %s", g->o.device + 1, what, hipGetErrorString(e));
}

/* set, and neither empty nor "0" */
static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* ---- weights ------------------------------------------------------------------ */

/* Where a file model's tensors pass on their way in: read on the host into
 * a pinned buffer, copied to the step scratch (one run from x to the upload
 * buffer, gpu_buffers.c), converted there. */
typedef struct {
    void *host;
    char *device;
    size_t bytes; /* of each */
} gptoss_staging;

/* rows [first, first + rows) of MXFP4 tensor t from the host into its tiles */
static hipError_t fill_mxfp4_rows(gptoss_gpu *g, int t, uint64_t first, uint64_t rows, const gptoss_staging *st) {
    const gptoss_tensor_desc *d = &g->m->layout.t[t];
    const int64_t n = d->dims[d->ndim - 2], k = d->dims[d->ndim - 1];
    const uint64_t code_bytes = rows * (uint64_t)gptoss_mxfp4_blocks(k) * GPTOSS_MXFP4_BLOCK_BYTES;
    uint8_t *codes = (uint8_t *)st->host, *scales = codes + code_bytes;
    gptoss_model_read_mxfp4(g->m, t, first, rows, codes, scales);
    hipError_t e = hipMemcpyAsync(st->device, st->host, code_bytes + rows * (uint64_t)gptoss_mxfp4_blocks(k),
                                  hipMemcpyHostToDevice, g->stream);
    if (e == hipSuccess)
        e = gptoss_launch_mxfp4_place((const uint8_t *)st->device, (const uint8_t *)st->device + code_bytes, NULL, first,
                                      rows, n, k, g->buf.w.w[t], g->stream);
    return e;
}

/* tensor t's values into the device in its format there: generated
 * (synthetic models), or read on the host and copied or converted through
 * the staging, one piece at a time */
static hipError_t fill_tensor(gptoss_gpu *g, int t, const gptoss_staging *st) {
    const gptoss_model *m = g->m;
    const gptoss_tensor_desc *d = &m->layout.t[t];
    void *out = g->buf.w.w[t];
    gptoss_gpu_category format = gptoss_gpu_weight_format(&g->o, t);
    gptoss_tiling tiling = tiling_of(g, t);
    const int64_t n = d->dims[d->ndim - 2], k = d->dims[d->ndim - 1];
    if (gptoss_model_is_synthetic(m)) {
        gptoss_synth_param p = gptoss_synth_params(&m->config, m->seed, t);
        if (format == GPTOSS_GPU_WEIGHTS_MXFP4)
            return gptoss_launch_mxfp4_place(NULL, NULL, &p, 0, d->count / (uint64_t)k, n, k, out, g->stream);
        return gptoss_launch_synth_fill(p, 0, d->count, out, format == GPTOSS_GPU_WEIGHTS_BF16, tiling, g->stream);
    }
    hipError_t e = hipSuccess;
    if (format == GPTOSS_GPU_WEIGHTS_MXFP4) {
        const uint64_t row_bytes = (uint64_t)gptoss_mxfp4_blocks(k) * (GPTOSS_MXFP4_BLOCK_BYTES + 1);
        const uint64_t rows = d->count / (uint64_t)k, step = st->bytes / row_bytes;
        if (step == 0) /* a row wider than the step scratch: not a shape the kernels take */
            return hipErrorInvalidValue;
        for (uint64_t first = 0; first < rows && e == hipSuccess; first += step) {
            e = fill_mxfp4_rows(g, t, first, rows - first < step ? rows - first : step, st);
            if (e == hipSuccess) /* the buffers are reused by the next piece */
                e = hipStreamSynchronize(g->stream);
        }
        return e;
    }
    const uint64_t step = st->bytes / 4;
    for (uint64_t first = 0; first < d->count && e == hipSuccess; first += step) {
        uint64_t count = d->count - first < step ? d->count - first : step;
        gptoss_model_read(m, t, first, count, (float *)st->host);
        if (format == GPTOSS_GPU_WEIGHTS_FP32) {
            e = hipMemcpyAsync((float *)out + first, st->host, count * 4, hipMemcpyHostToDevice, g->stream);
        } else {
            e = hipMemcpyAsync(st->device, st->host, count * 4, hipMemcpyHostToDevice, g->stream);
            if (e == hipSuccess)
                e = gptoss_launch_to_bf16((const float *)st->device, first, count,
                                          tiling.n ? out : (char *)out + first * 2, tiling, g->stream);
        }
        if (e == hipSuccess)
            e = hipStreamSynchronize(g->stream);
    }
    return e;
}

static gptoss_status upload_weights(gptoss_gpu *g, char *err) {
    enum { HOST_STAGING = 64 << 20 };
    size_t scratch = (size_t)(g->buf.s.upload - (char *)g->buf.s.x);
    gptoss_staging st = {NULL, (char *)g->buf.s.x, scratch < HOST_STAGING ? scratch : HOST_STAGING};
    hipError_t e = gptoss_model_is_synthetic(g->m) ? hipSuccess : hipHostMalloc(&st.host, st.bytes, 0);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "allocating the weights' host staging", e);
    gptoss_status s = GPTOSS_OK;
    for (int t = 0; t < GPTOSS_N_TENSORS && e == hipSuccess; t++) {
        if (gptoss_gpu_tiled(&g->c, &g->o, t)) /* the tiles' padding */
            e = hipMemsetAsync(g->buf.w.w[t], 0, gptoss_gpu_tensor_bytes(g->m, &g->o, t), g->stream);
        if (e == hipSuccess)
            e = fill_tensor(g, t, &st);
        if (e == hipSuccess)
            e = hipStreamSynchronize(g->stream);
        if (e != hipSuccess) {
            char what[64];
            snprintf(what, sizeof what, "uploading %s", g->m->layout.t[t].name);
            s = gptoss_gpu_fail(err, g, what, e);
        }
    }
    if (st.host)
        (void)hipHostFree(st.host);
    return s;
}

static gptoss_status upload_rope(gptoss_gpu *g, char *err) {
    gptoss_rope rope;
    gptoss_status s = gptoss_rope_init(&rope, &g->c, err);
    if (s)
        return s;
    size_t half = g->c.head_dim / 2, n = (size_t)g->o.ctx * half;
    float *cs = (float *)malloc(sizeof(float) * n * 2);
    if (!cs) {
        gptoss_rope_free(&rope);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    }
    for (int p = 0; p < g->o.ctx; p++)
        gptoss_rope_cos_sin(&rope, p, cs + p * half, cs + n + p * half);
    gptoss_rope_free(&rope);
    hipError_t e = hipMemcpy(g->buf.w.cos, cs, n * 4, hipMemcpyHostToDevice);
    if (e == hipSuccess)
        e = hipMemcpy(g->buf.w.sin, cs + n, n * 4, hipMemcpyHostToDevice);
    free(cs);
    return e == hipSuccess ? GPTOSS_OK : gptoss_gpu_fail(err, g, "uploading the RoPE table", e);
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

static void deliver(gptoss_gpu *g, struct ring_entry *r) {
    gptoss_result *res = r->result;
    if (!res)
        return;
    r->result = NULL;
    if (hipEventSynchronize(r->done) != hipSuccess)
        return; /* the caller's wait reports the error */
    memcpy(res->tokens, r->tokens_host, sizeof(int) * (size_t)r->rows);
    if (res->logprobs && r->has_logprobs)
        memcpy(res->logprobs, r->logprobs_host, sizeof *res->logprobs * (size_t)r->rows);
    /* the step's row sampling is still in its upload buffer */
    const gptoss_row_sampling *rs = (const gptoss_row_sampling *)(r->upload_host + g->buf.sampling_at);
    res->bad_row = -1;
    for (int i = 0; i < r->rows && res->bad_row < 0; i++)
        if (res->tokens[i] < 0) {
            res->bad_row = i;
            snprintf(res->why, sizeof res->why, "row %d: %s", i + 1,
                     res->tokens[i] == -1 ? "a logit is NaN or +inf"
                     : rs[i].n_bias      ? GPTOSS_BIAS_BANS_ALL
                                         : "every logit is -inf");
        }
    res->delivered = 1;
}

static void gpu_destroy(void *ctx) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    if (g->stream) {
        (void)hipSetDevice(g->o.device);
        (void)hipStreamSynchronize(g->stream);
        for (int i = 0; i < GPTOSS_RING; i++)
            deliver(g, &g->ring.entry[i]);
    }
    for (int i = 0; i < GPTOSS_RING; i++) {
        struct ring_entry *r = &g->ring.entry[i];
        if (r->upload_host)
            (void)hipHostFree(r->upload_host);
        if (r->tokens_host)
            (void)hipHostFree(r->tokens_host);
        if (r->logprobs_host)
            (void)hipHostFree(r->logprobs_host);
        if (r->done)
            (void)hipEventDestroy(r->done);
    }
    if (g->bias_host)
        (void)hipHostFree(g->bias_host);
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
    if (total + GPTOSS_GPU_HEADROOM > free_b)
        return gptoss_fail(err, GPTOSS_E_DEVICE_MEMORY,
                           "device %d: need %.2f GiB for weights (%.2f GiB fp32 + %.2f GiB bf16 + %.2f GiB "
                           "mxfp4), KV cache (%.2f GiB) and scratch (%.2f GiB) plus %.2f GiB headroom; %.2f GiB free",
                           o->device + 1, total / GIB, bytes[GPTOSS_GPU_WEIGHTS_FP32] / GIB,
                           bytes[GPTOSS_GPU_WEIGHTS_BF16] / GIB, bytes[GPTOSS_GPU_WEIGHTS_MXFP4] / GIB,
                           bytes[GPTOSS_GPU_KV] / GIB,
                           bytes[GPTOSS_GPU_SCRATCH] / GIB, GPTOSS_GPU_HEADROOM / GIB, free_b / GIB);
    if ((e = hipMalloc((void **)&g->arena, total)) != hipSuccess) {
        (void)hipGetLastError();
        return gptoss_fail(err, GPTOSS_E_DEVICE_MEMORY, "device %d: cannot allocate %.2f GiB: %s",
                           o->device + 1, total / GIB, hipGetErrorString(e));
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
    if ((e = hipEventCreateWithFlags(&g->bias_sent, hipEventDisableTiming)) != hipSuccess) {
        s = gptoss_gpu_fail(err, g, "cannot create an event", e);
        goto fail;
    }
    if ((s = make_ring(g, err)) || (s = upload_weights(g, err)) || (s = upload_rope(g, err)) ||
        (s = upload_kv_layers(g, err)))
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

/* ---- windowed rings ---------------------------------------------------------- */

/* A windowed layer keeps a ring of the last ring_positions positions
 * written (sliding_window + chunk - 1): a slot's rings hold the keys of
 * positions ring_from[slot] up to its length, the older ones overwritten.
 * A row at position pos attends to the sliding_window - 1 positions before
 * it: the lowest of them that the rings lost, or -1 when they hold all. */
static int ring_lacks(const gptoss_gpu *g, int ring_from, int pos) {
    int need = pos - g->c.sliding_window + 1;
    need = need > 0 ? need : 0;
    return g->ring_positions && pos > 0 && need < ring_from ? need : -1;
}

/* The error for what (a row, or a fork when fork) at pos of a slot whose
 * rings hold positions from ring_from on, with the least pos that works. */
static gptoss_status ring_refusal(const gptoss_gpu *g, int slot, int ring_from, int pos, const char *what, int fork,
                                  char *err) {
    int chunk = g->ring_positions - g->c.sliding_window + 1;
    return gptoss_fail(err, GPTOSS_E_UNSUPPORTED,
                       "%s needs the keys of positions %d..%d of slot %d, but its windowed layers keep a ring of the "
                       "last %d positions written (sliding_window %d + chunk %d - 1), which holds positions from %d "
                       "on: %s %d %s",
                       what, ring_lacks(g, ring_from, pos), pos - 1, slot + 1, g->ring_positions, g->c.sliding_window,
                       chunk, ring_from, fork ? "forks of length" : "rows can go back to position",
                       ring_from + g->c.sliding_window - 1,
                       fork ? "or more (or 0) can be copied" : "or start again at 0");
}

/* After a step: its slots' lengths and what their rings hold. Each row
 * overwrites the position ring_positions before it; a row at 0 starts the
 * slot again. */
static void commit(gptoss_gpu *g, const gptoss_batch *b) {
    gptoss_batch_commit(b, g->length);
    for (int r = 0; g->ring_positions && r < b->n; r++) {
        int *from = &g->ring_from[b->slots[r]], pos = b->positions[r], lost = pos - g->ring_positions + 1;
        *from = pos == 0 ? 0 : *from;
        *from = lost > *from ? lost : *from;
    }
}

/* Refuses a row going back further than its slot's rings hold. Keys at
 * or past the slot's first position in this step are this step's own
 * (written before any row attends), so only older ones must be held. */
static gptoss_status check_rings(gptoss_gpu *g, const gptoss_batch *b, char *err) {
    if (!g->ring_positions)
        return GPTOSS_OK;
    int *first = g->slot_rows; /* borrowed: 0 outside check_chunks; here first position + 1 */
    for (int i = 0; i < b->n; i++) {
        int *f = &first[b->slots[i]];
        *f = *f == 0 || b->positions[i] + 1 < *f ? b->positions[i] + 1 : *f;
    }
    gptoss_status s = GPTOSS_OK;
    for (int i = 0; i < b->n && !s; i++) {
        int slot = b->slots[i], lacks = ring_lacks(g, g->ring_from[slot], b->positions[i]);
        if (lacks >= 0 && lacks < first[slot] - 1) {
            char what[48];
            snprintf(what, sizeof what, "positions[%d] = %d", i + 1, b->positions[i]);
            s = ring_refusal(g, slot, g->ring_from[slot], b->positions[i], what, 0, err);
        }
    }
    for (int i = 0; i < b->n; i++)
        first[b->slots[i]] = 0;
    return s;
}

/* ---- forks and logit biases ------------------------------------------------------ */

static gptoss_status gpu_fork(void *ctx, int from, int to, int length, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    if (ring_lacks(g, g->ring_from[from], length) >= 0) {
        char what[48];
        snprintf(what, sizeof what, "a fork of length %d", length);
        return ring_refusal(g, from, g->ring_from[from], length, what, 1, err);
    }
    hipError_t e = hipSetDevice(g->o.device);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot select the device", e);
    size_t row_bytes = (size_t)gptoss_kv_dim(&g->c) * (g->o.kv_bf16 ? 2 : 4);
    gptoss_status s = gptoss_gpu_launch_begin(g, "kv_fork", err);
    if (s || (s = gptoss_gpu_launched(g, "kv_fork",
                                      gptoss_launch_kv_fork(g->buf.kv.layers, g->c.n_layers, row_bytes, from, to,
                                                            length, g->stream),
                                      err)))
        return s;
    g->length[to] = length;
    g->ring_from[to] = length ? g->ring_from[from] : 0; /* the copied rings hold what the source's hold */
    return GPTOSS_OK;
}

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

/* ---- steps ------------------------------------------------------------------------ */

static gptoss_status check_chunks(gptoss_gpu *g, const gptoss_batch *b, char *err) {
    if (b->n > g->o.rows)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "%d rows, but this replica takes at most rows = %d in one step", b->n, g->o.rows);
    /* slots are in range here (gptoss_batch_check ran first) */
    int over = -1;
    for (int r = 0; r < b->n; r++)
        if (++g->slot_rows[b->slots[r]] > g->o.chunk && over < 0)
            over = b->slots[r];
    int n = over >= 0 ? g->slot_rows[over] : 0;
    for (int r = 0; r < b->n; r++)
        g->slot_rows[b->slots[r]] = 0;
    if (over >= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "slot %d has %d or more rows, but this replica takes at most chunk = %d rows "
                           "of one slot in one step",
                           over + 1, n, g->o.chunk);
    return GPTOSS_OK;
}

/* Checks the batch and uploads it through the next ring entry. */
static gptoss_status begin_step(gptoss_gpu *g, const gptoss_batch *b, const gptoss_row_sampling *sampling,
                                struct ring_entry **entry, char *err) {
    gptoss_status s = gptoss_batch_check(b, g->o.slots, g->o.ctx, g->c.vocab_size, g->length, err);
    if (s || (s = check_chunks(g, b, err)))
        return s;
    if ((s = check_rings(g, b, err)))
        return s;
    hipError_t e = hipSetDevice(g->o.device);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot select the device", e);
    struct ring_entry *r = &g->ring.entry[g->ring.next_ticket % GPTOSS_RING];
    deliver(g, r);
    e = hipEventSynchronize(r->done); /* its upload buffer is free again */
    if (e != hipSuccess && r->ticket)
        return gptoss_gpu_fail(err, g, "an earlier step failed", e);
    int R = b->n, cap = g->o.rows;
    int *ints = (int *)r->upload_host;
    memcpy(ints, b->tokens, sizeof(int) * (size_t)R);
    memcpy(ints + cap, b->slots, sizeof(int) * (size_t)R);
    memcpy(ints + 2 * cap, b->positions, sizeof(int) * (size_t)R);
    gptoss_row_sampling *rs = (gptoss_row_sampling *)(r->upload_host + g->buf.sampling_at);
    if (sampling)
        memcpy(rs, sampling, sizeof *rs * (size_t)R);
    else
        memset(rs, 0, sizeof *rs * (size_t)R);
    e = hipMemcpyAsync(g->buf.s.upload, r->upload_host, g->buf.upload_bytes, hipMemcpyHostToDevice, g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "uploading the batch", e);
    *entry = r;
    return GPTOSS_OK;
}

/* Copies the kept rows' logits back: runs of consecutive rows in one copy each. */
static hipError_t copy_logits(gptoss_gpu *g, const gptoss_step_args *a, int R) {
    size_t V = (size_t)g->c.vocab_size;
    hipError_t e = hipSuccess;
    int n = a->logit_rows ? a->n_logit_rows : R;
    for (int i = 0; i < n && e == hipSuccess;) {
        int first = a->logit_rows ? a->logit_rows[i] : i, run = 1;
        while (i + run < n && (a->logit_rows ? a->logit_rows[i + run] : i + run) == first + run)
            run++;
        e = hipMemcpyAsync(a->logits + (size_t)i * V, g->buf.s.logits + (size_t)first * V, sizeof(float) * V * run,
                           hipMemcpyDeviceToHost, g->stream);
        i += run;
    }
    return e;
}

static gptoss_status gpu_step(void *ctx, const gptoss_batch *b, const gptoss_step_args *a, gptoss_result *res,
                              char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r;
    gptoss_status s = begin_step(g, b, a->sampling, &r, err);
    if (s)
        return s;
    int R = b->n;
    hipError_t e = hipSuccess;
    if (res->logprobs && !r->logprobs_host) /* before the forward pass: a refusal leaves the slots as they were */
        e = hipHostMalloc((void **)&r->logprobs_host, sizeof *r->logprobs_host * (size_t)g->o.rows, 0);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "cannot allocate pinned host buffers", e);
    if ((s = gptoss_gpu_forward_step(g, b, err)))
        return s;
    const gptoss_row_sampling *rs = (const gptoss_row_sampling *)(g->buf.s.upload + g->buf.sampling_at);
    gptoss_row_logprobs *lp = res->logprobs ? g->buf.s.logprobs : NULL;
    if ((s = gptoss_gpu_launch_begin(g, "sample", err)) ||
        (s = gptoss_gpu_launched(g, "sample",
                                 gptoss_launch_sample(g->buf.s.logits, R, g->c.vocab_size, rs, g->buf.s.bias,
                                                      g->buf.s.tokens, lp, g->stream),
                                 err)))
        return s;
    e = hipMemcpyAsync(r->tokens_host, g->buf.s.tokens, sizeof(int) * (size_t)R, hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess && lp)
        e = hipMemcpyAsync(r->logprobs_host, lp, sizeof *lp * (size_t)R, hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess && a->logits)
        e = copy_logits(g, a, R);
    if (e == hipSuccess)
        e = hipEventRecord(r->done, g->stream);
    if (e == hipSuccess && a->logits)
        e = hipEventSynchronize(r->done);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "copying the results back", e);
    commit(g, b);
    r->ticket = g->ring.next_ticket++;
    r->rows = R;
    r->has_logprobs = lp != NULL;
    r->result = res;
    res->ticket = r->ticket;
    return GPTOSS_OK;
}

static gptoss_status gpu_wait(void *ctx, gptoss_result *res, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r = &g->ring.entry[res->ticket % GPTOSS_RING];
    if (r->ticket != res->ticket || r->result != res)
        return gptoss_fail(err, GPTOSS_E_STATE, "this step's result is gone (internal error)");
    hipError_t e = hipEventSynchronize(r->done);
    if (e != hipSuccess)
        return gptoss_fail(err, GPTOSS_E_DEVICE,
                           "device %d: %s (while running a step; last kernel enqueued: %s; with "
                           "GPTOSS_SYNC_LAUNCHES=1 each kernel is waited for and the failing one named)",
                           g->o.device + 1, hipGetErrorString(e), g->last_kernel);
    deliver(g, r);
    return GPTOSS_OK;
}

static void gpu_forget(void *ctx, gptoss_result *res) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r = &g->ring.entry[res->ticket % GPTOSS_RING];
    if (r->result == res)
        r->result = NULL;
}

static gptoss_status gpu_logits(void *ctx, const gptoss_result *res, float *out, char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    if (res->ticket + 1 != g->ring.next_ticket)
        return gptoss_fail(err, GPTOSS_E_STATE, "a later step on this replica has replaced these logits");
    hipError_t e = hipSetDevice(g->o.device);
    if (e == hipSuccess)
        e = hipMemcpyAsync(out, g->buf.s.logits, sizeof(float) * (size_t)res->rows * g->c.vocab_size,
                           hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess)
        return gptoss_fail(err, GPTOSS_E_DEVICE, "device %d: %s (last kernel enqueued: %s)", g->o.device + 1,
                           hipGetErrorString(e), g->last_kernel);
    return GPTOSS_OK;
}

static gptoss_status gpu_trace(void *ctx, const gptoss_batch *b, gptoss_trace *trace, float *logits,
                               char *err) {
    gptoss_gpu *g = (gptoss_gpu *)ctx;
    struct ring_entry *r;
    gptoss_status s = begin_step(g, b, NULL, &r, err);
    if (s || (s = gptoss_gpu_forward(g, b, trace, err)))
        return s;
    hipError_t e = hipMemcpyAsync(logits, g->buf.s.logits, sizeof(float) * (size_t)g->c.vocab_size,
                                  hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess)
        return gptoss_gpu_fail(err, g, "reading the logits", e);
    commit(g, b);
    g->ring.next_ticket++; /* the logits of earlier steps are gone */
    return GPTOSS_OK;
}

/* a function's static, not a namespace-scope constant, which clang's device
 * pass would place in device memory with host functions' addresses */
extern "C" const gptoss_engine_i *gptoss_gpu_engine(void) {
    static const gptoss_engine_i engine = {
        /* reads_fed_tokens */ 1,
        /* host_logits */ 0,
        gptoss_gpu_resolve,
        gptoss_gpu_plan,
        gpu_create,
        gpu_destroy,
        gpu_step,
        gpu_wait,
        gpu_forget,
        gpu_logits,
        gpu_trace,
        gpu_length,
        gpu_reset,
        gpu_fork,
        gpu_logit_bias,
        gptoss_gpu_profile,
        gptoss_gpu_profile_read,
    };
    return &engine;
}
