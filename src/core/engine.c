#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "step_rows.h"

struct gptoss_engine {
    const gptoss_engine_i *i;
    void *ctx;
    gptoss_model *m; /* a reference of its own */
    gptoss_engine_opts o;
    int vocab;
    uint64_t steps;
    gptoss_sample_params *slot_params; /* per slot, where slot_sampled */
    unsigned char *slot_sampled;
    gptoss_logit_bias **slot_bias; /* per slot: its list (owned), or NULL */
    int *slot_n_bias;
    int *slot_logprobs; /* per slot: top entries of its rows' logprobs, -1: none */
    /* per slot: the ids its penalized rows counted since its sampling was
     * set (at least its distinct ones; ctx at most) */
    int *slot_counted;
    /* [slots][ctx] the counts where the engine reads them on the host, made
     * when a slot is first penalized */
    gptoss_drawn_counts drawn;
};

gptoss_status gptoss_engine_plan(const gptoss_engine_i *i, gptoss_model *m, gptoss_engine_opts *o,
                                 gptoss_memory *out, uint64_t *headroom, char *err) {
    gptoss_status s = i->resolve(m, o, err);
    if (s)
        return s;
    if (o->kv_bf16 < 0) /* the cache follows the weights: fp32 with fp32, else bf16 */
        o->kv_bf16 = gptoss_weights_bf16(o);
    memset(out, 0, sizeof *out);
    *headroom = 0;
    if ((s = i->plan(m, o, out, headroom, err)))
        return s;
    /* sizes stay below 2^63, which signed 64-bit callers (Lua integers) read right */
    for (int k = 0; k < out->n; k++)
        if (out->part[k].bytes > (uint64_t)INT64_MAX - *headroom)
            return gptoss_fail(err, GPTOSS_E_INVALID, "these options need more than 2^63 bytes (%s)",
                               out->part[k].name);
    return GPTOSS_OK;
}

gptoss_status gptoss_weights_check(gptoss_model *m, const gptoss_engine_opts *o, char *err) {
    const gptoss_weight_format *f = gptoss_weight_format_of(o->weights);
    if (!f || !f->experts)
        return GPTOSS_OK;
    char why[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_model_experts_in(m, o->weights, why);
    return s ? gptoss_fail(err, s, "weights = \"%s\" needs experts exactly in %s: %.420s", f->name, f->title, why)
             : GPTOSS_OK;
}

gptoss_status gptoss_engine_new(const gptoss_engine_i *i, gptoss_model *m, const gptoss_engine_opts *o,
                                const gptoss_progress *progress, gptoss_engine **out, char *err) {
    gptoss_engine_opts opts = *o;
    gptoss_memory plan;
    uint64_t headroom;
    gptoss_status s = gptoss_engine_plan(i, m, &opts, &plan, &headroom, err); /* sizes fit 64 bits */
    if (s)
        return s;
    gptoss_engine *e = calloc(1, sizeof *e);
    if (e) {
        e->slot_params = calloc((size_t)opts.slots, sizeof *e->slot_params);
        e->slot_sampled = calloc((size_t)opts.slots, 1);
        e->slot_bias = calloc((size_t)opts.slots, sizeof *e->slot_bias);
        e->slot_n_bias = calloc((size_t)opts.slots, sizeof *e->slot_n_bias);
        e->slot_logprobs = calloc((size_t)opts.slots, sizeof *e->slot_logprobs);
        e->slot_counted = calloc((size_t)opts.slots, sizeof *e->slot_counted);
    }
    if (!e || !e->slot_params || !e->slot_sampled || !e->slot_bias || !e->slot_n_bias || !e->slot_logprobs ||
        !e->slot_counted) {
        gptoss_engine_free(e);
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    }
    e->i = i;
    e->m = m;
    gptoss_model_retain(m); /* before create, whose progress callback may let go of the caller's */
    e->o = opts;
    e->vocab = m->config.vocab_size;
    if ((s = i->create(m, &e->o, progress, &e->ctx, err))) {
        gptoss_engine_free(e);
        return s;
    }
    *out = e;
    return GPTOSS_OK;
}

void gptoss_engine_free(gptoss_engine *e) {
    if (!e)
        return;
    if (e->ctx)
        e->i->destroy(e->ctx);
    for (int slot = 0; e->slot_bias && slot < e->o.slots; slot++)
        free(e->slot_bias[slot]);
    free(e->slot_params);
    free(e->slot_sampled);
    free(e->slot_bias);
    free(e->slot_n_bias);
    free(e->slot_logprobs);
    free(e->slot_counted);
    free(e->drawn.id);
    free(e->drawn.count);
    free(e->drawn.n);
    gptoss_model_free(e->m);
    free(e);
}

const gptoss_model *gptoss_engine_model(const gptoss_engine *e) { return e->m; }

const gptoss_engine_opts *gptoss_engine_options(const gptoss_engine *e) { return &e->o; }

void gptoss_engine_memory(const gptoss_engine *e, gptoss_memory *out) {
    uint64_t headroom; /* what create allocated is what the plan said, then too */
    char err[GPTOSS_ERR_LEN];
    memset(out, 0, sizeof *out);
    (void)e->i->plan(e->m, &e->o, out, &headroom, err);
}

uint64_t gptoss_engine_steps(const gptoss_engine *e) { return e->steps; }

gptoss_status gptoss_engine_sampling_check(const gptoss_engine *e, const gptoss_slot_sampling *s, char *err) {
    gptoss_status st = gptoss_sample_params_check(&s->params, err);
    if (st || (st = gptoss_logit_bias_check(s->bias, s->n_bias, e->vocab, err)))
        return st;
    if (s->logprobs < -1 || s->logprobs > GPTOSS_MAX_LOGPROBS)
        return gptoss_fail(err, GPTOSS_E_INVALID, "logprobs must be within 0..%d (got %d)", GPTOSS_MAX_LOGPROBS,
                           s->logprobs);
    return GPTOSS_OK;
}

/* slot's penalties count from none: on the device, or in the host's
 * table, made on first need */
static gptoss_status drawn_reset(gptoss_engine *e, int slot, char *err) {
    if (e->i->drawn_reset)
        return e->i->drawn_reset(e->ctx, slot, err);
    if (!e->drawn.n) {
        size_t entries = (size_t)e->o.slots * (size_t)e->o.ctx;
        gptoss_drawn_counts d = {malloc(sizeof *d.id * entries), malloc(sizeof *d.count * entries), NULL,
                                 calloc((size_t)e->o.slots, sizeof *d.n), e->o.ctx};
        if (!d.id || !d.count || !d.n) {
            free(d.id);
            free(d.count);
            free(d.n);
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory for the penalties' counts");
        }
        e->drawn = d;
    }
    e->drawn.n[slot] = 0;
    return GPTOSS_OK;
}

gptoss_status gptoss_engine_sampling(gptoss_engine *e, int slot, const gptoss_slot_sampling *s, char *err) {
    gptoss_logit_bias *bias = NULL;
    int n_bias = s ? s->n_bias : 0;
    if (s) {
        gptoss_status st = gptoss_engine_sampling_check(e, s, err);
        if (!st && gptoss_sample_penalized(&s->params) && !(st = drawn_reset(e, slot, err)))
            e->slot_counted[slot] = 0;
        if (st)
            return st;
        if (n_bias && !(bias = malloc(sizeof *bias * (size_t)n_bias)))
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
        if (n_bias)
            memcpy(bias, s->bias, sizeof *bias * (size_t)n_bias);
        /* an engine that reads the lists on the device takes them now, in step order */
        if (n_bias && e->i->logit_bias && (st = e->i->logit_bias(e->ctx, slot, bias, n_bias, err))) {
            free(bias);
            return st;
        }
        e->slot_params[slot] = s->params;
    }
    e->slot_sampled[slot] = s != NULL;
    free(e->slot_bias[slot]);
    e->slot_bias[slot] = bias;
    e->slot_n_bias[slot] = n_bias;
    e->slot_logprobs[slot] = s ? s->logprobs : -1;
    return GPTOSS_OK;
}

/* Marks the row of each penalized slot that applies its penalties: the
 * slot's last (highest position) in the batch, whose id is fed next, when it
 * draws. GPTOSS_E_INVALID, changing nothing, when such a slot has counted
 * as many ids as its context holds. */
static gptoss_status mark_penalized(const gptoss_engine *e, const gptoss_batch *b, const gptoss_result *res,
                                    gptoss_row_sampling *rs, char *err) {
    int *last = NULL; /* per slot: its row at the highest position, -1: none */
    for (int r = 0; r < b->n; r++) {
        if (!rs[r].presence_penalty && !rs[r].frequency_penalty) /* a greedy slot's too, or one out of range */
            continue;
        if (!last) {
            if (!(last = malloc(sizeof *last * (size_t)e->o.slots)))
                return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
            for (int slot = 0; slot < e->o.slots; slot++)
                last[slot] = -1;
        }
        int slot = b->slots[r];
        if (last[slot] < 0 || b->positions[r] > b->positions[last[slot]])
            last[slot] = r;
    }
    gptoss_status st = GPTOSS_OK;
    for (int slot = 0; last && slot < e->o.slots && !st; slot++) {
        int r = last[slot];
        if (r < 0 || (res->fate && res->fate[r] != GPTOSS_ROW_DRAWS))
            continue;
        if (e->slot_counted[slot] < e->o.ctx)
            rs[r].penalize = 1;
        else
            st = gptoss_fail(err, GPTOSS_E_INVALID,
                             "slot %d has counted %d ids for its penalties since its sampling was set, as many as "
                             "its context holds: set its sampling again to count anew",
                             slot + 1, e->o.ctx);
    }
    free(last);
    return st;
}

/* The rows' sampling as their slots say, keyed by the position each row's
 * token will take, and the masks of q's constrained rows; NULL (and no
 * error) when every row is greedy without bias, logprobs, penalties or mask.
 * *logprobs: whether some row asks for them. Slots out of range are left
 * greedy: the engine's batch check refuses them. */
static gptoss_status rows_sampling(const gptoss_engine *e, const gptoss_batch *b, const gptoss_step_request *q,
                                   const gptoss_result *res, gptoss_row_sampling **out, int *logprobs, char *err) {
    *out = NULL;
    *logprobs = 0;
    if (q->n_masks > 0 && !(*out = calloc((size_t)b->n, sizeof **out)))
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    for (int k = 0; k < q->n_masks; k++)
        (*out)[q->mask_rows[k]].mask = k + 1;
    for (int r = 0; r < b->n; r++) {
        int slot = b->slots[r];
        if (slot < 0 || slot >= e->o.slots || !e->slot_sampled[slot])
            continue;
        if (!*out && !(*out = calloc((size_t)b->n, sizeof **out)))
            return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
        int mask = (*out)[r].mask;
        gptoss_row_sampling *rs = &(*out)[r];
        *rs = gptoss_row_sampling_of(&e->slot_params[slot], (uint64_t)b->positions[r] + 1);
        rs->slot = slot;
        rs->n_bias = e->slot_n_bias[slot];
        rs->want_logprobs = e->slot_logprobs[slot] >= 0;
        rs->top_logprobs = rs->want_logprobs ? e->slot_logprobs[slot] : 0;
        rs->mask = mask;
        *logprobs |= rs->want_logprobs;
    }
    return *out ? mark_penalized(e, b, res, *out, err) : GPTOSS_OK;
}

/* Fed tokens as ids, for an engine that takes ids only: *tokens is a copy of
 * b's where each fed token naming a row of fed_by is the id fed_by drew
 * there, or NULL when b holds none. Other fed tokens stay for the batch
 * check to refuse. A row fed by a row of fed_by that could not draw is
 * given token 0 and the fate GPTOSS_ROW_FED_FAILED in res: it runs (a
 * batch does not stop for one row) and fails to draw. */
static gptoss_status resolve_fed(gptoss_engine *e, const gptoss_batch *b, gptoss_result *fed_by, gptoss_result *res,
                                 int **tokens, char *err) {
    *tokens = NULL;
    int refs = 0;
    for (int r = 0; r < b->n; r++)
        refs |= gptoss_token_is_fed(b->tokens[r]) && gptoss_fed_row(b->tokens[r]) < fed_by->rows;
    if (!refs)
        return GPTOSS_OK;
    gptoss_status s = fed_by->delivered ? GPTOSS_OK : e->i->wait(e->ctx, fed_by, err);
    if (s)
        return s;
    gptoss_step_rows_settle(fed_by);
    if (!(*tokens = malloc(sizeof(int) * (size_t)b->n)))
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    for (int r = 0; r < b->n; r++) {
        int t = b->tokens[r], j = gptoss_fed_row(t), fed = gptoss_token_is_fed(t) && j < fed_by->rows;
        (*tokens)[r] = fed ? fed_by->tokens[j] : t;
        if (!fed || fed_by->tokens[j] >= 0)
            continue;
        (*tokens)[r] = 0;
        if ((s = gptoss_step_rows_fed_failed(res, r, fed_by, j, err)))
            return s;
    }
    return GPTOSS_OK;
}

static gptoss_storage *logits_storage(size_t rows, int vocab, char *err) {
    gptoss_storage *st = gptoss_storage_new(GPTOSS_F32, (rows ? rows : 1) * (size_t)vocab);
    if (!st)
        gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "cannot allocate %.1f MiB for logits",
                    (double)rows * vocab * 4 / 1048576.0);
    return st;
}

gptoss_status gptoss_engine_step(gptoss_engine *e, const gptoss_step_request *q, gptoss_result *res, char *err) {
    const gptoss_batch *b = q->batch;
    gptoss_result *fed_by = q->fed_by;
    memset(res, 0, sizeof *res);
    res->rows = res->logits_rows = b->n;
    res->vocab = e->vocab;
    res->bad_row = -1;
    gptoss_batch batch = *b;
    batch.fed_rows = 0;
    int *fed_tokens = NULL, logprobs = 0;
    gptoss_row_sampling *sampling = NULL;
    gptoss_status s = q->keep_logits ? gptoss_step_rows_keep(q->keep, q->n_keep, b->n, res, err) : GPTOSS_OK;
    if (!s)
        s = gptoss_step_rows_draw(q->draw, q->n_draw, b->n, res, err);
    if (!s)
        s = gptoss_step_rows_masked(q->mask_rows, q->n_masks, b->n, res, err);
    if (!s && fed_by)
        s = gptoss_step_rows_check_fed(b, fed_by, err);
    if (!s && fed_by && e->i->reads_fed_tokens)
        batch.fed_rows = fed_by->rows;
    else if (!s && fed_by && !(s = resolve_fed(e, b, fed_by, res, &fed_tokens, err)) && fed_tokens)
        batch.tokens = fed_tokens;
    if (!s)
        s = rows_sampling(e, &batch, q, res, &sampling, &logprobs, err);
    size_t rows = (size_t)(b->n > 0 ? b->n : 1);
    if (!s && !(res->tokens = malloc(sizeof(int) * rows)))
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    if (!s && logprobs && !(res->logprobs = malloc(sizeof *res->logprobs * rows)))
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    if (!s && q->keep_logits && !(res->logits = logits_storage((size_t)res->logits_rows, e->vocab, err)))
        s = GPTOSS_E_HOST_MEMORY;
    if (!s) {
        gptoss_step_args a = {sampling, (const gptoss_logit_bias *const *)e->slot_bias, q->n_masks ? q->masks : NULL,
                              res->logits ? (float *)res->logits->data : NULL, res->logit_rows, res->logits_rows,
                              res->fate, e->drawn.n ? &e->drawn : NULL};
        s = e->i->step(e->ctx, &batch, &a, res, err);
    }
    for (int r = 0; !s && sampling && r < b->n; r++)
        e->slot_counted[b->slots[r]] += sampling[r].penalize;
    free(fed_tokens);
    free(sampling);
    if (s) {
        res->delivered = 1; /* nothing pending: release has nothing to forget */
        gptoss_result_release(e, res);
        return s;
    }
    res->seq = ++e->steps;
    return GPTOSS_OK;
}

gptoss_status gptoss_engine_tokens(gptoss_engine *e, gptoss_result *res, char *err) {
    if (!res->delivered) {
        if (!e) /* freeing an engine delivers its results */
            return gptoss_fail(err, GPTOSS_E_STATE, "the step's engine is gone (internal error)");
        gptoss_status s = e->i->wait(e->ctx, res, err);
        if (s)
            return s;
    }
    gptoss_step_rows_settle(res);
    if (res->bad_row >= 0)
        return gptoss_fail(err, GPTOSS_E_DRAW, "%s", res->why);
    return GPTOSS_OK;
}

int gptoss_engine_ready(const gptoss_engine *e, const gptoss_result *res) {
    return res->delivered || !e || !e->i->ready || e->i->ready(e->ctx, res);
}

gptoss_status gptoss_engine_logits(gptoss_engine *e, gptoss_result *res, char *err) {
    if (res->logits)
        return GPTOSS_OK;
    if (!e)
        return gptoss_fail(err, GPTOSS_E_STATE,
                           "the replica is closed and this step did not keep its logits");
    gptoss_storage *st = gptoss_storage_new(GPTOSS_F32, (size_t)res->rows * (size_t)res->vocab);
    if (!st)
        return gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory");
    gptoss_status s = e->i->logits(e->ctx, res, st->data, err);
    if (s) {
        gptoss_storage_release(st);
        return s;
    }
    res->logits = st;
    return GPTOSS_OK;
}

void gptoss_result_release(gptoss_engine *e, gptoss_result *res) {
    if (e && !res->delivered)
        e->i->forget(e->ctx, res);
    res->delivered = 1;
    free(res->tokens);
    res->tokens = NULL;
    free(res->logprobs);
    res->logprobs = NULL;
    free(res->logit_rows);
    res->logit_rows = NULL;
    free(res->fate);
    res->fate = NULL;
    gptoss_storage_release(res->logits);
    res->logits = NULL;
}

gptoss_status gptoss_engine_trace(gptoss_engine *e, int slot, int token, int pos, gptoss_trace *trace,
                                  float *logits, char *err) {
    gptoss_batch b = {1, &slot, &pos, &token, 0};
    return e->i->trace(e->ctx, &b, trace, logits, err);
}

int gptoss_engine_length(const gptoss_engine *e, int slot) { return e->i->length(e->ctx, slot); }
int gptoss_engine_rewind_limit(const gptoss_engine *e, int slot) {
    return e->i->rewind_limit ? e->i->rewind_limit(e->ctx, slot) : 0;
}
void gptoss_engine_reset(gptoss_engine *e, int slot) { e->i->reset(e->ctx, slot); }

gptoss_status gptoss_engine_fork(gptoss_engine *e, int from, int to, int length, char *err) {
    int slots = e->o.slots;
    if (from < 0 || from >= slots || to < 0 || to >= slots)
        return gptoss_fail(err, GPTOSS_E_INVALID, "slot %d is out of range 1..%d",
                           (from < 0 || from >= slots ? from : to) + 1, slots);
    if (from == to)
        return gptoss_fail(err, GPTOSS_E_INVALID, "from and to are both slot %d", from + 1);
    int held = e->i->length(e->ctx, from);
    if (length < 0)
        length = held;
    if (length > held)
        return gptoss_fail(err, GPTOSS_E_INVALID, "length %d is more than slot %d holds (%d positions)", length,
                           from + 1, held);
    return e->i->fork(e->ctx, from, to, length, err);
}

gptoss_status gptoss_engine_profile(gptoss_engine *e, int on, char *err) {
    if (!e->i->profile)
        return gptoss_fail(err, GPTOSS_E_UNSUPPORTED, "per-kernel timing is for GPU replicas");
    return e->i->profile(e->ctx, on, err);
}

gptoss_status gptoss_engine_profile_read(gptoss_engine *e,
                                         void (*each)(void *arg, const char *label, double seconds,
                                                      long calls),
                                         void *arg, char *err) {
    if (!e->i->profile_read)
        return gptoss_fail(err, GPTOSS_E_UNSUPPORTED, "per-kernel timing is for GPU replicas");
    e->i->profile_read(e->ctx, each, arg);
    return GPTOSS_OK;
}
