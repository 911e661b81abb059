/* The forward pass of one ragged batch on a GPU replica, as the golden
 * computes it (src/core/golden_forward.c) but batched: every linear layer
 * is one GEMM over all rows, the MoE runs as grouped GEMMs over the rows sorted by
 * expert, and nothing waits for the device. With a trace (one row) the
 * fused stages run unfused and each stage is read back under the trace's
 * stage names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_replica.h"

#define RUN(label, call)                                                                           \
    do {                                                                                           \
        gptoss_status s_ = gptoss_gpu_launch_begin(g, label, err);                                 \
        if (s_ || (s_ = gptoss_gpu_launched(g, label, (call), err)))                               \
            return s_;                                                                             \
    } while (0)

/* Waits for the stream and records rows x cols values of a device buffer. */
static gptoss_status record(gptoss_gpu *g, gptoss_trace *tr, gptoss_stage_id id, int layer, int64_t rows,
                            int64_t cols, const void *dev, char *err) {
    size_t bytes = (size_t)(rows ? rows : 1) * (size_t)cols * 4;
    void *host = malloc(bytes ? bytes : 1);
    if (!host)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    hipError_t e = hipMemcpyAsync(host, dev, bytes, hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess) {
        free(host);
        return gptoss_fail(err, GPTOSS_E_DEVICE, "device %d: reading stage %s back (after %s): %s",
                           g->o.device, gptoss_stage_names[id], g->last_kernel, hipGetErrorString(e));
    }
    gptoss_trace_add(tr, id, layer, rows, cols, host);
    free(host);
    return GPTOSS_OK;
}

/* The traced row's mlp1, swiglu and mlp2 outputs, [K][width] in top-k rank
 * order as the golden records them (the device holds them in expert order). */
static gptoss_status record_experts(gptoss_gpu *g, gptoss_trace *tr, int layer, char *err) {
    const gptoss_config *c = &g->c;
    const int K = c->experts_per_token, I = c->intermediate_dim, H = c->hidden_dim;
    static const gptoss_stage_id stages[] = {GPTOSS_STAGE_MLP1, GPTOSS_STAGE_SWIGLU, GPTOSS_STAGE_MLP2};
    const float *bufs[] = {g->buf.trace.m1, g->buf.trace.y, g->buf.s.m2};
    const int widths[] = {2 * I, I, H};
    int pair_of[64]; /* K <= 32: gptoss_router_limits */
    hipError_t e = hipStreamSynchronize(g->stream);
    if (e == hipSuccess)
        e = hipMemcpy(pair_of, g->buf.s.pair_of, sizeof(int) * (size_t)K, hipMemcpyDeviceToHost);
    for (int s = 0; s < 3 && e == hipSuccess; s++) {
        float *host = (float *)malloc(sizeof(float) * (size_t)K * widths[s]);
        if (!host)
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
        for (int k = 0; k < K && e == hipSuccess; k++)
            e = hipMemcpy(host + (size_t)k * widths[s], bufs[s] + (size_t)pair_of[k] * widths[s],
                          sizeof(float) * (size_t)widths[s], hipMemcpyDeviceToHost);
        if (e == hipSuccess)
            gptoss_trace_add(tr, stages[s], layer, K, widths[s], host);
        free(host);
    }
    if (e != hipSuccess)
        return gptoss_fail(err, GPTOSS_E_DEVICE, "device %d: reading the experts' outputs back: %s",
                           g->o.device, hipGetErrorString(e));
    return GPTOSS_OK;
}

#define REC(stage, layer, rows, cols, dev)                                                         \
    do {                                                                                           \
        gptoss_status s_;                                                                          \
        if (trace && (s_ = record(g, trace, GPTOSS_STAGE_##stage, layer, rows, cols, dev, err)))   \
            return s_;                                                                             \
    } while (0)

/* Splits of the visible keys for attention. Their length depends on the
 * replica's ctx only, never on the batch, so a row's attention is computed
 * the same way whatever else is in the step (batch invariance). */
static int plan_splits(const gptoss_gpu *g, const gptoss_batch *b, int windowed) {
    int span = 0;
    for (int r = 0; r < b->n; r++)
        span = b->positions[r] + 1 > span ? b->positions[r] + 1 : span;
    if (windowed && span > g->c.sliding_window)
        span = g->c.sliding_window;
    return (span + g->buf.split_len - 1) / g->buf.split_len;
}

/* What every block of one forward pass reads: the batch on the device, its
 * attention splits, the trace when one row is traced, and how its kernels
 * are launched (programmatic launches only into a captured graph: launched
 * one by one, as while profiling, each kernel runs alone). */
typedef struct {
    const gptoss_batch *b;
    int rows;                              /* launched: b->n, or more for a graph's bucket (padded_rows) */
    const int *tokens, *slots, *positions; /* the upload, on the device */
    int splits_full, splits_window;
    gptoss_trace *trace;
    gptoss_gpu_shape dev;
} pass;

static gptoss_status embed(gptoss_gpu *g, const pass *p, char *err) {
    const gptoss_config *c = &g->c;
    gptoss_trace *trace = p->trace;
    /* s.tokens still holds the previous step's draws (this step's come last) */
    RUN("embedding", gptoss_launch_embedding(g->buf.w.w[GPTOSS_T_EMBEDDING], gptoss_weights_bf16(&g->o), p->tokens,
                                             g->buf.s.tokens, c->vocab_size, p->rows, c->hidden_dim,
                                             g->buf.s.x, &p->dev, g->stream));
    REC(EMBEDDING, -1, 0, c->hidden_dim, g->buf.s.x);
    return GPTOSS_OK;
}

/* RoPE's and the KV write's arguments for layer l (the qkv GEMM's epilogue
 * takes them where it can, else rope_kv.hip) */
static gptoss_rope_kv_args rope_args(const gptoss_gpu *g, const pass *p, int l) {
    const gptoss_config *c = &g->c;
    gptoss_rope_kv_args rk = {};
    rk.qkv = g->buf.s.qkv;
    rk.cos = g->buf.w.cos;
    rk.sin = g->buf.w.sin;
    rk.slots = p->slots;
    rk.positions = p->positions;
    rk.rows = p->rows;
    rk.n_heads = c->n_attn_heads;
    rk.n_kv_heads = c->n_kv_heads;
    rk.head_dim = c->head_dim;
    rk.positions_per_slot = g->buf.kv.positions[l];
    rk.q = g->buf.s.q;
    rk.k_cache = g->buf.kv.k[l];
    rk.v_cache = g->buf.kv.v[l];
    rk.kv_bf16 = g->o.kv_bf16;
    rk.k_trace = p->trace ? g->buf.trace.k : NULL;
    return rk;
}

/* Layer l's attention block: norm (unless the last MoE combine applied it),
 * qkv with RoPE and the KV write, attention, o projection into the
 * residual stream. */
static gptoss_status attention_block(gptoss_gpu *g, const pass *p, int l, char *err) {
    const gptoss_config *c = &g->c;
    const gptoss_gpu_scratch *s = &g->buf.s;
    gptoss_trace *trace = p->trace;
    const int R = p->rows, H = c->hidden_dim, Hq = c->n_attn_heads, D = c->head_dim;
    const int HqD = Hq * D, Q = gptoss_qkv_dim(c), bf = gptoss_weights_bf16(&g->o);
    const int windowed = gptoss_layer_windowed(c, l);
    hipStream_t st = g->stream;
    if (l == 0 || trace)
        RUN("rmsnorm", gptoss_launch_rmsnorm(s->x, (const float *)g->buf.w.w[GPTOSS_T_RMS_ATTN] + (size_t)l * H,
                                             R, H, s->t, bf ? s->t_in : NULL, &p->dev, st));
    REC(ATTN_NORM, l, 0, H, s->t);

    /* traced steps record the projection before RoPE */
    gptoss_rope_kv_args rk = rope_args(g, p, l);
    gptoss_gemm_args qkv = {};
    qkv.x = s->t_in;
    qkv.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_QKV, l);
    qkv.w_layout = gptoss_gpu_weight_layout(c, &g->o, GPTOSS_T_W_QKV);
    qkv.bias = (const float *)g->buf.w.w[GPTOSS_T_B_QKV] + (size_t)l * Q;
    qkv.rows = R;
    qkv.n = Q;
    qkv.k = H;
    qkv.y = s->qkv;
    qkv.x_perm = s->x_perm;
    qkv.rope = rk;
    qkv.epilogue = !trace && gptoss_gemm_takes_rope(&qkv) ? GPTOSS_GEMM_ROPE_KV : GPTOSS_GEMM_STORE;
    RUN("gemm_qkv", gptoss_launch_gemm(&qkv, 0, &p->dev, st));
    if (qkv.epilogue == GPTOSS_GEMM_STORE) {
        REC(QKV, l, 0, Q, s->qkv);
        RUN("rope_kv", gptoss_launch_rope_kv(&rk, &p->dev, st));
    }
    REC(Q_ROPE, l, 0, HqD, s->q);
    REC(K_ROPE, l, 0, gptoss_kv_dim(c), g->buf.trace.k);

    gptoss_attention_args at = {};
    at.q = s->q;
    at.k_cache = g->buf.kv.k[l];
    at.v_cache = g->buf.kv.v[l];
    at.slots = p->slots;
    at.positions = p->positions;
    at.sinks = (const float *)g->buf.w.w[GPTOSS_T_SINKS] + (size_t)l * Hq;
    at.rows = R;
    at.n_heads = Hq;
    at.n_kv_heads = c->n_kv_heads;
    at.head_dim = D;
    at.positions_per_slot = g->buf.kv.positions[l];
    at.window = windowed ? c->sliding_window : 0;
    at.splits = windowed ? p->splits_window : p->splits_full;
    at.split_len = g->buf.split_len;
    at.part_o = s->part_o;
    at.part_ml = s->part_ml;
    at.out = s->attn;
    at.out_bf16 = bf ? s->attn_in : NULL;
    if (trace) {
        const gptoss_gpu_trace_buffers *tb = &g->buf.trace;
        RUN("trace_scores", gptoss_launch_trace_scores(&at, g->o.kv_bf16, tb->scores, tb->probs, st));
        REC(SCORES, l, Hq, p->b->positions[0] + 2, tb->scores);
        REC(PROBS, l, Hq, p->b->positions[0] + 2, tb->probs);
    }
    RUN("attention", gptoss_launch_attention(&at, g->o.kv_bf16, !bf, &p->dev, st));
    REC(ATTN_OUT, l, 0, HqD, s->attn);

    gptoss_gemm_args o = {};
    o.x = s->attn_in;
    o.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_O, l);
    o.w_layout = gptoss_gpu_weight_layout(c, &g->o, GPTOSS_T_W_O);
    o.bias = (const float *)g->buf.w.w[GPTOSS_T_B_O] + (size_t)l * H;
    o.rows = R;
    o.n = H;
    o.k = HqD;
    o.epilogue = trace ? GPTOSS_GEMM_STORE : GPTOSS_GEMM_RESIDUAL;
    o.y = trace ? g->buf.trace.proj : s->x;
    o.x_perm = s->x_perm;
    RUN("gemm_o", gptoss_launch_gemm(&o, 0, &p->dev, st));
    if (trace) {
        REC(ATTN_PROJ, l, 0, H, g->buf.trace.proj);
        RUN("trace_add", gptoss_launch_trace_add(s->x, g->buf.trace.proj, (size_t)H, st));
    }
    REC(RESID_ATTN, l, 0, H, s->x);
    return GPTOSS_OK;
}

/* Layer l's MoE block: norm and router together, the rows sorted by
 * expert, mlp1 with SwiGLU, mlp2, and the weighted combine into the
 * residual stream, which applies the next norm (the next layer's or the
 * final one) unless traced. */
static gptoss_status moe_block(gptoss_gpu *g, const pass *p, int l, char *err) {
    const gptoss_config *c = &g->c;
    const gptoss_gpu_scratch *s = &g->buf.s;
    gptoss_trace *trace = p->trace;
    const int R = p->rows, H = c->hidden_dim, E = c->n_experts, K = c->experts_per_token;
    const int I = c->intermediate_dim, P = R * K, bf = gptoss_weights_bf16(&g->o);
    hipStream_t st = g->stream;

    gptoss_router_args ro = {};
    ro.x = s->x;
    ro.norm_w = (const float *)g->buf.w.w[GPTOSS_T_RMS_FFN] + (size_t)l * H;
    ro.normed = s->t;
    ro.normed_bf16 = bf ? s->t_in : NULL;
    ro.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_ROUTER, l);
    ro.bias = (const float *)g->buf.w.w[GPTOSS_T_B_ROUTER] + (size_t)l * E;
    ro.rows = R;
    ro.hidden = H;
    ro.n_experts = E;
    ro.k = K;
    ro.logits = s->router_logits;
    ro.topk_idx = s->topk_i;
    ro.topk_w = s->topk_w;
    ro.row_done = s->router_done;
    RUN("router", gptoss_launch_router(&ro, bf, &p->dev, st));
    REC(FFN_NORM, l, 0, H, s->t);
    REC(ROUTER, l, 0, E, s->router_logits);
    REC(TOPK_IDX, l, 0, K, s->topk_i);
    REC(TOPK_W, l, 0, K, s->topk_w);

    gptoss_gemm_args m1 = {};
    m1.x = s->t_in;
    m1.x_rows = s->pair_row;
    m1.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_MLP1, l);
    m1.w_layout = gptoss_gpu_weight_layout(c, &g->o, GPTOSS_T_W_MLP1);
    m1.bias = (const float *)g->buf.w.w[GPTOSS_T_B_MLP1] + (size_t)l * E * 2 * I;
    m1.rows = P;
    m1.n = 2 * I;
    m1.k = H;
    m1.tiles = s->tiles;
    m1.tile_count = s->tile_count;
    m1.n_experts = E;
    m1.epilogue = trace ? GPTOSS_GEMM_STORE : GPTOSS_GEMM_SWIGLU;
    m1.y = g->buf.trace.m1;
    m1.act = s->act;
    m1.swiglu_limit = c->swiglu_limit;
    m1.x_perm = s->x_perm;
    gptoss_gemm_args m2 = m1;
    m2.x = s->act;
    m2.x_rows = NULL;
    m2.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_MLP2, l);
    m2.w_layout = gptoss_gpu_weight_layout(c, &g->o, GPTOSS_T_W_MLP2);
    m2.bias = (const float *)g->buf.w.w[GPTOSS_T_B_MLP2] + (size_t)l * E * H;
    m2.n = H;
    m2.k = I;
    m2.epilogue = GPTOSS_GEMM_STORE;
    m2.y = s->m2;
    m1.tile_rows = m2.tile_rows = gptoss_moe_tile_rows(&m1, &m2, (P + E - 1) / E, &p->dev);
    gptoss_moe_dispatch_args md = {};
    md.topk_idx = s->topk_i;
    md.rows = R;
    md.k = K;
    md.n_experts = E;
    md.tile_rows = m1.tile_rows;
    md.pair_row = s->pair_row;
    md.pair_of = s->pair_of;
    md.tiles = s->tiles;
    md.tile_count = s->tile_count;
    RUN("moe_dispatch", gptoss_launch_moe_dispatch(&md, &p->dev, st));
    int max_tiles = (int)gptoss_moe_max_tiles(R, K, E, md.tile_rows);
    RUN("gemm_mlp1", gptoss_launch_gemm(&m1, max_tiles, &p->dev, st));
    if (trace)
        RUN("trace_swiglu", gptoss_launch_trace_swiglu(g->buf.trace.m1, P, I, c->swiglu_limit, g->buf.trace.y,
                                                       s->act, bf, st));
    RUN("gemm_mlp2", gptoss_launch_gemm(&m2, max_tiles, &p->dev, st));
    if (trace) {
        gptoss_status rs = record_experts(g, trace, l, err);
        if (rs)
            return rs;
    }
    gptoss_moe_combine_args mc = {};
    mc.expert_out = s->m2;
    mc.pair_of = s->pair_of;
    mc.topk_idx = s->topk_i;
    mc.topk_w = s->topk_w;
    mc.rows = R;
    mc.k = K;
    mc.hidden = H;
    mc.x = s->x;
    mc.agg_trace = trace ? g->buf.trace.agg : NULL;
    if (!trace) { /* traced steps record the residual before the norm */
        int last = l + 1 == c->n_layers;
        mc.norm_w = last ? (const float *)g->buf.w.w[GPTOSS_T_RMS_OUT]
                         : (const float *)g->buf.w.w[GPTOSS_T_RMS_ATTN] + (size_t)(l + 1) * H;
        mc.norm_out = last ? s->x : s->t;
        mc.norm_out_bf16 = bf ? s->t_in : NULL;
    }
    RUN("moe_combine", gptoss_launch_moe_combine(&mc, &p->dev, st));
    REC(MOE_OUT, l, 0, H, g->buf.trace.agg);
    REC(RESID_FFN, l, 0, H, s->x);
    return GPTOSS_OK;
}

/* The final norm (unless the last MoE combine applied it) and the logits. */
static gptoss_status unembed(gptoss_gpu *g, const pass *p, char *err) {
    const gptoss_config *c = &g->c;
    const gptoss_gpu_scratch *s = &g->buf.s;
    gptoss_trace *trace = p->trace;
    const int R = p->rows, H = c->hidden_dim, bf = gptoss_weights_bf16(&g->o);
    if (trace || c->n_layers == 0)
        RUN("rmsnorm", gptoss_launch_rmsnorm(s->x, (const float *)g->buf.w.w[GPTOSS_T_RMS_OUT], R, H, s->x,
                                             bf ? s->t_in : NULL, &p->dev, g->stream));
    REC(FINAL_NORM, -1, 0, H, s->x);
    gptoss_gemm_args un = {};
    un.x = bf ? s->t_in : (const void *)s->x;
    un.w = g->buf.w.w[GPTOSS_T_OUT];
    un.w_layout = gptoss_gpu_weight_layout(c, &g->o, GPTOSS_T_OUT);
    un.rows = R;
    un.n = c->vocab_size;
    un.k = H;
    un.epilogue = GPTOSS_GEMM_STORE;
    un.y = s->logits;
    un.x_perm = s->x_perm;
    RUN("gemm_logits", gptoss_launch_gemm(&un, 0, &p->dev, g->stream));
    REC(LOGITS, -1, 0, c->vocab_size, s->logits);
    return GPTOSS_OK;
}

/* captured: the kernels go into a graph, with programmatic launches where
 * the replica has them */
static gptoss_status forward(gptoss_gpu *g, const gptoss_batch *b, int rows, gptoss_trace *trace, int captured,
                             char *err) {
    const int *tokens = (const int *)g->buf.s.upload;
    pass p = {b, rows, tokens, tokens + g->o.rows, tokens + 2 * g->o.rows, plan_splits(g, b, 0),
              plan_splits(g, b, g->c.sliding_window > 0), trace, g->dev};
    p.dev.programmatic = captured && g->dev.programmatic;
    gptoss_status s = embed(g, &p, err);
    for (int l = 0; l < g->c.n_layers && !s; l++)
        if (!(s = attention_block(g, &p, l, err)))
            s = moe_block(g, &p, l, err);
    return s ? s : unembed(g, &p, err);
}

gptoss_status gptoss_gpu_forward(gptoss_gpu *g, const gptoss_batch *b, gptoss_trace *trace, char *err) {
    return forward(g, b, b->n, trace, 0, err);
}

/* ---- graphs ----------------------------------------------------------------- */

static gptoss_status replay(gptoss_gpu *g, struct graph_entry *e, char *err) {
    e->used = ++g->graphs.clock;
    g->last_kernel = "a captured forward pass";
    hipError_t le = hipGraphLaunch(e->exec, g->stream);
    return le == hipSuccess ? GPTOSS_OK : gptoss_gpu_fail(err, g, "launching the captured forward pass", le);
}

int gptoss_gpu_padded_rows(const gptoss_gpu *g, int rows) {
    int bucket = 1;
    while (bucket < rows)
        bucket *= 2;
    if (bucket > 64) { /* eighths of the octave */
        const int step = bucket / 16;
        bucket = (rows + step - 1) / step * step;
    }
    return bucket < g->o.rows ? bucket : g->o.rows;
}

gptoss_status gptoss_gpu_forward_step(gptoss_gpu *g, const gptoss_batch *b, int rows, char *err) {
    if (g->prof.on || g->sync_launches)
        return gptoss_gpu_forward(g, b, NULL, err);
    /* fp32 mode's exact attention does not split */
    int full = gptoss_weights_bf16(&g->o) ? plan_splits(g, b, 0) : 0;
    int window = gptoss_weights_bf16(&g->o) ? plan_splits(g, b, g->c.sliding_window > 0) : 0;
    struct graph_entry *slot = &g->graphs.entry[0];
    for (int i = 0; i < GPTOSS_GRAPHS; i++) {
        struct graph_entry *e = &g->graphs.entry[i];
        if (e->exec && e->rows == rows && e->splits_full == full && e->splits_window == window)
            return replay(g, e, err);
        if (!e->exec || (slot->exec && e->used < slot->used))
            slot = e; /* a free entry, else the least recently used */
    }
    if (hipStreamBeginCapture(g->stream, hipStreamCaptureModeThreadLocal) != hipSuccess) {
        (void)hipGetLastError(); /* no capture here: launch kernel by kernel */
        return gptoss_gpu_forward(g, b, NULL, err);
    }
    gptoss_status rc = forward(g, b, rows, NULL, 1, err);
    hipGraph_t graph = NULL;
    hipError_t e = hipStreamEndCapture(g->stream, &graph);
    if (rc || e != hipSuccess) {
        if (graph)
            (void)hipGraphDestroy(graph);
        (void)hipGetLastError();
        return rc ? rc : gptoss_gpu_fail(err, g, "capturing the forward pass", e);
    }
    if (slot->exec) { /* it may still be running for an earlier step */
        (void)hipStreamSynchronize(g->stream);
        (void)hipGraphExecDestroy(slot->exec);
        slot->exec = NULL;
    }
    e = hipGraphInstantiate(&slot->exec, graph, NULL, NULL, 0);
    (void)hipGraphDestroy(graph);
    if (e != hipSuccess) { /* the captured kernels never ran: launch them one by one */
        slot->exec = NULL;
        (void)hipGetLastError();
        return gptoss_gpu_forward(g, b, NULL, err);
    }
    slot->rows = rows;
    slot->splits_full = full;
    slot->splits_window = window;
    return replay(g, slot, err);
}

void gptoss_gpu_free_graphs(gptoss_gpu *g) {
    for (int i = 0; i < GPTOSS_GRAPHS; i++) {
        if (g->graphs.entry[i].exec)
            (void)hipGraphExecDestroy(g->graphs.entry[i].exec);
        g->graphs.entry[i].exec = NULL;
    }
}
