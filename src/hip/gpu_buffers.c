#include "gpu_buffers.h"

#include <stdio.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/sampler.h"

static int is_expert_matrix(int tensor) { return tensor == GPTOSS_T_W_MLP1 || tensor == GPTOSS_T_W_MLP2; }

int gptoss_gpu_weight_format(const gptoss_engine_opts *o, int tensor) {
    const gptoss_weight_format *f = gptoss_weight_format_of(o->weights);
    if (f->experts && is_expert_matrix(tensor))
        return o->weights;
    return f->bf16_arithmetic && gptoss_tensor_is_matrix(tensor) ? GPTOSS_WEIGHTS_BF16 : GPTOSS_WEIGHTS_FP32;
}

/* bytes of one 16 x 32 tile of a block format: each row's codes for its 32
 * inputs, then a scale byte per row and block (layout.h) */
static uint64_t coded_tile_bytes(const gptoss_block_codec *codec) {
    return (uint64_t)GPTOSS_TILE_ROWS * (GPTOSS_TILE_K / codec->block) * ((uint64_t)codec->block_bytes + 1);
}

/* The experts' bf16 weights are tiled when a step that decodes every slot
 * expects at most 16 rows per expert: their GEMMs then stream, where tiles
 * are faster; with more rows they run staged, where rows of k are. The
 * attention's qkv and output projections' up to 64 slots, where their
 * decode GEMMs stream 16-row tiles; with more rows each weight is re-read
 * by several row tiles, which is slower tiled. Either way a row gets the
 * same bits. A block format's matrices are always tiled (layout.h). */
int gptoss_gpu_tiled(const gptoss_config *c, const gptoss_engine_opts *o, int tensor) {
    const int format = gptoss_gpu_weight_format(o, tensor);
    if (gptoss_weight_format_of(format)->experts)
        return 1;
    if (format != GPTOSS_WEIGHTS_BF16)
        return 0;
    if (is_expert_matrix(tensor))
        return (int64_t)o->slots * c->experts_per_token <= 16 * (int64_t)c->n_experts;
    return (tensor == GPTOSS_T_W_QKV || tensor == GPTOSS_T_W_O) && o->slots <= 64;
}

gptoss_weight_layout gptoss_gpu_weight_layout(const gptoss_config *c, const gptoss_engine_opts *o, int tensor) {
    const gptoss_weight_format *f = gptoss_weight_format_of(gptoss_gpu_weight_format(o, tensor));
    if (f->experts)
        return (gptoss_weight_layout)f->gpu_layout;
    if (!f->bf16_arithmetic)
        return GPTOSS_W_FP32_ROWS;
    return gptoss_gpu_tiled(c, o, tensor) ? GPTOSS_W_BF16_TILES : GPTOSS_W_BF16_ROWS;
}

uint64_t gptoss_gpu_tensor_bytes(const gptoss_model *m, const gptoss_engine_opts *o, int tensor) {
    const gptoss_tensor_desc *d = &m->layout.t[tensor];
    const gptoss_weight_format *f = gptoss_weight_format_of(gptoss_gpu_weight_format(o, tensor));
    if (!f->bf16_arithmetic)
        return d->count * 4;
    if (!gptoss_gpu_tiled(&m->config, o, tensor))
        return d->count * 2;
    int64_t n = d->dims[d->ndim - 2], k = d->dims[d->ndim - 1];
    uint64_t matrices = d->count / ((uint64_t)n * (uint64_t)k);
    int overflow = 0; /* the padding of many small matrices can pass 2^64 bytes */
    return gptoss_checked_mul(matrices, f->experts ? gptoss_coded_tiled_bytes(n, k, coded_tile_bytes(f->experts))
                                                   : 2 * gptoss_tiled_elems(n, k),
                              &overflow);
}

/* The next buffer of the arena, of x * y * z * w bytes rounded up to 256,
 * counted under category; its address, or NULL when only sizing. Every size
 * is checked: a plan that leaves 64 bits says so (b->overflow). */
static void *place(gptoss_gpu_buffers *b, char *base, int category, uint64_t x,
                   uint64_t y, uint64_t z, uint64_t w) {
    int *o = &b->overflow;
    uint64_t bytes = gptoss_checked_mul(gptoss_checked_mul(x, y, o), gptoss_checked_mul(z, w, o), o);
    uint64_t rounded = gptoss_checked_add(bytes, 255, o) & ~(uint64_t)255;
    void *at = base ? base + b->total : NULL;
    b->total = gptoss_checked_add(b->total, rounded, o);
    b->bytes[category] = gptoss_checked_add(b->bytes[category], rounded, o);
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
    /* each below 2^31, so a product of two fits; longer ones go through place */
    uint64_t R = (uint64_t)o->rows, H = c->hidden_dim, D = c->head_dim, Hq = c->n_attn_heads;
    uint64_t E = c->n_experts, K = c->experts_per_token, I = c->intermediate_dim, V = c->vocab_size;
    uint64_t Q = (Hq + 2 * (uint64_t)c->n_kv_heads) * D, HqD = Hq * D, kvd = (uint64_t)c->n_kv_heads * D;
    uint64_t P = R * K, act = gptoss_weights_bf16(o) ? 2 : 4, kv = o->kv_bf16 ? 2 : 4, half = D / 2;
    const gptoss_gpu_kv layers = b->kv; /* the caller's per-layer arrays, or none */
    memset(b, 0, sizeof *b);
    b->kv = layers;
    gptoss_gpu_scratch *s = &b->s;
    gptoss_gpu_trace_buffers *tr = &b->trace;

    for (int t = 0; t < GPTOSS_N_TENSORS; t++)
        b->w.w[t] = place(b, base, gptoss_gpu_weight_format(o, t), gptoss_gpu_tensor_bytes(m, o, t), 1, 1, 1);
    for (int l = 0; l < c->n_layers; l++) {
        int positions = gptoss_kv_positions(c, l, o->ctx, o->chunk);
        void *k = place(b, base, GPTOSS_GPU_KV, (uint64_t)o->slots, (uint64_t)positions, kvd, kv);
        void *v = place(b, base, GPTOSS_GPU_KV, (uint64_t)o->slots, (uint64_t)positions, kvd, kv);
        if (layers.k) {
            layers.k[l] = k;
            layers.v[l] = v;
            layers.positions[l] = positions;
        }
    }
    b->kv.layers = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)c->n_layers, sizeof(gptoss_kv_layer), 1, 1);
    /* the step scratch from x to the upload also stages a file's weights on
     * their way to bf16 (gpu_weights.hip): keep it one run */
    b->w.cos = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)o->ctx, half, 4, 1);
    b->w.sin = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)o->ctx, half, 4, 1);
    s->x = place(b, base, GPTOSS_GPU_SCRATCH, R, H, 4, 1);
    s->t = place(b, base, GPTOSS_GPU_SCRATCH, R, H, 4, 1);
    s->qkv = place(b, base, GPTOSS_GPU_SCRATCH, R, Q, 4, 1);
    s->q = place(b, base, GPTOSS_GPU_SCRATCH, R, HqD, 4, 1);
    s->attn = place(b, base, GPTOSS_GPU_SCRATCH, R, HqD, 4, 1);
    if (gptoss_weights_bf16(o)) {
        s->t_in = place(b, base, GPTOSS_GPU_SCRATCH, R, H, 2, 1);
        s->attn_in = place(b, base, GPTOSS_GPU_SCRATCH, R, HqD, 2, 1);
        /* the dense GEMMs' rows, or the experts' pairs, widths rounded up to 32 */
        const uint64_t dense = gptoss_checked_mul(R, ((H > HqD ? H : HqD) + 31) / 32 * 32, &b->overflow);
        const uint64_t pairs = gptoss_checked_mul(P, ((H > I ? H : I) + 31) / 32 * 32, &b->overflow);
        s->x_perm = place(b, base, GPTOSS_GPU_SCRATCH, dense > pairs ? dense : pairs, 2, 1, 1);
    } else { /* the GEMMs read the fp32 buffers themselves */
        s->t_in = s->t;
        s->attn_in = s->attn;
    }
    s->router_logits = place(b, base, GPTOSS_GPU_SCRATCH, R, E, 4, 1);
    s->topk_w = place(b, base, GPTOSS_GPU_SCRATCH, R, K, 4, 1);
    s->topk_i = place(b, base, GPTOSS_GPU_SCRATCH, R, K, 4, 1);
    s->pair_row = place(b, base, GPTOSS_GPU_SCRATCH, P, 4, 1, 1);
    s->pair_of = place(b, base, GPTOSS_GPU_SCRATCH, P, 4, 1, 1);
    uint64_t max_tiles = (uint64_t)gptoss_moe_max_tiles((int64_t)P, 1, E, GPTOSS_MOE_MIN_TILE_ROWS);
    b->overflow |= max_tiles > INT32_MAX;
    b->max_tiles = (int)(max_tiles > INT32_MAX ? INT32_MAX : max_tiles);
    s->tiles = place(b, base, GPTOSS_GPU_SCRATCH, max_tiles, 16, 1, 1);
    s->tile_count = place(b, base, GPTOSS_GPU_SCRATCH, 4, 1, 1, 1);
    s->act = place(b, base, GPTOSS_GPU_SCRATCH, P, I, act, 1);
    s->m2 = place(b, base, GPTOSS_GPU_SCRATCH, P, H, 4, 1);
    s->logits = place(b, base, GPTOSS_GPU_SCRATCH, R, V, 4, 1);
    s->tokens = place(b, base, GPTOSS_GPU_SCRATCH, R, 4, 1, 1);
    b->split_len = split_length(o->ctx);
    uint64_t splits = ((uint64_t)o->ctx + b->split_len - 1) / b->split_len;
    s->part_o = place(b, base, GPTOSS_GPU_SCRATCH, R, HqD, splits, 4);
    s->part_ml = place(b, base, GPTOSS_GPU_SCRATCH, R, Hq, splits, 2 * 4);
    b->sampling_at = (size_t)(R * 3 * 4 + 15) & ~(size_t)15; /* after tokens, slots, positions */
    b->upload_bytes = b->sampling_at + (size_t)R * sizeof(gptoss_row_sampling);
    s->upload = place(b, base, GPTOSS_GPU_SCRATCH, b->upload_bytes, 1, 1, 1);
    s->bias = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)o->slots, GPTOSS_MAX_LOGIT_BIAS,
                    sizeof(gptoss_logit_bias), 1);
    s->drawn.id = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)o->slots, (uint64_t)o->ctx, 4, 1);
    s->drawn.count = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)o->slots, (uint64_t)o->ctx, 4, 1);
    s->drawn.saved = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)o->slots, (uint64_t)o->ctx, 4, 1);
    s->drawn.n = place(b, base, GPTOSS_GPU_SCRATCH, (uint64_t)o->slots, 4, 1, 1);
    s->drawn.cap = o->ctx;
    s->logprobs = place(b, base, GPTOSS_GPU_SCRATCH, R, sizeof(gptoss_row_logprobs), 1, 1);
    s->router_done = place(b, base, GPTOSS_GPU_SCRATCH, R, sizeof(unsigned), 1, 1);
    tr->m1 = place(b, base, GPTOSS_GPU_SCRATCH, K, 2 * I, 4, 1);
    tr->y = place(b, base, GPTOSS_GPU_SCRATCH, K, I, 4, 1);
    tr->proj = place(b, base, GPTOSS_GPU_SCRATCH, H, 4, 1, 1);
    tr->k = place(b, base, GPTOSS_GPU_SCRATCH, kvd, 4, 1, 1);
    tr->agg = place(b, base, GPTOSS_GPU_SCRATCH, H, 4, 1, 1);
    tr->scores = place(b, base, GPTOSS_GPU_SCRATCH, Hq, (uint64_t)o->ctx + 1, 4, 1);
    tr->probs = place(b, base, GPTOSS_GPU_SCRATCH, Hq, (uint64_t)o->ctx + 1, 4, 1);
}

/* The smallest format that loses nothing: of the block formats the
 * experts are exactly in, the fewest bits (MXFP4's 4.25 for a checkpoint);
 * else bf16. */
static int default_weights(gptoss_model *m) {
    int best = GPTOSS_WEIGHTS_BF16;
    for (int w = 0; w < GPTOSS_N_WEIGHT_FORMATS; w++) {
        const gptoss_weight_format *f = gptoss_weight_format_of(w);
        char why[GPTOSS_ERR_LEN];
        if (f->experts && f->bits < gptoss_weight_format_of(best)->bits && !gptoss_model_experts_in(m, w, why))
            best = w;
    }
    return best;
}

gptoss_status gptoss_gpu_resolve(gptoss_model *m, gptoss_engine_opts *o, char *err) {
    if (o->weights == GPTOSS_WEIGHTS_UNSET)
        o->weights = default_weights(m);
    gptoss_status s = gptoss_weights_check(m, o, err);
    if (s)
        return s;
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

gptoss_status gptoss_gpu_plan(const gptoss_model *m, const gptoss_engine_opts *o, gptoss_memory *out,
                              uint64_t *headroom, char *err) {
    gptoss_gpu_buffers b = {0};
    gptoss_gpu_layout(m, o, NULL, &b);
    if (b.overflow)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "%d slots of %d positions with %d rows a step need more than 2^64 bytes", o->slots,
                           o->ctx, o->rows);
    /* weights_<format> for each format, their sum, the KV cache, scratch, all */
    uint64_t weights = 0;
    out->n = 0;
    for (int f = 0; f < GPTOSS_N_WEIGHT_FORMATS; f++, out->n++) {
        snprintf(out->part[out->n].name, sizeof out->part[out->n].name, "weights_%s", gptoss_weight_format_of(f)->name);
        out->part[out->n].bytes = b.bytes[f];
        weights += b.bytes[f];
    }
    const struct {
        const char *name;
        uint64_t bytes;
    } rest[] = {{"weights", weights}, {"kv", b.bytes[GPTOSS_GPU_KV]}, {"scratch", b.bytes[GPTOSS_GPU_SCRATCH]},
                {"total", b.total}};
    for (size_t r = 0; r < sizeof rest / sizeof rest[0]; r++, out->n++) {
        snprintf(out->part[out->n].name, sizeof out->part[out->n].name, "%s", rest[r].name);
        out->part[out->n].bytes = rest[r].bytes;
    }
    *headroom = GPTOSS_GPU_HEADROOM;
    return GPTOSS_OK;
}
