#include "gpu_buffers.h"

#include <string.h>

#include "../../kernels/layout.h"
#include "../core/sampler.h"

/* The experts' bf16 weights are tiled when a step that decodes every slot
 * expects at most 16 rows per expert: their GEMMs then stream, where tiles
 * are faster; with more rows they run staged, where rows of k are. The
 * attention's qkv and output projections' up to 64 slots, where their
 * decode GEMMs stream 16-row tiles; with more rows each weight is re-read
 * by several row tiles, which is slower tiled. Either way a row gets the
 * same bits. */
int gptoss_gpu_tiled(const gptoss_config *c, const gptoss_engine_opts *o, int tensor) {
    if (!o->weights_bf16)
        return 0;
    if (tensor == GPTOSS_T_W_MLP1 || tensor == GPTOSS_T_W_MLP2)
        return (int64_t)o->slots * c->experts_per_token <= 16 * (int64_t)c->n_experts;
    return (tensor == GPTOSS_T_W_QKV || tensor == GPTOSS_T_W_O) && o->slots <= 64;
}

uint64_t gptoss_gpu_tensor_elems(const gptoss_model *m, const gptoss_engine_opts *o, int tensor) {
    const gptoss_tensor_desc *d = &m->layout.t[tensor];
    if (!gptoss_gpu_tiled(&m->config, o, tensor))
        return d->count;
    int64_t n = d->dims[d->ndim - 2], k = d->dims[d->ndim - 1];
    return d->count / ((uint64_t)n * (uint64_t)k) * gptoss_tiled_elems(n, k);
}

size_t gptoss_gpu_elem_bytes(const gptoss_engine_opts *o, int tensor) {
    return o->weights_bf16 && gptoss_tensor_is_matrix(tensor) ? 2 : 4;
}

/* The next buffer of the arena: bytes rounded up to 256, counted under
 * category; its address, or NULL when only sizing. */
static void *place(gptoss_gpu_buffers *b, char *base, size_t bytes, gptoss_gpu_category category) {
    size_t rounded = (bytes + 255) & ~(size_t)255;
    void *at = base ? base + b->total : NULL;
    b->total += rounded;
    b->bytes[category] += rounded;
    return at;
}

/* Keys per attention split: 128 (two chunks: blocks enough for one row, and
 * few partials to fold at many rows), longer past 64 splits. */
static int split_length(int ctx) {
    int64_t len = ((int64_t)ctx + 63) / 64;
    len = (len + 63) / 64 * 64;
    return len < 128 ? 128 : (int)len;
}

void gptoss_gpu_layout(const gptoss_model *m, const gptoss_engine_opts *o, char *base,
                       gptoss_gpu_buffers *b) {
    const gptoss_config *c = &m->config;
    size_t R = (size_t)o->rows, H = c->hidden_dim, D = c->head_dim, Hq = c->n_attn_heads;
    size_t E = c->n_experts, K = c->experts_per_token, I = c->intermediate_dim;
    size_t Q = gptoss_qkv_dim(c), HqD = Hq * D, kvd = gptoss_kv_dim(c), V = c->vocab_size;
    size_t P = R * K, act = o->weights_bf16 ? 2 : 4, kv = o->kv_bf16 ? 2 : 4, half = D / 2;
    const gptoss_gpu_kv layers = b->kv; /* the caller's per-layer arrays, or none */
    memset(b, 0, sizeof *b);
    b->kv = layers;
    gptoss_gpu_scratch *s = &b->s;
    gptoss_gpu_trace_buffers *tr = &b->trace;

    for (int t = 0; t < GPTOSS_N_TENSORS; t++) {
        size_t elem = gptoss_gpu_elem_bytes(o, t);
        b->w.w[t] = place(b, base, gptoss_gpu_tensor_elems(m, o, t) * elem,
                          elem == 2 ? GPTOSS_GPU_WEIGHTS_BF16 : GPTOSS_GPU_WEIGHTS_FP32);
    }
    for (int l = 0; l < c->n_layers; l++) {
        int positions = gptoss_kv_positions(c, l, o->ctx, o->chunk);
        size_t bytes = (size_t)o->slots * positions * kvd * kv;
        void *k = place(b, base, bytes, GPTOSS_GPU_KV), *v = place(b, base, bytes, GPTOSS_GPU_KV);
        if (layers.k) {
            layers.k[l] = k;
            layers.v[l] = v;
            layers.positions[l] = positions;
        }
    }
    /* the step scratch from x to the upload also stages a file's weights on
     * their way to bf16 (gpu_replica.hip): keep it one run */
    b->w.cos = place(b, base, (size_t)o->ctx * half * 4, GPTOSS_GPU_SCRATCH);
    b->w.sin = place(b, base, (size_t)o->ctx * half * 4, GPTOSS_GPU_SCRATCH);
    s->x = place(b, base, R * H * 4, GPTOSS_GPU_SCRATCH);
    s->t = place(b, base, R * H * 4, GPTOSS_GPU_SCRATCH);
    s->qkv = place(b, base, R * Q * 4, GPTOSS_GPU_SCRATCH);
    s->q = place(b, base, R * HqD * 4, GPTOSS_GPU_SCRATCH);
    s->attn = place(b, base, R * HqD * 4, GPTOSS_GPU_SCRATCH);
    if (o->weights_bf16) {
        s->t_in = place(b, base, R * H * 2, GPTOSS_GPU_SCRATCH);
        s->attn_in = place(b, base, R * HqD * 2, GPTOSS_GPU_SCRATCH);
    } else { /* the GEMMs read the fp32 buffers themselves */
        s->t_in = s->t;
        s->attn_in = s->attn;
    }
    s->router_logits = place(b, base, R * E * 4, GPTOSS_GPU_SCRATCH);
    s->topk_w = place(b, base, R * K * 4, GPTOSS_GPU_SCRATCH);
    s->topk_i = place(b, base, R * K * 4, GPTOSS_GPU_SCRATCH);
    s->pair_row = place(b, base, P * 4, GPTOSS_GPU_SCRATCH);
    s->pair_of = place(b, base, P * 4, GPTOSS_GPU_SCRATCH);
    b->max_tiles = gptoss_moe_max_tiles(o->rows, (int)K, (int)E, GPTOSS_MOE_MIN_TILE_ROWS);
    s->tiles = place(b, base, (size_t)b->max_tiles * 16, GPTOSS_GPU_SCRATCH);
    s->tile_count = place(b, base, 4, GPTOSS_GPU_SCRATCH);
    s->act = place(b, base, P * I * act, GPTOSS_GPU_SCRATCH);
    s->m2 = place(b, base, P * H * 4, GPTOSS_GPU_SCRATCH);
    s->logits = place(b, base, R * V * 4, GPTOSS_GPU_SCRATCH);
    s->tokens = place(b, base, R * 4, GPTOSS_GPU_SCRATCH);
    b->split_len = split_length(o->ctx);
    size_t splits = ((size_t)o->ctx + b->split_len - 1) / b->split_len;
    s->part_o = place(b, base, R * Hq * splits * D * 4, GPTOSS_GPU_SCRATCH);
    s->part_ml = place(b, base, R * Hq * splits * 2 * 4, GPTOSS_GPU_SCRATCH);
    b->sampling_at = (R * 3 * 4 + 15) & ~(size_t)15; /* after tokens, slots, positions */
    b->upload_bytes = b->sampling_at + R * sizeof(gptoss_row_sampling);
    s->upload = place(b, base, b->upload_bytes, GPTOSS_GPU_SCRATCH);
    tr->m1 = place(b, base, K * 2 * I * 4, GPTOSS_GPU_SCRATCH);
    tr->y = place(b, base, K * I * 4, GPTOSS_GPU_SCRATCH);
    tr->proj = place(b, base, H * 4, GPTOSS_GPU_SCRATCH);
    tr->k = place(b, base, kvd * 4, GPTOSS_GPU_SCRATCH);
    tr->agg = place(b, base, H * 4, GPTOSS_GPU_SCRATCH);
    tr->scores = place(b, base, Hq * ((size_t)o->ctx + 1) * 4, GPTOSS_GPU_SCRATCH);
    tr->probs = place(b, base, Hq * ((size_t)o->ctx + 1) * 4, GPTOSS_GPU_SCRATCH);
}

gptoss_status gptoss_gpu_resolve(const gptoss_model *m, gptoss_engine_opts *o, char *err) {
    (void)m;
    if (o->threads >= 0)
        return gptoss_fail(err, GPTOSS_E_INVALID, "threads applies to CPU replicas only");
    if (!o->rows)
        o->rows = o->slots > 256 ? o->slots : 256;
    if (!o->chunk)
        o->chunk = o->rows < 128 ? o->rows : 128;
    if (o->chunk > o->rows)
        return gptoss_fail(err, GPTOSS_E_INVALID, "chunk = %d must be in 1..rows (%d)", o->chunk,
                           o->rows);
    return GPTOSS_OK;
}

void gptoss_gpu_plan(const gptoss_model *m, const gptoss_engine_opts *o, gptoss_memory *out,
                     uint64_t *headroom) {
    gptoss_gpu_buffers b = {0};
    gptoss_gpu_layout(m, o, NULL, &b);
    uint64_t fp32 = b.bytes[GPTOSS_GPU_WEIGHTS_FP32], bf16 = b.bytes[GPTOSS_GPU_WEIGHTS_BF16];
    *out = (gptoss_memory){6,
                           {{"weights_fp32", fp32},
                            {"weights_bf16", bf16},
                            {"weights", fp32 + bf16},
                            {"kv", b.bytes[GPTOSS_GPU_KV]},
                            {"scratch", b.bytes[GPTOSS_GPU_SCRATCH]},
                            {"total", b.total}}};
    *headroom = GPTOSS_GPU_HEADROOM;
}
