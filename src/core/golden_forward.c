/* A golden replica's forward pass (golden.h says whose arithmetic): the
 * course helpers, attention on the thread pool (the matmul is
 * golden_matmul.c's), and one function per block, as gpu_forward.hip has. */
#include "golden_replica.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "checked.h"
#include "course_math.h"
#include "softmax.h"

/* ---- course helpers, float/double exactly as run.cpp ---------------------- */

static void rmsnorm(float *o, const float *x, const float *w, int n) {
    double ss = 0.0;
    for (int j = 0; j < n; j++)
        ss += x[j] * x[j];
    double scale = gptoss_rms_scale(ss, n);
    for (int j = 0; j < n; j++)
        o[j] = gptoss_rms_apply(w[j], scale, x[j]);
}

/* The activations a GEMM reads: themselves, or a bf16-rounded copy. */
static const float *gemm_input(const gptoss_golden *g, float *scratch, const float *x, size_t count) {
    if (!gptoss_weights_bf16(&g->o))
        return x;
    for (size_t i = 0; i < count; i++)
        scratch[i] = gptoss_bf16_round(x[i]);
    return scratch;
}

/* ---- attention: one task per (row, query head) --------------------------- */

typedef struct {
    gptoss_golden *g;
    int layer;
    const gptoss_batch *b;
    const float *q;  /* [rows][Hq*D] after RoPE */
    float *out;      /* [rows][Hq*D] */
    float *att;      /* [rows*Hq][ctx+1] scores, then probabilities */
    const float *sinks;
    float *trace_scores, *trace_probs; /* one-row traces: [Hq][pos+2] each */
} attn_job;

static void attn_task(void *ctx, int task) {
    const attn_job *j = ctx;
    gptoss_golden *g = j->g;
    const gptoss_config *c = &g->c;
    int Hq = c->n_attn_heads, D = c->head_dim;
    int r = task / Hq, h = task % Hq;
    int slot = j->b->slots[r], pos = j->b->positions[r];
    int kvh = h / (Hq / c->n_kv_heads);
    const float *q = j->q + (size_t)r * Hq * D + (size_t)h * D;
    float *att = j->att + (size_t)task * (g->o.ctx + 1);
    /* A windowed layer's row sees keys first..pos only. The masked keys
     * before them are -inf scores whose exponentials add exactly 0 to the
     * softmax's double sum, so it runs over the window and the sink alone:
     * the same bits, in time that does not grow with pos. */
    int first = gptoss_layer_windowed(c, j->layer) && pos >= c->sliding_window ? pos - c->sliding_window + 1 : 0;
    for (int t = first; t <= pos; t++) {
        const float *k = gptoss_golden_kv_at(g, g->kcache, slot, j->layer, t) + (size_t)kvh * D;
        double score = 0.0;
        for (int i = 0; i < D; i++)
            score += q[i] * k[i];
        att[t] = gptoss_attn_score(score, D);
    }
    att[pos + 1] = j->sinks[h];
    if (j->trace_scores || j->trace_probs) { /* a trace shows every key: the masked ones -inf, then probability 0 */
        for (int t = 0; t < first; t++)
            att[t] = -INFINITY;
        if (j->trace_scores)
            memcpy(j->trace_scores + (size_t)h * (pos + 2), att, sizeof(float) * (size_t)(pos + 2));
        memset(att, 0, sizeof(float) * (size_t)first);
    }
    gptoss_course_softmax(att + first, pos + 2 - first);
    if (j->trace_probs)
        memcpy(j->trace_probs + (size_t)h * (pos + 2), att, sizeof(float) * (size_t)(pos + 2));
    float *o = j->out + (size_t)r * Hq * D + (size_t)h * D;
    memset(o, 0, sizeof(float) * (size_t)D);
    for (int t = first; t <= pos; t++) {
        const float *v = gptoss_golden_kv_at(g, g->vcache, slot, j->layer, t) + (size_t)kvh * D;
        float a = att[t];
        for (int i = 0; i < D; i++)
            o[i] += a * v[i];
    }
}

typedef struct {
    float *x, *t, *tin, *qkv, *q, *attn, *att, *proj, *router, *agg, *cos_v, *sin_v;
    float *gathered, *m1, *y, *yin, *m2, *topk_w, *member_w;
    int *topk_i, *members, *member_k;
    /* one-row traces only */
    float *trace_scores, *trace_probs, *trace_m1, *trace_y, *trace_m2;
} scratch;

/* All of a step's buffers in one allocation, sized for R rows; NULL when
 * memory is short or the sizes pass SIZE_MAX. */
static char *scratch_alloc(scratch *s, const gptoss_config *c, uint64_t R, int ctx, int pos_traced) {
    uint64_t H = c->hidden_dim, Q = gptoss_qkv_dim(c), HqD = (uint64_t)c->n_attn_heads * c->head_dim;
    uint64_t E = c->n_experts, K = c->experts_per_token, I = c->intermediate_dim, half = c->head_dim / 2;
    uint64_t wide = H > HqD ? H : HqD; /* every GEMM input: H, Hq*D (the I of mlp2 has yin) */
    uint64_t tr = pos_traced >= 0 ? 1 : 0;
    int overflow = 0;
#define MUL(a, b) gptoss_checked_mul(a, b, &overflow)
    uint64_t att = MUL(c->n_attn_heads, (uint64_t)ctx + 1), tr_att = MUL(tr * c->n_attn_heads, (uint64_t)pos_traced + 2);
    struct { void *field; uint64_t count; } parts[] = {
        {&s->x, MUL(R, H)}, {&s->t, MUL(R, H)}, {&s->tin, MUL(R, wide)}, {&s->qkv, MUL(R, Q)},
        {&s->q, MUL(R, HqD)}, {&s->attn, MUL(R, HqD)}, {&s->att, MUL(R, att)}, {&s->proj, MUL(R, H)},
        {&s->router, MUL(R, E)}, {&s->agg, MUL(R, H)}, {&s->cos_v, MUL(R, half)}, {&s->sin_v, MUL(R, half)},
        {&s->gathered, MUL(R, H)}, {&s->m1, MUL(R, 2 * I)}, {&s->y, MUL(R, I)}, {&s->yin, MUL(R, I)},
        {&s->m2, MUL(R, H)}, {&s->topk_w, MUL(R, K)}, {&s->member_w, R}, {&s->topk_i, MUL(R, K)},
        {&s->members, R}, {&s->member_k, R}, {&s->trace_scores, tr_att}, {&s->trace_probs, tr_att},
        {&s->trace_m1, MUL(tr * K, 2 * I)}, {&s->trace_y, MUL(tr * K, I)}, {&s->trace_m2, MUL(tr * K, H)},
    };
    const size_t n_parts = sizeof parts / sizeof parts[0];
    uint64_t total = 0;
    for (size_t i = 0; i < n_parts; i++) /* float and int are both 4 bytes; each part 64-byte aligned */
        total = gptoss_checked_add(total, gptoss_checked_add(MUL(parts[i].count, 4), 63, &overflow) & ~63ull,
                                   &overflow);
#undef MUL
    char *base = overflow || total > SIZE_MAX ? NULL : calloc(1, (size_t)total), *cur = base;
    if (!base)
        return NULL;
    for (size_t i = 0; i < n_parts; i++) {
        *(void **)parts[i].field = parts[i].count ? cur : NULL;
        cur += (parts[i].count * 4 + 63) & ~(uint64_t)63;
    }
    return base;
}

/* mlp1's gate (even) and up (odd) outputs through SwiGLU */
static void swiglu(float *y, const float *m1, int rows, int I, float limit) {
    for (int j = 0; j < rows; j++)
        for (int i = 0; i < I; i++)
            y[(size_t)j * I + i] = gptoss_swiglu(m1[(size_t)j * 2 * I + 2 * i],
                                                 m1[(size_t)j * 2 * I + 2 * i + 1], limit);
}

/* Weight matrix `tensor` of the held weights from element first. */
static gptoss_golden_matrix matrix(const gptoss_golden *g, int tensor, uint64_t first) {
    return (gptoss_golden_matrix){&g->w->matrix[tensor], first};
}

/* A linear layer: the matmul, then the bias added to each row's outputs. */
static void linear(gptoss_golden *g, float *y, const float *x, int rows, gptoss_golden_matrix w, const float *bias,
                   int n, int d) {
    gptoss_golden_matmul(g, y, x, rows, w, n, d);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < d; i++)
            y[(size_t)r * d + i] += bias[i];
}

/* ---- the forward pass, a function per block ---------------------------------- */

/* One forward's state: the replica, the batch, the weights' vectors (norm
 * scales, biases, sinks) in fp32, the step's buffers, the trace (NULL
 * unless tracing one row), and the sizes the blocks share: rows R, then the
 * config's. */
typedef struct {
    gptoss_golden *g;
    const gptoss_batch *b;
    const float *const *W;
    scratch s;
    gptoss_trace *trace;
    int R, H, Q, D, Hq, HqD, kvd, E, K, I, half;
} pass;

/* Every row of x through rmsnorm with weight w, into out (x itself allowed). */
static void rmsnorm_rows(const pass *p, float *out, const float *x, const float *w) {
    for (int r = 0; r < p->R; r++)
        rmsnorm(out + (size_t)r * p->H, x + (size_t)r * p->H, w, p->H);
}

static void record(const pass *p, gptoss_stage_id stage, int layer, int64_t rows, int64_t cols,
                   const void *src) {
    if (p->trace)
        gptoss_trace_add(p->trace, stage, layer, rows, cols, src);
}

/* Each row's token embedding, and its position's RoPE angles for every layer. */
static void embed(pass *p) {
    const scratch *s = &p->s;
    const int H = p->H, half = p->half;
    for (int r = 0; r < p->R; r++) {
        (gptoss_weights_bf16(&p->g->o) ? gptoss_source_read_bf16 : gptoss_source_read)(
            &p->g->w->matrix[GPTOSS_T_EMBEDDING], (uint64_t)p->b->tokens[r] * (uint64_t)H, (uint64_t)H,
            s->x + (size_t)r * H);
        gptoss_rope_cos_sin(&p->g->rope, p->b->positions[r], s->cos_v + (size_t)r * half,
                            s->sin_v + (size_t)r * half);
    }
    record(p, GPTOSS_STAGE_EMBEDDING, -1, 0, H, s->x);
}

/* Each row's q, k and v out of the qkv projection, q and k rotated, k and v
 * into the cache at the row's slot and position. */
static void rope_into_cache(pass *p, int l) {
    gptoss_golden *g = p->g;
    const scratch *s = &p->s;
    const int Q = p->Q, D = p->D, Hq = p->Hq, HqD = p->HqD, kvd = p->kvd, half = p->half;
    for (int r = 0; r < p->R; r++) {
        float *row = s->qkv + (size_t)r * Q;
        float *q = s->q + (size_t)r * HqD;
        int slot = p->b->slots[r], pos = p->b->positions[r];
        float *k = gptoss_golden_kv_at(g, g->kcache, slot, l, pos);
        float *v = gptoss_golden_kv_at(g, g->vcache, slot, l, pos);
        memcpy(q, row, sizeof(float) * HqD);
        memcpy(k, row + HqD, sizeof(float) * kvd);
        memcpy(v, row + HqD + kvd, sizeof(float) * kvd);
        const float *cs = s->cos_v + (size_t)r * half, *sn = s->sin_v + (size_t)r * half;
        gptoss_rope_apply(q, cs, sn, Hq, D);
        gptoss_rope_apply(k, cs, sn, g->c.n_kv_heads, D);
        record(p, GPTOSS_STAGE_Q_ROPE, l, 0, HqD, q);
        record(p, GPTOSS_STAGE_K_ROPE, l, 0, kvd, k);
        if (g->o.kv_bf16)
            for (int i = 0; i < kvd; i++) {
                k[i] = gptoss_bf16_round(k[i]);
                v[i] = gptoss_bf16_round(v[i]);
            }
    }
}

/* Layer l's attention block: norm, qkv, RoPE and the cache, attention,
 * the output projection, and the residual added into x. */
static void attention_block(pass *p, int l) {
    gptoss_golden *g = p->g;
    const scratch *s = &p->s;
    const float *const *W = p->W;
    const int R = p->R, H = p->H, Q = p->Q, Hq = p->Hq, HqD = p->HqD;
    rmsnorm_rows(p, s->t, s->x, W[GPTOSS_T_RMS_ATTN] + (size_t)l * H);
    record(p, GPTOSS_STAGE_ATTN_NORM, l, 0, H, s->t);
    linear(g, s->qkv, gemm_input(g, s->tin, s->t, (size_t)R * H), R, matrix(g, GPTOSS_T_W_QKV, (uint64_t)l * Q * H),
           W[GPTOSS_T_B_QKV] + (size_t)l * Q, H, Q);
    record(p, GPTOSS_STAGE_QKV, l, 0, Q, s->qkv);
    rope_into_cache(p, l);
    attn_job aj = {g, l, p->b, s->q, s->attn, s->att, W[GPTOSS_T_SINKS] + (size_t)l * Hq, NULL, NULL};
    if (p->trace) {
        aj.trace_scores = s->trace_scores;
        aj.trace_probs = s->trace_probs;
    }
    gptoss_pool_run(g->pool, R * Hq, attn_task, &aj);
    if (p->trace) {
        record(p, GPTOSS_STAGE_SCORES, l, Hq, p->b->positions[0] + 2, s->trace_scores);
        record(p, GPTOSS_STAGE_PROBS, l, Hq, p->b->positions[0] + 2, s->trace_probs);
    }
    record(p, GPTOSS_STAGE_ATTN_OUT, l, 0, HqD, s->attn);
    linear(g, s->proj, gemm_input(g, s->tin, s->attn, (size_t)R * HqD), R,
           matrix(g, GPTOSS_T_W_O, (uint64_t)l * H * HqD), W[GPTOSS_T_B_O] + (size_t)l * H, HqD, H);
    record(p, GPTOSS_STAGE_ATTN_PROJ, l, 0, H, s->proj);
    for (size_t i = 0; i < (size_t)R * H; i++)
        s->x[i] += s->proj[i];
    record(p, GPTOSS_STAGE_RESID_ATTN, l, 0, H, s->x);
}

/* Expert e of layer l over the rows routed to it (their normed inputs tin):
 * mlp1, SwiGLU and mlp2, each output added into the row's agg times its
 * routing weight; each row still sums its experts in ascending id. */
static void run_expert(pass *p, int l, int e, const float *tin) {
    gptoss_golden *g = p->g;
    const scratch *s = &p->s;
    const int H = p->H, K = p->K, I = p->I;
    int n = 0;
    for (int r = 0; r < p->R; r++)
        for (int k = 0; k < K; k++)
            if (s->topk_i[(size_t)r * K + k] == e) {
                s->members[n] = r;
                s->member_w[n] = s->topk_w[(size_t)r * K + k];
                s->member_k[n] = k;
                memcpy(s->gathered + (size_t)n * H, tin + (size_t)r * H, sizeof(float) * H);
                n++;
            }
    if (n == 0)
        return;
    size_t le = (size_t)l * p->E + e;
    linear(g, s->m1, s->gathered, n, matrix(g, GPTOSS_T_W_MLP1, le * 2 * I * H), p->W[GPTOSS_T_B_MLP1] + le * 2 * I,
           H, 2 * I);
    swiglu(s->y, s->m1, n, I, g->c.swiglu_limit);
    linear(g, s->m2, gemm_input(g, s->yin, s->y, (size_t)n * I), n, matrix(g, GPTOSS_T_W_MLP2, le * H * I),
           p->W[GPTOSS_T_B_MLP2] + le * H, I, H);
    for (int j = 0; j < n; j++) {
        float *agg = s->agg + (size_t)s->members[j] * H;
        const float *m2 = s->m2 + (size_t)j * H;
        for (int i = 0; i < H; i++)
            agg[i] += m2[i] * s->member_w[j];
    }
    if (p->trace) { /* one row: j = 0, stored at its top-k rank */
        int k = s->member_k[0];
        memcpy(s->trace_m1 + (size_t)k * 2 * I, s->m1, sizeof(float) * 2 * I);
        memcpy(s->trace_y + (size_t)k * I, s->y, sizeof(float) * I);
        memcpy(s->trace_m2 + (size_t)k * H, s->m2, sizeof(float) * H);
    }
}

/* Layer l's MoE block: norm, router, top-k and its softmax, the experts,
 * and the residual added into x. */
static void moe_block(pass *p, int l) {
    gptoss_golden *g = p->g;
    const scratch *s = &p->s;
    const float *const *W = p->W;
    const int R = p->R, H = p->H, E = p->E, K = p->K, I = p->I;
    rmsnorm_rows(p, s->t, s->x, W[GPTOSS_T_RMS_FFN] + (size_t)l * H);
    record(p, GPTOSS_STAGE_FFN_NORM, l, 0, H, s->t);
    const float *tin = gemm_input(g, s->tin, s->t, (size_t)R * H);
    linear(g, s->router, tin, R, matrix(g, GPTOSS_T_W_ROUTER, (uint64_t)l * E * H),
           W[GPTOSS_T_B_ROUTER] + (size_t)l * E, H, E);
    record(p, GPTOSS_STAGE_ROUTER, l, 0, E, s->router);
    for (int r = 0; r < R; r++) {
        gptoss_topk(s->router + (size_t)r * E, E, K, s->topk_w + (size_t)r * K, s->topk_i + (size_t)r * K);
        gptoss_course_softmax(s->topk_w + (size_t)r * K, K);
    }
    record(p, GPTOSS_STAGE_TOPK_IDX, l, 0, K, s->topk_i);
    record(p, GPTOSS_STAGE_TOPK_W, l, 0, K, s->topk_w);
    memset(s->agg, 0, sizeof(float) * (size_t)R * H);
    for (int e = 0; e < E; e++)
        run_expert(p, l, e, tin);
    record(p, GPTOSS_STAGE_MLP1, l, K, 2 * I, s->trace_m1);
    record(p, GPTOSS_STAGE_SWIGLU, l, K, I, s->trace_y);
    record(p, GPTOSS_STAGE_MLP2, l, K, H, s->trace_m2);
    record(p, GPTOSS_STAGE_MOE_OUT, l, 0, H, s->agg);
    for (size_t i = 0; i < (size_t)R * H; i++)
        s->x[i] += s->agg[i];
    record(p, GPTOSS_STAGE_RESID_FFN, l, 0, H, s->x);
}

/* The final norm and the logits of the n rows listed (NULL: every row), the
 * normed rows gathered into t. */
static void unembed(pass *p, const int *rows, int n, float *logits) {
    const scratch *s = &p->s;
    const int H = p->H, V = p->g->c.vocab_size;
    for (int k = 0; k < n; k++) {
        const float *x = s->x + (size_t)(rows ? rows[k] : k) * H;
        rmsnorm(s->t + (size_t)k * H, x, p->W[GPTOSS_T_RMS_OUT], H);
    }
    record(p, GPTOSS_STAGE_FINAL_NORM, -1, 0, H, s->t);
    if (n > 0)
        gptoss_golden_matmul(p->g, logits, gemm_input(p->g, s->tin, s->t, (size_t)n * H), n,
                             matrix(p->g, GPTOSS_T_OUT, 0), H, V);
    record(p, GPTOSS_STAGE_LOGITS, -1, 0, V, logits);
}

gptoss_status gptoss_golden_forward(gptoss_golden *g, const gptoss_batch *b, const int *rows, int n, float *logits,
                                    gptoss_trace *trace, char *err) {
    const gptoss_config *c = &g->c;
    gptoss_status st = gptoss_batch_check(b, g->o.slots, g->o.ctx, c->vocab_size, g->length, err);
    if (st)
        return st;
    pass p = {.g = g, .b = b, .W = g->w->vector, .trace = trace, .R = b->n,
              .H = c->hidden_dim, .Q = gptoss_qkv_dim(c), .D = c->head_dim, .Hq = c->n_attn_heads,
              .HqD = c->n_attn_heads * c->head_dim, .kvd = gptoss_kv_dim(c), .E = c->n_experts,
              .K = c->experts_per_token, .I = c->intermediate_dim, .half = c->head_dim / 2};
    char *mem = scratch_alloc(&p.s, c, (uint64_t)p.R, g->o.ctx, trace ? b->positions[0] : -1);
    if (!mem)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for %d rows", p.R);
    gptoss_batch_commit(b, g->length);
    embed(&p);
    for (int l = 0; l < c->n_layers; l++) {
        attention_block(&p, l);
        moe_block(&p, l);
    }
    unembed(&p, rows, rows ? n : p.R, logits);
    free(mem);
    return GPTOSS_OK;
}
