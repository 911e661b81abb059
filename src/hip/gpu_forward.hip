/* The forward pass of one ragged batch on a GPU replica, as the golden
 * computes it (src/core/golden.c) but batched: every linear layer is one
 * GEMM over all rows, the MoE runs as grouped GEMMs over the rows sorted by
 * expert, and nothing waits for the device. With a trace (one row) the
 * fused stages run unfused and each stage is read back under the golden's
 * name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_replica.h"

#define RUN(label, call)                                                                           \
    do {                                                                                           \
        if (gptoss_gpu_launch_begin(g, label, err) || gptoss_gpu_launched(g, label, (call), err)) \
            return -1;                                                                             \
    } while (0)

/* Waits for the stream and records count values of a device buffer. */
static int record(gptoss_gpu *g, gptoss_trace *tr, const char *name, int layer, int is_int,
                  int64_t rows, int64_t cols, const void *dev, char *err) {
    size_t bytes = (size_t)(rows ? rows : 1) * (size_t)cols * 4;
    void *host = malloc(bytes ? bytes : 1);
    if (!host) {
        snprintf(err, GPTOSS_ERR_LEN, "trace: out of host memory");
        return -1;
    }
    hipError_t e = hipMemcpyAsync(host, dev, bytes, hipMemcpyDeviceToHost, g->stream);
    if (e == hipSuccess)
        e = hipStreamSynchronize(g->stream);
    if (e != hipSuccess) {
        free(host);
        snprintf(err, GPTOSS_ERR_LEN, "trace: device %d: reading stage %s back (after %s): %s",
                 g->o.device + 1, name, g->last_kernel, hipGetErrorString(e));
        return -1;
    }
    gptoss_trace_add(tr, name, layer, is_int, rows, cols, host);
    free(host);
    return 0;
}

/* The traced row's mlp1, swiglu and mlp2 outputs, [K][width] in top-k rank
 * order as the golden records them (the device holds them in expert order). */
static int record_experts(gptoss_gpu *g, gptoss_trace *tr, int layer, char *err) {
    const gptoss_config *c = &g->c;
    const int K = c->experts_per_token, I = c->intermediate_dim, H = c->hidden_dim;
    static const char *const names[] = {"mlp1", "swiglu", "mlp2"};
    const float *bufs[] = {g->m1, g->y_trace, g->m2};
    const int widths[] = {2 * I, I, H};
    int pair_of[64]; /* K <= 32: gptoss_router_limits */
    hipError_t e = hipStreamSynchronize(g->stream);
    if (e == hipSuccess)
        e = hipMemcpy(pair_of, g->pair_of, sizeof(int) * (size_t)K, hipMemcpyDeviceToHost);
    for (int s = 0; s < 3 && e == hipSuccess; s++) {
        float *host = (float *)malloc(sizeof(float) * (size_t)K * widths[s]);
        if (!host) {
            snprintf(err, GPTOSS_ERR_LEN, "trace: out of host memory");
            return -1;
        }
        for (int k = 0; k < K && e == hipSuccess; k++)
            e = hipMemcpy(host + (size_t)k * widths[s], bufs[s] + (size_t)pair_of[k] * widths[s],
                          sizeof(float) * (size_t)widths[s], hipMemcpyDeviceToHost);
        if (e == hipSuccess)
            gptoss_trace_add(tr, names[s], layer, 0, K, widths[s], host);
        free(host);
    }
    if (e != hipSuccess) {
        snprintf(err, GPTOSS_ERR_LEN, "trace: device %d: reading the experts' outputs back: %s",
                 g->o.device + 1, hipGetErrorString(e));
        return -1;
    }
    return 0;
}

#define REC(name, layer, is_int, rows, cols, dev)                                                 \
    do {                                                                                           \
        if (trace && record(g, trace, name, layer, is_int, rows, cols, dev, err))                  \
            return -1;                                                                             \
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
    return (span + g->split_len - 1) / g->split_len;
}

int gptoss_gpu_forward(gptoss_gpu *g, const gptoss_batch *b, gptoss_trace *trace, char *err) {
    const gptoss_config *c = &g->c;
    const int R = b->n, H = c->hidden_dim, D = c->head_dim, Hq = c->n_attn_heads;
    const int Hkv = c->n_kv_heads, E = c->n_experts, K = c->experts_per_token;
    const int I = c->intermediate_dim, Q = gptoss_qkv_dim(c), HqD = Hq * D, kvd = Hkv * D;
    const int bf = g->o.weights_bf16, P = R * K;
    const int *d_tokens = (const int *)g->upload_dev;
    const int *d_slots = d_tokens + g->o.rows, *d_positions = d_tokens + 2 * g->o.rows;
    hipStream_t st = g->stream;
    const int splits_full = plan_splits(g, b, 0), splits_window = plan_splits(g, b, c->sliding_window > 0);

    /* tokens_dev still holds the previous step's samples (this step's come last) */
    RUN("embedding", gptoss_launch_embedding(g->w[GPTOSS_T_EMBEDDING], bf, d_tokens, g->tokens_dev,
                                             c->vocab_size, R, H, g->x, st));
    REC("embedding", -1, 0, 0, H, g->x);

    for (int l = 0; l < c->n_layers; l++) {
        int windowed = c->sliding_window > 0 && l % 2 == 0;
        if (l == 0 || trace) /* else the previous layer's MoE combine applied it */
            RUN("rmsnorm", gptoss_launch_rmsnorm(g->x, (const float *)g->w[GPTOSS_T_RMS_ATTN] + (size_t)l * H,
                                                 R, H, g->t, bf ? g->t_in : NULL, st));
        REC("attn_norm", l, 0, 0, H, g->t);

        gptoss_rope_kv_args rk = {};
        rk.qkv = g->qkv;
        rk.cos = g->cos;
        rk.sin = g->sin;
        rk.slots = d_slots;
        rk.positions = d_positions;
        rk.rows = R;
        rk.n_heads = Hq;
        rk.n_kv_heads = Hkv;
        rk.head_dim = D;
        rk.positions_per_slot = g->layer_positions[l];
        rk.q = g->q;
        rk.k_cache = g->k_layer[l];
        rk.v_cache = g->v_layer[l];
        rk.kv_bf16 = g->o.kv_bf16;
        rk.k_trace = trace ? g->k_trace : NULL;

        /* RoPE and the KV write in the GEMM's epilogue where it takes them
         * (traced steps record the projection before them) */
        gptoss_gemm_args qkv = {};
        qkv.x = g->t_in;
        qkv.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_QKV, l);
        qkv.w_tiled = gptoss_gpu_tiled(g, GPTOSS_T_W_QKV);
        qkv.bias = (const float *)g->w[GPTOSS_T_B_QKV] + (size_t)l * Q;
        qkv.rows = R;
        qkv.n = Q;
        qkv.k = H;
        qkv.y = g->qkv;
        qkv.rope = rk;
        qkv.epilogue = !trace && gptoss_gemm_takes_rope(&qkv, bf) ? GPTOSS_GEMM_ROPE_KV : GPTOSS_GEMM_STORE;
        RUN("gemm_qkv", gptoss_launch_gemm(&qkv, bf, 0, &g->dev, st));
        if (qkv.epilogue == GPTOSS_GEMM_STORE) {
            REC("qkv", l, 0, 0, Q, g->qkv);
            RUN("rope_kv", gptoss_launch_rope_kv(&rk, st));
        }
        REC("q_rope", l, 0, 0, HqD, g->q);
        REC("k_rope", l, 0, 0, kvd, g->k_trace);

        gptoss_attention_args at = {};
        at.q = g->q;
        at.k_cache = g->k_layer[l];
        at.v_cache = g->v_layer[l];
        at.slots = d_slots;
        at.positions = d_positions;
        at.sinks = (const float *)g->w[GPTOSS_T_SINKS] + (size_t)l * Hq;
        at.rows = R;
        at.n_heads = Hq;
        at.n_kv_heads = Hkv;
        at.head_dim = D;
        at.positions_per_slot = g->layer_positions[l];
        at.window = windowed ? c->sliding_window : 0;
        at.splits = windowed ? splits_window : splits_full;
        at.split_len = g->split_len;
        at.part_o = g->part_o;
        at.part_ml = g->part_ml;
        at.out = g->attn;
        at.out_bf16 = bf ? g->attn_in : NULL;
        if (trace) {
            RUN("trace_scores", gptoss_launch_trace_scores(&at, g->o.kv_bf16, g->scores, g->probs, st));
            REC("scores", l, 0, Hq, b->positions[0] + 2, g->scores);
            REC("probs", l, 0, Hq, b->positions[0] + 2, g->probs);
        }
        RUN("attention", gptoss_launch_attention(&at, g->o.kv_bf16, !bf, st));
        REC("attn_out", l, 0, 0, HqD, g->attn);

        gptoss_gemm_args o = {};
        o.x = g->attn_in;
        o.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_O, l);
        o.w_tiled = gptoss_gpu_tiled(g, GPTOSS_T_W_O);
        o.bias = (const float *)g->w[GPTOSS_T_B_O] + (size_t)l * H;
        o.rows = R;
        o.n = H;
        o.k = HqD;
        o.epilogue = trace ? GPTOSS_GEMM_STORE : GPTOSS_GEMM_RESIDUAL;
        o.y = trace ? g->proj : g->x;
        RUN("gemm_o", gptoss_launch_gemm(&o, bf, 0, &g->dev, st));
        if (trace) {
            REC("attn_proj", l, 0, 0, H, g->proj);
            RUN("trace_add", gptoss_launch_trace_add(g->x, g->proj, (size_t)H, st));
        }
        REC("resid_attn", l, 0, 0, H, g->x);

        /* MoE block: its RMSNorm runs inside the router */
        gptoss_router_args ro = {};
        ro.x = g->x;
        ro.norm_w = (const float *)g->w[GPTOSS_T_RMS_FFN] + (size_t)l * H;
        ro.normed = g->t;
        ro.normed_bf16 = bf ? g->t_in : NULL;
        ro.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_ROUTER, l);
        ro.bias = (const float *)g->w[GPTOSS_T_B_ROUTER] + (size_t)l * E;
        ro.rows = R;
        ro.hidden = H;
        ro.n_experts = E;
        ro.k = K;
        ro.logits = g->router_logits;
        ro.topk_idx = g->topk_i;
        ro.topk_w = g->topk_w;
        RUN("router", gptoss_launch_router(&ro, bf, st));
        REC("ffn_norm", l, 0, 0, H, g->t);
        REC("router", l, 0, 0, E, g->router_logits);
        REC("topk_idx", l, 1, 0, K, g->topk_i);
        REC("topk_w", l, 0, 0, K, g->topk_w);

        gptoss_gemm_args m1 = {};
        m1.x = g->t_in;
        m1.x_rows = g->pair_row;
        m1.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_MLP1, l);
        m1.w_tiled = gptoss_gpu_tiled(g, GPTOSS_T_W_MLP1);
        m1.bias = (const float *)g->w[GPTOSS_T_B_MLP1] + (size_t)l * E * 2 * I;
        m1.rows = P;
        m1.n = 2 * I;
        m1.k = H;
        m1.rows_hint = (P + E - 1) / E;
        m1.tiles = g->tiles;
        m1.tile_count = g->tile_count;
        m1.epilogue = trace ? GPTOSS_GEMM_STORE : GPTOSS_GEMM_SWIGLU;
        m1.y = g->m1;
        m1.act = g->act;
        m1.swiglu_limit = c->swiglu_limit;
        gptoss_moe_dispatch_args md = {};
        md.topk_idx = g->topk_i;
        md.rows = R;
        md.k = K;
        md.n_experts = E;
        md.tile_rows = gptoss_gemm_tile_rows(&m1, bf);
        md.pair_row = g->pair_row;
        md.pair_of = g->pair_of;
        md.tiles = g->tiles;
        md.tile_count = g->tile_count;
        RUN("moe_dispatch", gptoss_launch_moe_dispatch(&md, st));
        int max_tiles = gptoss_moe_max_tiles(R, K, E, md.tile_rows);
        RUN("gemm_mlp1", gptoss_launch_gemm(&m1, bf, max_tiles, &g->dev, st));
        if (trace)
            RUN("trace_swiglu",
                gptoss_launch_trace_swiglu(g->m1, P, I, c->swiglu_limit, g->y_trace, g->act, bf, st));

        gptoss_gemm_args m2 = m1;
        m2.x = g->act;
        m2.x_rows = NULL;
        m2.w = gptoss_gpu_layer_weight(g, GPTOSS_T_W_MLP2, l);
        m2.w_tiled = gptoss_gpu_tiled(g, GPTOSS_T_W_MLP2);
        m2.bias = (const float *)g->w[GPTOSS_T_B_MLP2] + (size_t)l * E * H;
        m2.n = H;
        m2.k = I;
        m2.epilogue = GPTOSS_GEMM_STORE;
        m2.y = g->m2;
        RUN("gemm_mlp2", gptoss_launch_gemm(&m2, bf, max_tiles, &g->dev, st));
        if (trace && record_experts(g, trace, l, err))
            return -1;
        gptoss_moe_combine_args mc = {};
        mc.expert_out = g->m2;
        mc.pair_of = g->pair_of;
        mc.topk_idx = g->topk_i;
        mc.topk_w = g->topk_w;
        mc.rows = R;
        mc.k = K;
        mc.hidden = H;
        mc.x = g->x;
        mc.agg_trace = trace ? g->agg : NULL;
        if (!trace) { /* the norm that follows: traced steps record the residual before it */
            int last = l + 1 == c->n_layers;
            mc.norm_w = last ? (const float *)g->w[GPTOSS_T_RMS_OUT]
                             : (const float *)g->w[GPTOSS_T_RMS_ATTN] + (size_t)(l + 1) * H;
            mc.norm_out = last ? g->x : g->t;
            mc.norm_out_bf16 = bf ? g->t_in : NULL;
        }
        RUN("moe_combine", gptoss_launch_moe_combine(&mc, st));
        REC("moe_out", l, 0, 0, H, g->agg);
        REC("resid_ffn", l, 0, 0, H, g->x);
    }
    if (trace || c->n_layers == 0) /* else the last MoE combine applied it */
        RUN("rmsnorm", gptoss_launch_rmsnorm(g->x, (const float *)g->w[GPTOSS_T_RMS_OUT], R, H, g->x,
                                             bf ? g->t_in : NULL, st));
    REC("final_norm", -1, 0, 0, H, g->x);
    gptoss_gemm_args un = {};
    un.x = bf ? g->t_in : (const void *)g->x;
    un.w = g->w[GPTOSS_T_OUT];
    un.rows = R;
    un.n = c->vocab_size;
    un.k = H;
    un.epilogue = GPTOSS_GEMM_STORE;
    un.y = g->logits;
    RUN("gemm_logits", gptoss_launch_gemm(&un, bf, 0, &g->dev, st));
    REC("logits", -1, 0, 0, c->vocab_size, g->logits);
    return 0;
}

/* ---- graphs ----------------------------------------------------------------- */

static int replay(gptoss_gpu *g, struct graph_entry *e, char *err) {
    e->used = ++g->graph_clock;
    g->last_kernel = "a captured forward pass";
    hipError_t le = hipGraphLaunch(e->exec, g->stream);
    return le == hipSuccess ? 0 : gptoss_gpu_fail(err, g, "step: launching the captured forward pass", le);
}

int gptoss_gpu_forward_step(gptoss_gpu *g, const gptoss_batch *b, char *err) {
    if (g->profiling || g->sync_launches)
        return gptoss_gpu_forward(g, b, NULL, err);
    /* fp32 mode's exact attention does not split */
    int full = g->o.weights_bf16 ? plan_splits(g, b, 0) : 0;
    int window = g->o.weights_bf16 ? plan_splits(g, b, g->c.sliding_window > 0) : 0;
    struct graph_entry *slot = &g->graphs[0];
    for (int i = 0; i < GPTOSS_GRAPHS; i++) {
        struct graph_entry *e = &g->graphs[i];
        if (e->exec && e->rows == b->n && e->splits_full == full && e->splits_window == window)
            return replay(g, e, err);
        if (!e->exec || (slot->exec && e->used < slot->used))
            slot = e; /* a free entry, else the least recently used */
    }
    if (hipStreamBeginCapture(g->stream, hipStreamCaptureModeThreadLocal) != hipSuccess) {
        (void)hipGetLastError(); /* no capture here: launch kernel by kernel */
        return gptoss_gpu_forward(g, b, NULL, err);
    }
    int rc = gptoss_gpu_forward(g, b, NULL, err);
    hipGraph_t graph = NULL;
    hipError_t e = hipStreamEndCapture(g->stream, &graph);
    if (rc || e != hipSuccess) {
        if (graph)
            (void)hipGraphDestroy(graph);
        (void)hipGetLastError();
        return rc ? -1 : gptoss_gpu_fail(err, g, "step: capturing the forward pass", e);
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
    slot->rows = b->n;
    slot->splits_full = full;
    slot->splits_window = window;
    return replay(g, slot, err);
}

void gptoss_gpu_free_graphs(gptoss_gpu *g) {
    for (int i = 0; i < GPTOSS_GRAPHS; i++) {
        if (g->graphs[i].exec)
            (void)hipGraphExecDestroy(g->graphs[i].exec);
        g->graphs[i].exec = NULL;
    }
}
