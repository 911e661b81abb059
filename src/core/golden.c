/* The golden engine's replicas (golden.h): their lifecycle and the engine
 * interface; the forward pass is golden_forward.c's. */
#include "golden.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checked.h"
#include "golden_replica.h"

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

/* host bytes: the KV pool is the replica's own; weights are the model's, shared, in the form
 * the weight format holds them (gptoss_model_held_bytes: a checkpoint's mapped bytes) */
static gptoss_status golden_plan(const gptoss_model *m, const gptoss_engine_opts *o, gptoss_memory *out,
                                 uint64_t *headroom, char *err) {
    int overflow = 0;
    uint64_t kv = kv_bytes(&m->config, o, &overflow), w = gptoss_model_held_bytes(m, o->weights);
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
    free(g->latest);
    free(g->kcache);
    free(g->vcache);
    free(g->length);
    free(g->tiles);
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
    const gptoss_config *c = &g->c;
    size_t widest = (size_t)c->hidden_dim; /* every matmul's input: H, Hq*D or I */
    if ((size_t)c->n_attn_heads * c->head_dim > widest)
        widest = (size_t)c->n_attn_heads * c->head_dim;
    if ((size_t)c->intermediate_dim > widest)
        widest = (size_t)c->intermediate_dim;
    g->tile_row = widest;
    g->tiles = malloc(sizeof(float) * widest * 4 * GPTOSS_GOLDEN_MM_TASKS_PER_THREAD * (size_t)g->o.threads);
    if (!g->tiles) {
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
        goto fail;
    }
    if ((s = gptoss_model_hold(m, g->o.weights, g->pool, progress, err)))
        goto fail;
    g->w = gptoss_model_held(m, g->o.weights);
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
        memcpy(gptoss_golden_kv_at(g, g->kcache, to, l, 0), gptoss_golden_kv_at(g, g->kcache, from, l, 0),
               bytes);
        memcpy(gptoss_golden_kv_at(g, g->vcache, to, l, 0), gptoss_golden_kv_at(g, g->vcache, from, l, 0),
               bytes);
    }
    g->length[to] = length;
    return GPTOSS_OK;
}

/* The rows whose logits a step computes into *order: those that draw
 * (ascending, n_draw of them), then those kept that do not draw; at[r] is
 * where row r is in it (-1: nowhere). */
static int logit_order(const gptoss_batch *b, const gptoss_step_args *a, int *order, int *at, int *n_draw) {
    int n = 0;
    for (int r = 0; r < b->n; r++) {
        int draws = !a->fate || a->fate[r] == GPTOSS_ROW_DRAWS;
        at[r] = draws ? n : -1;
        if (draws)
            order[n++] = r;
    }
    *n_draw = n;
    for (int i = 0; a->logits && i < a->n_logit_rows; i++) {
        int r = a->logit_rows ? a->logit_rows[i] : i;
        if (at[r] < 0) {
            at[r] = n;
            order[n++] = r;
        }
    }
    return n;
}

/* Tokens are drawn at once: the host has the logits, and a step's result
 * then needs nothing of the engine later. The logits of the rows that draw
 * or are kept are computed, the others' not; they stay in g->latest until
 * the next step (a refused one leaves the last one's). */
static gptoss_status golden_step(void *ctx, const gptoss_batch *b, const gptoss_step_args *a, gptoss_result *res,
                                 char *err) {
    gptoss_golden *g = ctx;
    size_t V = (size_t)g->c.vocab_size, rows = (size_t)(b->n > 0 ? b->n : 1);
    int *order = malloc(sizeof(int) * rows), *at = malloc(sizeof(int) * rows), n_draw = 0;
    int n = order && at ? logit_order(b, a, order, at, &n_draw) : 0;
    float *logits = order && at ? malloc(sizeof(float) * V * (size_t)(n > 0 ? n : 1)) : NULL;
    gptoss_status st = logits ? gptoss_golden_forward(g, b, order, n, logits, NULL, err)
                              : gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "cannot allocate %.1f MiB for logits",
                                            (double)n * (double)V * 4 / 1048576.0);
    char why[GPTOSS_ERR_LEN];
    int bad = st ? -1 : gptoss_draw_rows(&g->sampler, logits, order, n_draw, (int)V, a->sampling, a->slot_bias,
                                         a->masks, a->drawn, res->tokens, res->logprobs, why);
    if (bad >= 0 && (res->bad_row < 0 || bad < res->bad_row)) { /* a row fed a failed token may come first */
        res->bad_row = bad;
        memcpy(res->why, why, sizeof why);
    }
    if (!st) {
        for (int i = 0; a->logits && i < a->n_logit_rows; i++)
            memcpy(a->logits + (size_t)i * V, logits + (size_t)at[a->logit_rows ? a->logit_rows[i] : i] * V,
                   sizeof(float) * V);
        res->ticket = g->latest_ticket = ++g->tickets;
        res->delivered = 1;
        free(g->latest);
        g->latest = logits;
        g->latest_all = n_draw == b->n;
    } else {
        free(logits);
    }
    free(order);
    free(at);
    return st;
}

static gptoss_status golden_wait(void *ctx, gptoss_result *res, char *err) {
    (void)ctx, (void)res, (void)err;
    return GPTOSS_OK; /* every result is delivered by its step */
}

static void golden_forget(void *ctx, gptoss_result *res) { (void)ctx, (void)res; }

static gptoss_status golden_logits(void *ctx, const gptoss_result *res, float *out, char *err) {
    const gptoss_golden *g = ctx;
    if (res->ticket != g->latest_ticket)
        return gptoss_fail(err, GPTOSS_E_STATE, "a later step on this replica has replaced these logits");
    if (!g->latest_all)
        return gptoss_fail(err, GPTOSS_E_STATE, "this step computed the logits of the rows it drew (draw) only");
    memcpy(out, g->latest, sizeof(float) * (size_t)res->rows * (size_t)g->c.vocab_size);
    return GPTOSS_OK;
}

static gptoss_status golden_trace(void *ctx, const gptoss_batch *b, gptoss_trace *trace, float *logits,
                                  char *err) {
    return gptoss_golden_forward(ctx, b, NULL, b->n, logits, trace, err);
}

const gptoss_engine_i gptoss_golden_engine = {
    .reads_fed_tokens = 0,
    .resolve = golden_resolve,
    .plan = golden_plan,
    .create = golden_create,
    .destroy = golden_destroy,
    .step = golden_step,
    .wait = golden_wait,
    .ready = NULL, /* every result is delivered by its step */
    .forget = golden_forget,
    .logits = golden_logits,
    .trace = golden_trace,
    .length = golden_length,
    .rewind_limit = NULL, /* every position is kept */
    .reset = golden_reset,
    .fork = golden_fork,
    .logit_bias = NULL, /* the step's slot_bias lists */
    .drawn_reset = NULL, /* the step's drawn counts */
    .profile = NULL,
    .profile_read = NULL,
};
