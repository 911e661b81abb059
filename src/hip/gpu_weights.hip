/* A GPU replica's weights: filled once at creation, in each tensor's format
 * on the device (fp32, bf16, tiled, a block format's tiles), either generated there
 * (the synthetic recipe) or read from the model file through a staging
 * buffer; and the RoPE table, the other constant every step reads. */
#include <stdio.h>
#include <stdlib.h>

#include "../core/rope.h"
#include "../core/synth_params.h"
#include "gpu_replica.h"

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

/* Where a file model's tensors pass on their way in: read on the host into
 * a pinned buffer, copied to the step scratch (one run from x to the upload
 * buffer, gpu_buffers.c), converted there. */
typedef struct {
    void *host;
    char *device;
    size_t bytes; /* of each */
} gptoss_staging;

/* rows [first, first + rows) of tensor t, held in block format `format`,
 * from the host into its tiles */
static hipError_t fill_coded_rows(gptoss_gpu *g, int t, int format, uint64_t first, uint64_t rows,
                                  const gptoss_staging *st) {
    const gptoss_tensor_desc *d = &g->m->layout.t[t];
    const gptoss_block_codec *codec = gptoss_weight_format_of(format)->experts;
    const int64_t n = d->dims[d->ndim - 2], k = d->dims[d->ndim - 1], blocks = (k + codec->block - 1) / codec->block;
    const uint64_t code_bytes = rows * (uint64_t)blocks * (uint64_t)codec->block_bytes;
    uint8_t *codes = (uint8_t *)st->host, *scales = codes + code_bytes;
    gptoss_model_read_blocks(g->m, format, t, first, rows, codes, scales);
    hipError_t e = hipMemcpyAsync(st->device, st->host, code_bytes + rows * (uint64_t)blocks, hipMemcpyHostToDevice,
                                  g->stream);
    if (e == hipSuccess)
        e = gptoss_launch_place_coded(gptoss_gpu_weight_layout(&g->c, &g->o, t), (const uint8_t *)st->device,
                                      (const uint8_t *)st->device + code_bytes, NULL, first, rows, n, k,
                                      g->buf.w.w[t], g->stream);
    return e;
}

/* tensor t's values into the device in its format there: generated
 * (synthetic models), or read on the host and copied or converted through
 * the staging, one piece at a time */
static hipError_t fill_tensor(gptoss_gpu *g, int t, const gptoss_staging *st) {
    const gptoss_model *m = g->m;
    const gptoss_tensor_desc *d = &m->layout.t[t];
    void *out = g->buf.w.w[t];
    const int format = gptoss_gpu_weight_format(&g->o, t);
    const gptoss_block_codec *codec = gptoss_weight_format_of(format)->experts;
    gptoss_tiling tiling = tiling_of(g, t);
    const int64_t n = d->dims[d->ndim - 2], k = d->dims[d->ndim - 1];
    if (gptoss_model_is_synthetic(m)) {
        gptoss_synth_param p = gptoss_synth_params(&m->config, m->seed, t);
        if (codec)
            return gptoss_launch_place_coded(gptoss_gpu_weight_layout(&g->c, &g->o, t), NULL, NULL, &p, 0,
                                             d->count / (uint64_t)k, n, k, out, g->stream);
        return gptoss_launch_synth_fill(p, 0, d->count, out, format == GPTOSS_WEIGHTS_BF16, tiling, g->stream);
    }
    hipError_t e = hipSuccess;
    if (codec) {
        const uint64_t row_bytes = (uint64_t)((k + codec->block - 1) / codec->block) * ((uint64_t)codec->block_bytes + 1);
        const uint64_t rows = d->count / (uint64_t)k, step = st->bytes / row_bytes;
        if (step == 0) /* a row wider than the step scratch: not a shape the kernels take */
            return hipErrorInvalidValue;
        for (uint64_t first = 0; first < rows && e == hipSuccess; first += step) {
            e = fill_coded_rows(g, t, format, first, rows - first < step ? rows - first : step, st);
            if (e == hipSuccess) /* the buffers are reused by the next piece */
                e = hipStreamSynchronize(g->stream);
        }
        return e;
    }
    const uint64_t step = st->bytes / 4;
    for (uint64_t first = 0; first < d->count && e == hipSuccess; first += step) {
        uint64_t count = d->count - first < step ? d->count - first : step;
        gptoss_model_read(m, t, first, count, (float *)st->host);
        if (format == GPTOSS_WEIGHTS_FP32) {
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

gptoss_status gptoss_gpu_upload_weights(gptoss_gpu *g, char *err) {
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

gptoss_status gptoss_gpu_upload_rope(gptoss_gpu *g, char *err) {
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
