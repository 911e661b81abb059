#include "golden.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "checked.h"
#include "course_math.h"
#include "pool.h"
#include "rope.h"
#include "softmax.h"

typedef struct {
    gptoss_model *m;
    gptoss_config c;
    gptoss_engine_opts o;
    gptoss_rope rope;
    gptoss_pool *pool;
    float *kcache, *vcache; /* [slot][layer][ctx][kv_dim] */
    int *length;            /* positions held per slot */
    float *wround;          /* bf16 mode: per task, 4 rounded weight rows */
    size_t wround_row;      /* floats per weight row in wround (the widest input) */
    gptoss_sampler *sampler; /* buffers for drawing sampled rows, made on the first */
} gptoss_golden;

/* ---- course helpers, float/double exactly as run.cpp ---------------------- */

static void rmsnorm(float *o, const float *x, const float *w, int n) {
    double ss = 0.0;
    for (int j = 0; j < n; j++)
        ss += x[j] * x[j];
    double scale = gptoss_rms_scale(ss, n);
    for (int j = 0; j < n; j++)
        o[j] = gptoss_rms_apply(w[j], scale, x[j]);
}

/* ---- batched matmul: Y[r][o] = sum_i W[o][i] * X[r][i] ----------------------
 * Each (r, o) is one double accumulator fed float products in ascending i,
 * as run.cpp's matmul. Four output rows run side by side for instruction
 * parallelism; tasks split the output rows, never a sum. */

enum { MM_TASKS_PER_THREAD = 4 };

typedef struct {
    const float *w;
    int n, d;
    const float *x;
    int rows;
    float *y;
    float *wround; /* NULL in fp32 mode */
    size_t wround_row;
    int per_task; /* output rows per task, a multiple of 4 */
} mm_job;

static void mm_task(void *ctx, int task) {
    const mm_job *j = ctx;
    int o0 = task * j->per_task, o1 = o0 + j->per_task;
    if (o1 > j->d)
        o1 = j->d;
    size_t n = (size_t)j->n;
    float *rounded = j->wround ? j->wround + (size_t)task * 4 * j->wround_row : NULL;
    for (int o = o0; o < o1; o += 4) {
        int k = o1 - o < 4 ? o1 - o : 4;
        const float *wr[4]; /* a tail block repeats row o in its unused lanes */
        for (int q = 0; q < 4; q++) {
            int lane = q < k ? q : 0;
            const float *src = j->w + (size_t)(o + lane) * n;
            if (rounded) {
                if (q < k)
                    for (size_t i = 0; i < n; i++)
                        rounded[q * n + i] = gptoss_bf16_round(src[i]);
                src = rounded + lane * n;
            }
            wr[q] = src;
        }
        for (int r = 0; r < j->rows; r++) {
            const float *x = j->x + (size_t)r * n;
            double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
            for (size_t i = 0; i < n; i++) {
                float xv = x[i];
                a0 += wr[0][i] * xv;
                a1 += wr[1][i] * xv;
                a2 += wr[2][i] * xv;
                a3 += wr[3][i] * xv;
            }
            float *y = j->y + (size_t)r * j->d + o;
            const double acc[4] = {a0, a1, a2, a3};
            for (int q = 0; q < k; q++)
                y[q] = (float)acc[q];
        }
    }
}

/* x must already be bf16-rounded in bf16 mode (see gemm_input) */
static void matmul(gptoss_golden *g, float *y, const float *x, int rows, const float *w, int n, int d) {
    int threads = gptoss_pool_threads(g->pool);
    int blocks = (d + 3) / 4;
    int tasks = threads * MM_TASKS_PER_THREAD < blocks ? threads * MM_TASKS_PER_THREAD : blocks;
    mm_job j = {w, n, d, x, rows, y, g->wround, g->wround_row, 0};
    j.per_task = ((blocks + tasks - 1) / tasks) * 4;
    tasks = (d + j.per_task - 1) / j.per_task;
    /* a single thread for tiny products: waking workers costs more */
    if ((double)rows * n * d < 65536.0) {
        j.per_task = ((d + 3) / 4) * 4;
        mm_task(&j, 0);
        return;
    }
    gptoss_pool_run(g->pool, tasks, mm_task, &j);
}

/* The activations a GEMM reads: themselves, or a bf16-rounded copy. */
static const float *gemm_input(const gptoss_golden *g, float *scratch, const float *x, size_t count) {
    if (!gptoss_weights_bf16(&g->o))
        return x;
    for (size_t i = 0; i < count; i++)
        scratch[i] = gptoss_bf16_round(x[i]);
    return scratch;
}

static float weight_value(const gptoss_golden *g, float w) {
    return gptoss_weights_bf16(&g->o) ? gptoss_bf16_round(w) : w;
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

static float *kv_at(const gptoss_golden *g, float *cache, int slot, int layer, int pos) {
    size_t kvd = (size_t)gptoss_kv_dim(&g->c);
    return cache + (((size_t)slot * g->c.n_layers + layer) * g->o.ctx + pos) * kvd;
}

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
    int windowed = gptoss_layer_windowed(c, j->layer);
    for (int t = 0; t <= pos; t++) {
        if (windowed && pos - t >= c->sliding_window) {
            att[t] = -INFINITY;
            continue;
        }
        const float *k = kv_at(g, g->kcache, slot, j->layer, t) + (size_t)kvh * D;
        double score = 0.0;
        for (int i = 0; i < D; i++)
            score += q[i] * k[i];
        att[t] = gptoss_attn_score(score, D);
    }
    att[pos + 1] = j->sinks[h];
    if (j->trace_scores)
        memcpy(j->trace_scores + (size_t)h * (pos + 2), att, sizeof(float) * (size_t)(pos + 2));
    gptoss_course_softmax(att, pos + 2);
    if (j->trace_probs)
        memcpy(j->trace_probs + (size_t)h * (pos + 2), att, sizeof(float) * (size_t)(pos + 2));
    float *o = j->out + (size_t)r * Hq * D + (size_t)h * D;
    memset(o, 0, sizeof(float) * (size_t)D);
    for (int t = 0; t <= pos; t++) {
        if (windowed && pos - t >= c->sliding_window)
            continue;
        const float *v = kv_at(g, g->vcache, slot, j->layer, t) + (size_t)kvh * D;
        float a = att[t];
        for (int i = 0; i < D; i++)
            o[i] += a * v[i];
    }
}

/* ---- lifecycle -------------------------------------------------------------- */

/* the KV cache's bytes; *overflow set when they leave 64 bits */
static uint64_t kv_bytes(const gptoss_config *c, const gptoss_engine_opts *o, int *overflow) {
    uint64_t per_slot = gptoss_checked_mul(2ull * (uint64_t)c->n_layers * sizeof(float),
                                           (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, overflow);
    return gptoss_checked_mul(gptoss_checked_mul((uint64_t)o->slots, (uint64_t)o->ctx, overflow), per_slot,
                              overflow);
}

static gptoss_status golden_resolve(gptoss_model *m, gptoss_engine_opts *o, char *err) {
    if (o->weights == GPTOSS_WEIGHTS_UNSET)
        o->weights = GPTOSS_WEIGHTS_FP32;
    gptoss_status s = gptoss_weights_check(m, o, err); /* mxfp4: the bf16 golden, same values */
    if (s)
        return s;
    if (o->rows || o->chunk)
        return gptoss_fail(err, GPTOSS_E_INVALID, "rows and chunk size a GPU replica's buffers; a CPU "
                                                  "replica takes batches of any size");
    if (o->threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = n > 0 ? (int)n : 1;
    }
    return GPTOSS_OK;
}

/* host bytes: the KV pool is the replica's own; weights are the model's, shared */
static gptoss_status golden_plan(const gptoss_model *m, const gptoss_engine_opts *o, gptoss_memory *out,
                                 uint64_t *headroom, char *err) {
    int overflow = 0;
    uint64_t kv = kv_bytes(&m->config, o, &overflow), w = m->layout.total_bytes - GPTOSS_HEADER_BYTES;
    uint64_t total = gptoss_checked_add(kv, w, &overflow);
    if (overflow)
        return gptoss_fail(err, GPTOSS_E_INVALID,
                           "the KV cache for %d slots of %d positions needs more than 2^64 bytes", o->slots,
                           o->ctx);
    *headroom = 0;
    *out = (gptoss_memory){3, {{"weights", w}, {"kv", kv}, {"total", total}}};
    return GPTOSS_OK;
}

static void golden_destroy(void *ctx) {
    gptoss_golden *g = ctx;
    gptoss_pool_free(g->pool);
    gptoss_rope_free(&g->rope);
    gptoss_sampler_free(g->sampler);
    free(g->kcache);
    free(g->vcache);
    free(g->length);
    free(g->wround);
    free(g);
}

static gptoss_status golden_create(gptoss_model *m, const gptoss_engine_opts *o, const gptoss_progress *progress,
                                   void **out, char *err) {
    gptoss_golden *g = calloc(1, sizeof *g);
    if (!g)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    g->m = m;
    g->c = m->config;
    g->o = *o;
    int overflow = 0; /* the plan refused sizes past 64 bits */
    uint64_t kv = kv_bytes(&g->c, o, &overflow);
    uint64_t avail = gptoss_host_memory_available();
    gptoss_status s = gptoss_rope_init(&g->rope, &g->c, err);
    if (s)
        goto fail;
    if (kv > avail) {
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY,
                        "the KV cache for %d slots of %d positions needs %.2f GiB, %.2f GiB available",
                        o->slots, o->ctx, kv / 1073741824.0, avail / 1073741824.0);
        goto fail;
    }
    g->kcache = malloc((size_t)(kv / 2));
    g->vcache = malloc((size_t)(kv / 2));
    g->length = calloc((size_t)o->slots, sizeof(int));
    g->pool = gptoss_pool_new(g->o.threads);
    if (!g->kcache || !g->vcache || !g->length || !g->pool) {
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "cannot allocate %.2f GiB of KV cache",
                        kv / 1073741824.0);
        goto fail;
    }
    if (gptoss_weights_bf16(&g->o)) {
        const gptoss_config *c = &g->c;
        size_t widest = (size_t)c->hidden_dim;
        if ((size_t)c->n_attn_heads * c->head_dim > widest)
            widest = (size_t)c->n_attn_heads * c->head_dim;
        if ((size_t)c->intermediate_dim > widest)
            widest = (size_t)c->intermediate_dim;
        g->wround_row = widest;
        g->wround = malloc(sizeof(float) * widest * 4 * MM_TASKS_PER_THREAD * (size_t)g->o.threads);
        if (!g->wround) {
            s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
            goto fail;
        }
    }
    if ((s = gptoss_model_weights(m, progress, err)))
        goto fail;
    *out = g;
    return GPTOSS_OK;
fail:
    golden_destroy(g);
    return s;
}

static int golden_length(const void *ctx, int slot) { return ((const gptoss_golden *)ctx)->length[slot]; }
static void golden_reset(void *ctx, int slot) { ((gptoss_golden *)ctx)->length[slot] = 0; }

/* every layer keeps every position, so any prefix can be copied */
static gptoss_status golden_fork(void *ctx, int from, int to, int length, char *err) {
    (void)err;
    gptoss_golden *g = ctx;
    size_t bytes = sizeof(float) * (size_t)length * (size_t)gptoss_kv_dim(&g->c);
    for (int l = 0; l < g->c.n_layers; l++) {
        memcpy(kv_at(g, g->kcache, to, l, 0), kv_at(g, g->kcache, from, l, 0), bytes);
        memcpy(kv_at(g, g->vcache, to, l, 0), kv_at(g, g->vcache, from, l, 0), bytes);
    }
    g->length[to] = length;
    return GPTOSS_OK;
}

/* ---- the step ----------------------------------------------------------------- */

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

static void add_bias(float *y, const float *b, int rows, int n) {
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++)
            y[(size_t)r * n + i] += b[i];
}

/* The batch's logits, every stage recorded into trace when it is given (one
 * row). On error nothing changes. */
static gptoss_status forward(gptoss_golden *g, const gptoss_batch *b, float *logits, gptoss_trace *trace,
                             char *err) {
    const gptoss_config *c = &g->c;
    gptoss_status st = gptoss_batch_check(b, g->o.slots, g->o.ctx, c->vocab_size, g->length, err);
    if (st)
        return st;
    const int R = b->n, H = c->hidden_dim, Q = gptoss_qkv_dim(c), D = c->head_dim;
    const int Hq = c->n_attn_heads, HqD = Hq * D, kvd = gptoss_kv_dim(c);
    const int E = c->n_experts, K = c->experts_per_token, I = c->intermediate_dim, L = c->n_layers;
    const int half = D / 2;
    scratch s;
    char *mem = scratch_alloc(&s, c, (uint64_t)R, g->o.ctx, trace ? b->positions[0] : -1);
    if (!mem)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for %d rows", R);
    gptoss_batch_commit(b, g->length);
    float *const *W = (float *const *)g->m->tensor;
#define REC(stage, layer, rows, cols, src) \
    do { if (trace) gptoss_trace_add(trace, GPTOSS_STAGE_##stage, layer, rows, cols, src); } while (0)

    for (int r = 0; r < R; r++) {
        const float *e = W[GPTOSS_T_EMBEDDING] + (size_t)b->tokens[r] * H;
        for (int i = 0; i < H; i++)
            s.x[(size_t)r * H + i] = weight_value(g, e[i]);
        gptoss_rope_cos_sin(&g->rope, b->positions[r], s.cos_v + (size_t)r * half,
                            s.sin_v + (size_t)r * half);
    }
    REC(EMBEDDING, -1, 0, H, s.x);

    for (int l = 0; l < L; l++) {
        /* attention block */
        for (int r = 0; r < R; r++)
            rmsnorm(s.t + (size_t)r * H, s.x + (size_t)r * H, W[GPTOSS_T_RMS_ATTN] + (size_t)l * H, H);
        REC(ATTN_NORM, l, 0, H, s.t);
        matmul(g, s.qkv, gemm_input(g, s.tin, s.t, (size_t)R * H), R,
               W[GPTOSS_T_W_QKV] + (size_t)l * Q * H, H, Q);
        add_bias(s.qkv, W[GPTOSS_T_B_QKV] + (size_t)l * Q, R, Q);
        REC(QKV, l, 0, Q, s.qkv);
        for (int r = 0; r < R; r++) {
            float *row = s.qkv + (size_t)r * Q;
            float *q = s.q + (size_t)r * HqD;
            int slot = b->slots[r], pos = b->positions[r];
            float *k = kv_at(g, g->kcache, slot, l, pos), *v = kv_at(g, g->vcache, slot, l, pos);
            memcpy(q, row, sizeof(float) * HqD);
            memcpy(k, row + HqD, sizeof(float) * kvd);
            memcpy(v, row + HqD + kvd, sizeof(float) * kvd);
            const float *cs = s.cos_v + (size_t)r * half, *sn = s.sin_v + (size_t)r * half;
            gptoss_rope_apply(q, cs, sn, Hq, D);
            gptoss_rope_apply(k, cs, sn, c->n_kv_heads, D);
            REC(Q_ROPE, l, 0, HqD, q);
            REC(K_ROPE, l, 0, kvd, k);
            if (g->o.kv_bf16)
                for (int i = 0; i < kvd; i++) {
                    k[i] = gptoss_bf16_round(k[i]);
                    v[i] = gptoss_bf16_round(v[i]);
                }
        }
        attn_job aj = {g, l, b, s.q, s.attn, s.att, W[GPTOSS_T_SINKS] + (size_t)l * Hq, NULL, NULL};
        if (trace) {
            aj.trace_scores = s.trace_scores;
            aj.trace_probs = s.trace_probs;
        }
        gptoss_pool_run(g->pool, R * Hq, attn_task, &aj);
        if (trace) {
            REC(SCORES, l, Hq, b->positions[0] + 2, s.trace_scores);
            REC(PROBS, l, Hq, b->positions[0] + 2, s.trace_probs);
        }
        REC(ATTN_OUT, l, 0, HqD, s.attn);
        matmul(g, s.proj, gemm_input(g, s.tin, s.attn, (size_t)R * HqD), R,
               W[GPTOSS_T_W_O] + (size_t)l * H * HqD, HqD, H);
        add_bias(s.proj, W[GPTOSS_T_B_O] + (size_t)l * H, R, H);
        REC(ATTN_PROJ, l, 0, H, s.proj);
        for (size_t i = 0; i < (size_t)R * H; i++)
            s.x[i] += s.proj[i];
        REC(RESID_ATTN, l, 0, H, s.x);

        /* MoE block */
        for (int r = 0; r < R; r++)
            rmsnorm(s.t + (size_t)r * H, s.x + (size_t)r * H, W[GPTOSS_T_RMS_FFN] + (size_t)l * H, H);
        REC(FFN_NORM, l, 0, H, s.t);
        const float *tin = gemm_input(g, s.tin, s.t, (size_t)R * H);
        matmul(g, s.router, tin, R, W[GPTOSS_T_W_ROUTER] + (size_t)l * E * H, H, E);
        add_bias(s.router, W[GPTOSS_T_B_ROUTER] + (size_t)l * E, R, E);
        REC(ROUTER, l, 0, E, s.router);
        for (int r = 0; r < R; r++) {
            gptoss_topk(s.router + (size_t)r * E, E, K, s.topk_w + (size_t)r * K, s.topk_i + (size_t)r * K);
            gptoss_course_softmax(s.topk_w + (size_t)r * K, K);
        }
        REC(TOPK_IDX, l, 0, K, s.topk_i);
        REC(TOPK_W, l, 0, K, s.topk_w);
        memset(s.agg, 0, sizeof(float) * (size_t)R * H);
        for (int e = 0; e < E; e++) {
            /* rows routed to expert e; each row still sums its experts in ascending id */
            int n = 0;
            for (int r = 0; r < R; r++)
                for (int k = 0; k < K; k++)
                    if (s.topk_i[(size_t)r * K + k] == e) {
                        s.members[n] = r;
                        s.member_w[n] = s.topk_w[(size_t)r * K + k];
                        s.member_k[n] = k;
                        memcpy(s.gathered + (size_t)n * H, tin + (size_t)r * H, sizeof(float) * H);
                        n++;
                    }
            if (n == 0)
                continue;
            size_t le = (size_t)l * E + e;
            matmul(g, s.m1, s.gathered, n, W[GPTOSS_T_W_MLP1] + le * 2 * I * H, H, 2 * I);
            add_bias(s.m1, W[GPTOSS_T_B_MLP1] + le * 2 * I, n, 2 * I);
            swiglu(s.y, s.m1, n, I, c->swiglu_limit);
            matmul(g, s.m2, gemm_input(g, s.yin, s.y, (size_t)n * I), n,
                   W[GPTOSS_T_W_MLP2] + le * H * I, I, H);
            add_bias(s.m2, W[GPTOSS_T_B_MLP2] + le * H, n, H);
            for (int j = 0; j < n; j++) {
                float *agg = s.agg + (size_t)s.members[j] * H;
                const float *m2 = s.m2 + (size_t)j * H;
                for (int i = 0; i < H; i++)
                    agg[i] += m2[i] * s.member_w[j];
            }
            if (trace) { /* one row: j = 0, stored at its top-k rank */
                int k = s.member_k[0];
                memcpy(s.trace_m1 + (size_t)k * 2 * I, s.m1, sizeof(float) * 2 * I);
                memcpy(s.trace_y + (size_t)k * I, s.y, sizeof(float) * I);
                memcpy(s.trace_m2 + (size_t)k * H, s.m2, sizeof(float) * H);
            }
        }
        REC(MLP1, l, K, 2 * I, s.trace_m1);
        REC(SWIGLU, l, K, I, s.trace_y);
        REC(MLP2, l, K, H, s.trace_m2);
        REC(MOE_OUT, l, 0, H, s.agg);
        for (size_t i = 0; i < (size_t)R * H; i++)
            s.x[i] += s.agg[i];
        REC(RESID_FFN, l, 0, H, s.x);
    }
    for (int r = 0; r < R; r++)
        rmsnorm(s.x + (size_t)r * H, s.x + (size_t)r * H, W[GPTOSS_T_RMS_OUT], H);
    REC(FINAL_NORM, -1, 0, H, s.x);
    matmul(g, logits, gemm_input(g, s.tin, s.x, (size_t)R * H), R, W[GPTOSS_T_OUT], H, c->vocab_size);
    REC(LOGITS, -1, 0, c->vocab_size, logits);
#undef REC
    free(mem);
    return GPTOSS_OK;
}

/* Tokens are drawn at once: the host has the logits, and a step's result
 * then needs nothing of the engine later. */
static gptoss_status golden_step(void *ctx, const gptoss_batch *b, const gptoss_step_args *a, gptoss_result *res,
                                 char *err) {
    gptoss_golden *g = ctx;
    gptoss_status st = forward(g, b, a->logits, NULL, err);
    if (st)
        return st;
    res->bad_row = gptoss_draw_rows(&g->sampler, a->logits, b->n, g->c.vocab_size, a->sampling, a->slot_bias,
                                    res->tokens, res->logprobs, res->why);
    res->delivered = 1;
    return GPTOSS_OK;
}

static gptoss_status golden_wait(void *ctx, gptoss_result *res, char *err) {
    (void)ctx, (void)res, (void)err;
    return GPTOSS_OK; /* every result is delivered by its step */
}

static void golden_forget(void *ctx, gptoss_result *res) { (void)ctx, (void)res; }

static gptoss_status golden_trace(void *ctx, const gptoss_batch *b, gptoss_trace *trace, float *logits,
                                  char *err) {
    return forward(ctx, b, logits, trace, err);
}

const gptoss_engine_i gptoss_golden_engine = {
    .reads_fed_tokens = 0,
    .host_logits = 1,
    .resolve = golden_resolve,
    .plan = golden_plan,
    .create = golden_create,
    .destroy = golden_destroy,
    .step = golden_step,
    .wait = golden_wait,
    .forget = golden_forget,
    .logits = NULL, /* host_logits: every result keeps its own */
    .trace = golden_trace,
    .length = golden_length,
    .reset = golden_reset,
    .fork = golden_fork,
    .logit_bias = NULL, /* the step's slot_bias lists */
    .profile = NULL,
    .profile_read = NULL,
};
