/* gptoss.replica: a model placed on a device with a pool of KV slots (the
 * CPU golden engine, or the GPU engine of src/hip), and gptoss.step: the
 * handle of one step. A CPU step is done when r:step returns; a GPU step is
 * enqueued and its handle waits when asked for tokens or logits. */
#include <stdlib.h>
#include <string.h>

#include "../core/golden.h"
#include "../hip/backend.h"
#include "binding.h"

gptoss_model *gptoss_check_model(lua_State *L, int idx);

/* A row's sampling as its step saw it; the draw is keyed by the position
 * the chosen token will take (the row's position + 1). */
typedef struct {
    int sampled; /* 0: greedy */
    gptoss_sample_params p;
    uint64_t position;
} row_sampling;

/* The replica's one sampler workspace (vocab-sized buffers), made on the
 * first sampled row and shared by its step handles, which keep it alive. */
typedef struct {
    gptoss_sampler *s;
} sampler_box;

#define SAMPLER_BOX_MT "gptoss.replica_sampler"

/* Exactly one of g (CPU) and gpu is set while open; both NULL once closed. */
typedef struct {
    gptoss_golden *g;
    gptoss_gpu *gpu;
    int slots, ctx, weights_bf16, kv_bf16; /* as created, for either engine */
    row_sampling *slot_sampling; /* per slot, in the replica's user value 2 */
    sampler_box *scratch;        /* user value 3 */
    uint64_t steps;              /* r:step calls done: the latest step's seq */
} lua_replica;

/* CPU: logits always, sampling drawn on the host by h:tokens().
 * GPU: tokens delivered into result/tokens; logits only when asked at step
 * time (logits = true) or while no later step has run. */
typedef struct {
    gptoss_storage *logits; /* [rows][vocab], or NULL (GPU step without logits) */
    int rows, vocab;
    row_sampling *rows_sampling; /* CPU, NULL when every row is greedy; user value 1 */
    sampler_box *scratch;        /* CPU: the replica's; user value 2 */
    lua_replica *replica;        /* GPU; the replica is user value 3 for either engine */
    gptoss_gpu_result result;
    int *tokens;                 /* GPU: rows ids, user value 1 */
    uint64_t seq;                /* the replica's steps when this one was taken */
} lua_step;

static int box_gc(lua_State *L) {
    sampler_box *b = lua_touserdata(L, 1);
    gptoss_sampler_free(b->s);
    b->s = NULL;
    return 0;
}

static const char *const dtype_modes[] = {"fp32", "bf16", NULL};

static lua_replica *check_open(lua_State *L, int idx) {
    lua_replica *r = luaL_checkudata(L, idx, GPTOSS_REPLICA_MT);
    if (!r->g && !r->gpu)
        luaL_error(L, "replica: used after close");
    return r;
}

/* model:replica{device="cpu"|N, slots=1, ctx=seq_len, weights="fp32", kv="fp32",
 *               threads=0 (CPU), rows=max(slots, 256), chunk=min(rows, 128) (GPU)} */
int gptoss_lua_replica(lua_State *L) {
    gptoss_model *m = gptoss_check_model(L, 1);
    if (lua_isnoneornil(L, 2))
        lua_newtable(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 2);
    static const char *const known[] = {"device", "slots", "ctx",  "weights", "kv",
                                        "threads", "rows",  "chunk", NULL};
    gptoss_opt_known(L, 2, "replica", known);
    int device = -1; /* the CPU */
    lua_getfield(L, 2, "device");
    if (lua_isinteger(L, -1))
        device = gptoss_check_device(L, lua_tointeger(L, -1), "replica");
    else if (!lua_isnil(L, -1) &&
             !(lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "cpu") == 0))
        return luaL_error(L, "replica: device must be \"cpu\" or a GPU number (got %s)",
                          luaL_tolstring(L, -1, NULL));
    lua_pop(L, 1);
    lua_Integer slots = gptoss_opt_integer(L, 2, "replica", "slots", 1);
    lua_Integer ctx = gptoss_opt_integer(L, 2, "replica", "ctx", m->config.seq_len);
    if (slots < 1 || slots > 1 << 20)
        return luaL_error(L, "replica: slots = %I must be in 1..%d", slots, 1 << 20);
    if (ctx < 1 || ctx > INT32_MAX / 2)
        return luaL_error(L, "replica: ctx = %I must be in 1..%d", ctx, INT32_MAX / 2);
    int weights_bf16 = gptoss_opt_choice(L, 2, "replica", "weights", dtype_modes, 0);
    int kv_bf16 = gptoss_opt_choice(L, 2, "replica", "kv", dtype_modes, 0);
    gptoss_golden_opts o = {(int)slots, (int)ctx, 0, weights_bf16, kv_bf16};
    gptoss_gpu_opts go = {device, weights_bf16, kv_bf16, (int)slots, (int)ctx, 0, 0};
    if (device < 0) {
        lua_Integer threads = gptoss_opt_integer(L, 2, "replica", "threads", 0);
        if (threads < 0 || threads > 1024)
            return luaL_error(L, "replica: threads = %I must be in 0..1024 (0: all CPUs)", threads);
        o.threads = (int)threads;
        lua_getfield(L, 2, "rows");
        lua_getfield(L, 2, "chunk");
        if (!lua_isnil(L, -1) || !lua_isnil(L, -2))
            return luaL_error(L, "replica: rows and chunk size a GPU replica's buffers; a CPU "
                                 "replica takes batches of any size");
        lua_pop(L, 2);
    } else {
        lua_getfield(L, 2, "threads");
        if (!lua_isnil(L, -1))
            return luaL_error(L, "replica: threads applies to CPU replicas only");
        lua_pop(L, 1);
        lua_Integer rows = gptoss_opt_integer(L, 2, "replica", "rows", slots > 256 ? slots : 256);
        if (rows < 1 || rows > 1 << 20)
            return luaL_error(L, "replica: rows = %I must be in 1..%d", rows, 1 << 20);
        lua_Integer chunk = gptoss_opt_integer(L, 2, "replica", "chunk", rows < 128 ? rows : 128);
        if (chunk < 1 || chunk > rows)
            return luaL_error(L, "replica: chunk = %I must be in 1..rows (%I)", chunk, rows);
        go.rows = (int)rows;
        go.chunk = (int)chunk;
    }
    lua_replica *r = lua_newuserdatauv(L, sizeof *r, 3);
    r->g = NULL;
    r->gpu = NULL;
    r->slots = (int)slots;
    r->ctx = (int)ctx;
    r->weights_bf16 = weights_bf16;
    r->kv_bf16 = kv_bf16;
    r->steps = 0;
    luaL_setmetatable(L, GPTOSS_REPLICA_MT);
    lua_pushvalue(L, 1); /* the replica keeps its model alive */
    lua_setiuservalue(L, -2, 1);
    r->slot_sampling = lua_newuserdatauv(L, sizeof *r->slot_sampling * (size_t)slots, 0);
    memset(r->slot_sampling, 0, sizeof *r->slot_sampling * (size_t)slots);
    lua_setiuservalue(L, -2, 2);
    r->scratch = lua_newuserdatauv(L, sizeof *r->scratch, 0);
    r->scratch->s = NULL;
    luaL_setmetatable(L, SAMPLER_BOX_MT);
    lua_setiuservalue(L, -2, 3);
    char err[GPTOSS_ERR_LEN];
    if (device < 0 ? gptoss_golden_new(m, &o, &r->g, err) : gptoss_gpu_new(m, &go, &r->gpu, err))
        return luaL_error(L, "replica: %s", err);
    return 1;
}

/* reads t[field] as an array of n integers into out (n < 0: sets n) */
static int *int_array(lua_State *L, int tbl, const char *field, int *n) {
    lua_getfield(L, tbl, field);
    if (!lua_istable(L, -1))
        luaL_error(L, "step: %s must be a table of integers (got %s)", field, luaL_typename(L, -1));
    int len = (int)luaL_len(L, -1);
    if (*n >= 0 && len != *n)
        luaL_error(L, "step: slots, positions and tokens must have the same length (%s has %d, "
                      "slots has %d)", field, len, *n);
    *n = len;
    int *out = lua_newuserdatauv(L, sizeof(int) * (size_t)(len ? len : 1), 0);
    for (int i = 0; i < len; i++) {
        lua_geti(L, -2, i + 1);
        int ok;
        lua_Integer v = lua_tointegerx(L, -1, &ok);
        if (!ok || v < INT32_MIN || v > INT32_MAX)
            luaL_error(L, "step: %s[%d] must be an integer (got %s)", field, i + 1,
                       luaL_tolstring(L, -1, NULL));
        out[i] = (int)v;
        lua_pop(L, 1);
    }
    lua_remove(L, -2); /* keep the buffer on the stack, drop the table */
    return out;
}

static int s_tokens(lua_State *L);

/* The step at the top of the stack (field `field` of the batch) as the one
 * feeding this batch: a step of this replica, and its latest. */
static lua_step *feeding_step(lua_State *L, const lua_replica *r, const char *field) {
    lua_step *h = luaL_testudata(L, -1, GPTOSS_STEP_MT);
    if (!h)
        luaL_error(L, "step: %s must be a step of this replica (got %s)", field, luaL_typename(L, -1));
    lua_getiuservalue(L, -1, 3);
    int own = lua_touserdata(L, -1) == (const void *)r;
    lua_pop(L, 1);
    if (!own)
        luaL_error(L, "step: %s is a step of another replica", field);
    if (h->seq != r->steps)
        luaL_error(L, "step: %s is step %I of this replica, not its latest (%I): only the latest "
                      "feeds the next", field, (lua_Integer)h->seq, (lua_Integer)r->steps);
    return h;
}

/* Fed tokens: -1 - j (0-based j, the core's encoding) stands for the id the
 * feeding step at the top of the stack sampled for its row j. A GPU replica
 * reads those ids on the device (gptoss_batch.fed_rows), so the new step is
 * enqueued before the feeding one is done and the device never waits for
 * the host between them; the CPU samples on the host, so its ids replace
 * the references here (h:tokens()). */
static void feed(lua_State *L, const lua_replica *r, const lua_step *h, int *tokens, int n, gptoss_batch *b) {
    if (r->gpu) {
        b->fed_rows = h->rows;
        return;
    }
    int refs = 0;
    for (int i = 0; i < n; i++)
        refs |= tokens[i] < 0;
    if (!refs)
        return;
    lua_pushcfunction(L, s_tokens);
    lua_pushvalue(L, -2);
    lua_call(L, 1, 1);
    for (int i = 0; i < n; i++) {
        if (tokens[i] >= 0)
            continue;
        lua_rawgeti(L, -1, -tokens[i]);
        tokens[i] = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* tokens = h: row i takes the token step h sampled for its row i (h of as
 * many rows). Leaves the ids on the stack; NULL (nothing pushed) when tokens
 * is not a step. */
static int *fed_tokens(lua_State *L, int tbl, const lua_replica *r, int n, gptoss_batch *b) {
    lua_getfield(L, tbl, "tokens");
    if (!luaL_testudata(L, -1, GPTOSS_STEP_MT)) {
        lua_pop(L, 1);
        return NULL;
    }
    lua_step *h = feeding_step(L, r, "tokens");
    if (h->rows != n)
        luaL_error(L, "step: tokens is a step of %d rows; this batch has %d", h->rows, n);
    int *out = lua_newuserdatauv(L, sizeof(int) * (size_t)(n ? n : 1), 0);
    for (int i = 0; i < n; i++)
        out[i] = -1 - i;
    lua_insert(L, -2);
    feed(L, r, h, out, n, b);
    lua_pop(L, 1); /* keep the ids, drop the step */
    return out;
}

/* from = h with a table of tokens: a token -j takes the id step h sampled
 * for its row j (1-based; -j is the core's -1 - (j - 1)), so the rows of a
 * step can be fed by any rows of the last one, each row by its own. */
static void fed_from(lua_State *L, int tbl, const lua_replica *r, int *tokens, int n, gptoss_batch *b) {
    lua_getfield(L, tbl, "from");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return;
    }
    lua_step *h = feeding_step(L, r, "from");
    for (int i = 0; i < n; i++)
        if (tokens[i] < -h->rows) /* not -tokens[i]: INT32_MIN has no negation */
            luaL_error(L, "step: tokens[%d] = %d refers to row %I of from, a step of %d rows", i + 1,
                       tokens[i], -(lua_Integer)tokens[i], h->rows);
    feed(L, r, h, tokens, n, b);
    lua_pop(L, 1);
}

static void read_batch(lua_State *L, int tbl, const lua_replica *r, gptoss_batch *b) {
    luaL_checktype(L, tbl, LUA_TTABLE);
    static const char *const known[] = {"slots", "positions", "tokens", "from", "logits", NULL};
    gptoss_opt_known(L, tbl, "step", known);
    int n = -1;
    int *slots = int_array(L, tbl, "slots", &n);
    b->positions = int_array(L, tbl, "positions", &n);
    b->fed_rows = 0;
    b->tokens = fed_tokens(L, tbl, r, n, b);
    if (b->tokens) {
        lua_getfield(L, tbl, "from");
        if (!lua_isnil(L, -1))
            luaL_error(L, "step: from is for a table of tokens; tokens = h already names the feeding step");
        lua_pop(L, 1);
    } else {
        lua_getfield(L, tbl, "tokens");
        if (!lua_istable(L, -1))
            luaL_error(L, "step: tokens must be a table of integers or the replica's latest step (got %s)",
                       luaL_typename(L, -1));
        lua_pop(L, 1);
        int *tokens = int_array(L, tbl, "tokens", &n);
        fed_from(L, tbl, r, tokens, n, b);
        b->tokens = tokens;
    }
    for (int i = 0; i < n; i++)
        slots[i]--; /* 1-based in Lua */
    b->slots = slots;
    b->n = n;
}

static lua_step *push_step(lua_State *L, int rows, int vocab, int with_logits) {
    lua_step *h = lua_newuserdatauv(L, sizeof *h, 3);
    memset(h, 0, sizeof *h);
    h->rows = rows;
    h->vocab = vocab;
    luaL_setmetatable(L, GPTOSS_STEP_MT);
    if (with_logits) {
        h->logits = gptoss_storage_new(GPTOSS_F32, (size_t)rows * (size_t)vocab);
        if (!h->logits)
            luaL_error(L, "step: cannot allocate %f MiB for logits",
                       (double)rows * vocab * 4 / 1048576.0);
    }
    return h;
}

/* 0-based slot from a 1-based argument, range-checked */
static int check_slot(lua_State *L, const lua_replica *r, int idx, const char *fn) {
    lua_Integer s = luaL_checkinteger(L, idx);
    if (s < 1 || s > r->slots)
        luaL_error(L, "%s: slot %d is out of range 1..%d", fn, (int)s, r->slots);
    return (int)s - 1;
}

static int model_vocab(lua_State *L, int replica_idx) {
    lua_getiuservalue(L, replica_idx, 1);
    int vocab = gptoss_check_model(L, -1)->config.vocab_size;
    lua_pop(L, 1);
    return vocab;
}

/* the slot's sampling if it samples; NULL when greedy or out of range (the
 * step's own check reports the latter) */
static const row_sampling *slot_sampled(const lua_replica *r, int slot) {
    if (slot < 0 || slot >= r->slots || !r->slot_sampling[slot].sampled)
        return NULL;
    return &r->slot_sampling[slot];
}

/* A GPU step: the rows' sampling goes with the batch; tokens come back into
 * the handle's own buffer. */
static int gpu_step(lua_State *L, lua_replica *r, const gptoss_batch *b, int with_logits) {
    lua_step *h = push_step(L, b->n, model_vocab(L, 1), with_logits);
    int step_idx = lua_gettop(L);
    h->tokens = lua_newuserdatauv(L, sizeof(int) * (size_t)b->n, 0);
    lua_setiuservalue(L, step_idx, 1);
    h->replica = r;
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, step_idx, 3);
    h->result.tokens = h->tokens;
    h->result.delivered = 1; /* nothing pending until the step is enqueued */
    gptoss_row_sampling *rows = NULL;
    for (int i = 0; i < b->n && !rows; i++)
        if (slot_sampled(r, b->slots[i]))
            rows = lua_newuserdatauv(L, sizeof *rows * (size_t)b->n, 0);
    for (int i = 0; rows && i < b->n; i++) {
        const row_sampling *rs = slot_sampled(r, b->slots[i]);
        memset(&rows[i], 0, sizeof rows[i]); /* temperature 0: greedy */
        if (rs) {
            rows[i].seed = rs->p.seed;
            rows[i].position = (uint64_t)b->positions[i] + 1;
            rows[i].top_p = rs->p.top_p;
            rows[i].min_p = rs->p.min_p;
            rows[i].temperature = (float)rs->p.temperature;
            rows[i].top_k = rs->p.top_k;
        }
    }
    char err[GPTOSS_ERR_LEN];
    if (gptoss_gpu_step(r->gpu, b, rows, &h->result, h->logits ? h->logits->data : NULL, err))
        return luaL_error(L, "%s", err);
    h->seq = ++r->steps;
    lua_settop(L, step_idx);
    return 1;
}

/* r:step{slots=, positions=, tokens= (ids, or the latest step) [, logits=true]} */
static int r_step(lua_State *L) {
    lua_replica *r = check_open(L, 1);
    gptoss_batch b;
    read_batch(L, 2, r, &b);
    lua_getfield(L, 2, "logits");
    int with_logits = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (r->gpu)
        return gpu_step(L, r, &b, with_logits);
    gptoss_golden *g = r->g;
    lua_step *h = push_step(L, b.n, model_vocab(L, 1), 1);
    char err[GPTOSS_ERR_LEN];
    if (gptoss_golden_step(g, &b, h->logits->data, NULL, err))
        return luaL_error(L, "%s", err);
    h->seq = ++r->steps;
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 3);
    /* the batch is valid now: snapshot the sampling of its rows' slots */
    for (int i = 0; i < b.n && !h->rows_sampling; i++)
        if (r->slot_sampling[b.slots[i]].sampled) {
            h->rows_sampling = lua_newuserdatauv(L, sizeof *h->rows_sampling * (size_t)b.n, 0);
            lua_setiuservalue(L, -2, 1);
            h->scratch = r->scratch;
            lua_getiuservalue(L, 1, 3);
            lua_setiuservalue(L, -2, 2);
        }
    const row_sampling *slot_sampling = r->slot_sampling;
    for (int i = 0; h->rows_sampling && i < b.n; i++) {
        h->rows_sampling[i] = slot_sampling[b.slots[i]];
        h->rows_sampling[i].position = (uint64_t)b.positions[i] + 1;
    }
    return 1;
}

/* r:sampling(slot, {temperature=, top_k=, top_p=, min_p=, seed=}) sets how
 * the slot's rows are sampled by h:tokens() (README "Sampling", default
 * mode); r:sampling(slot) returns it to greedy. */
static int r_sampling(lua_State *L) {
    lua_replica *r = check_open(L, 1);
    int slot = check_slot(L, r, 2, "sampling");
    row_sampling *rs = &r->slot_sampling[slot];
    if (lua_isnoneornil(L, 3)) {
        rs->sampled = 0;
        return 0;
    }
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const known[] = {GPTOSS_SAMPLE_OPTIONS, NULL};
    gptoss_opt_known(L, 3, "replica:sampling", known);
    gptoss_sample_params p;
    gptoss_read_sample_params(L, 3, "replica:sampling", &p);
    if (p.mode != GPTOSS_SAMPLE_DEFAULT)
        return luaL_error(L, "replica:sampling: per-slot sampling has the default mode only; the "
                             "course sampler is one stream shared by all requests: use "
                             "gptoss.sampler{mode=\"course\"} on h:logits()");
    char err[GPTOSS_ERR_LEN];
    if (gptoss_sample_params_check(&p, err) != 0)
        return luaL_error(L, "replica:sampling: %s", err);
    rs->sampled = 1;
    rs->p = p;
    return 0;
}

static void push_stage(lua_State *L, const gptoss_stage *s) {
    gptoss_storage *st = malloc(sizeof *st);
    if (!st)
        luaL_error(L, "trace: out of host memory");
    st->refs = 1;
    st->dtype = s->is_int ? GPTOSS_I32 : GPTOSS_F32;
    st->count = (size_t)s->dims[0] * (size_t)(s->ndim == 2 ? s->dims[1] : 1);
    st->data = s->data; /* ownership moves to the tensor */
    gptoss_push_tensor(L, st, 0, s->ndim, s->dims);
    gptoss_storage_release(st);
}

/* r:trace(slot, token, pos): one row run like a step, every stage recorded */
static int r_trace(lua_State *L) {
    lua_replica *r = check_open(L, 1);
    int slot = check_slot(L, r, 2, "trace");
    int token = (int)luaL_checkinteger(L, 3);
    int pos = (int)luaL_checkinteger(L, 4);
    gptoss_batch b = {1, &slot, &pos, &token, 0};
    lua_getiuservalue(L, 1, 1);
    const gptoss_config *c = &gptoss_check_model(L, -1)->config;
    int n_layers = c->n_layers, vocab = c->vocab_size;
    lua_pop(L, 1);
    float *logits = lua_newuserdatauv(L, sizeof(float) * (size_t)vocab, 0);
    gptoss_trace tr = {0};
    char err[GPTOSS_ERR_LEN];
    if (r->gpu ? gptoss_gpu_trace(r->gpu, slot, token, pos, &tr, logits, err)
               : gptoss_golden_step(r->g, &b, logits, &tr, err)) {
        gptoss_trace_clear(&tr);
        return luaL_error(L, "%s", err);
    }
    if (tr.failed) {
        gptoss_trace_clear(&tr);
        return luaL_error(L, "trace: out of host memory while recording stages");
    }
    lua_createtable(L, 0, 4);
    lua_createtable(L, n_layers, 0);
    for (int l = 0; l < n_layers; l++) {
        lua_createtable(L, 0, 20);
        lua_rawseti(L, -2, l + 1);
    }
    lua_setfield(L, -2, "layers");
    int result = lua_gettop(L);
    /* stages move into tensors one by one; clear what is left afterwards */
    for (int i = 0; i < tr.n; i++) {
        gptoss_stage *s = &tr.stages[i];
        if (s->layer >= 0) {
            lua_getfield(L, result, "layers");
            lua_rawgeti(L, -1, s->layer + 1);
        } else {
            lua_pushvalue(L, result);
        }
        push_stage(L, s);
        s->data = NULL;
        lua_setfield(L, -2, s->name);
        lua_settop(L, result);
    }
    gptoss_trace_clear(&tr);
    return 1;
}

static int r_reset(lua_State *L) {
    lua_replica *r = check_open(L, 1);
    int slot = check_slot(L, r, 2, "reset");
    if (r->gpu)
        gptoss_gpu_reset(r->gpu, slot);
    else
        gptoss_golden_reset(r->g, slot);
    return 0;
}

static int r_length(lua_State *L) {
    lua_replica *r = check_open(L, 1);
    int slot = check_slot(L, r, 2, "length");
    lua_pushinteger(L, r->gpu ? gptoss_gpu_length(r->gpu, slot) : gptoss_golden_length(r->g, slot));
    return 1;
}

/* GPU steps still pending get their tokens before the device memory goes */
static int r_close(lua_State *L) {
    lua_replica *r = luaL_checkudata(L, 1, GPTOSS_REPLICA_MT);
    gptoss_golden_free(r->g);
    gptoss_gpu_free(r->gpu);
    r->g = NULL;
    r->gpu = NULL;
    return 0;
}

static void push_profile_row(void *ctx, const char *label, double seconds, long calls) {
    lua_State *L = ctx;
    lua_createtable(L, 0, 3);
    lua_pushstring(L, label);
    lua_setfield(L, -2, "label");
    lua_pushnumber(L, seconds);
    lua_setfield(L, -2, "seconds");
    lua_pushinteger(L, calls);
    lua_setfield(L, -2, "calls");
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

/* r:profile(true|false) switches per-kernel timing (GPU replicas; it waits
 * for the device after each step); r:profile() returns
 * { {label=, seconds=, calls=}, ... } in first-launch order. */
static int r_profile(lua_State *L) {
    lua_replica *r = check_open(L, 1);
    if (!r->gpu)
        return luaL_error(L, "profile: per-kernel timing is for GPU replicas");
    char err[GPTOSS_ERR_LEN];
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TBOOLEAN);
        if (gptoss_gpu_profile(r->gpu, lua_toboolean(L, 2), err))
            return luaL_error(L, "%s", err);
        return 0;
    }
    lua_newtable(L);
    gptoss_gpu_profile_read(r->gpu, push_profile_row, L);
    return 1;
}

static void set_bytes(lua_State *L, const char *field, uint64_t bytes) {
    lua_pushinteger(L, (lua_Integer)bytes);
    lua_setfield(L, -2, field);
}

static int gpu_getter(lua_State *L, gptoss_gpu *gpu, const char *k) {
    const gptoss_gpu_opts *o = gptoss_gpu_options(gpu);
    if (strcmp(k, "device") == 0) {
        lua_pushinteger(L, o->device + 1);
    } else if (strcmp(k, "rows") == 0) {
        lua_pushinteger(L, o->rows);
    } else if (strcmp(k, "chunk") == 0) {
        lua_pushinteger(L, o->chunk);
    } else if (strcmp(k, "memory") == 0) { /* device bytes */
        gptoss_gpu_memory mem;
        gptoss_gpu_memory_use(gpu, &mem);
        lua_createtable(L, 0, 6);
        set_bytes(L, "weights_fp32", mem.weights_fp32);
        set_bytes(L, "weights_bf16", mem.weights_bf16);
        set_bytes(L, "weights", mem.weights_fp32 + mem.weights_bf16);
        set_bytes(L, "kv", mem.kv);
        set_bytes(L, "scratch", mem.scratch);
        set_bytes(L, "total", mem.total);
    } else {
        return 0;
    }
    return 1;
}

static int r_getter(lua_State *L) {
    lua_replica *r = luaL_checkudata(L, 1, GPTOSS_REPLICA_MT);
    const char *k = lua_tostring(L, 2);
    if (!k)
        return 0;
    if (strcmp(k, "closed") == 0) {
        lua_pushboolean(L, r->g == NULL && r->gpu == NULL);
        return 1;
    }
    if (strcmp(k, "model") == 0) {
        lua_getiuservalue(L, 1, 1);
        return 1;
    }
    check_open(L, 1);
    if (strcmp(k, "slots") == 0 || strcmp(k, "ctx") == 0) {
        lua_pushinteger(L, k[0] == 's' ? r->slots : r->ctx);
        return 1;
    }
    if (strcmp(k, "weights") == 0 || strcmp(k, "kv") == 0) {
        lua_pushstring(L, dtype_modes[k[0] == 'w' ? r->weights_bf16 : r->kv_bf16]);
        return 1;
    }
    if (r->gpu)
        return gpu_getter(L, r->gpu, k);
    gptoss_golden *g = r->g;
    if (strcmp(k, "device") == 0) {
        lua_pushliteral(L, "cpu");
    } else if (strcmp(k, "threads") == 0) {
        lua_pushinteger(L, gptoss_golden_options(g)->threads);
    } else if (strcmp(k, "memory") == 0) {
        /* host bytes: the KV pool is the replica's own; weights are the model's, shared */
        lua_getiuservalue(L, 1, 1);
        gptoss_model *m = gptoss_check_model(L, -1);
        lua_pop(L, 1);
        uint64_t kv = gptoss_golden_kv_bytes(g), w = m->layout.total_bytes - GPTOSS_HEADER_BYTES;
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, (lua_Integer)kv);
        lua_setfield(L, -2, "kv");
        lua_pushinteger(L, (lua_Integer)w);
        lua_setfield(L, -2, "weights");
        lua_pushinteger(L, (lua_Integer)(kv + w));
        lua_setfield(L, -2, "total");
    } else {
        return 0;
    }
    return 1;
}

static int r_tostring(lua_State *L) {
    lua_replica *r = luaL_checkudata(L, 1, GPTOSS_REPLICA_MT);
    if (!r->g && !r->gpu) {
        lua_pushliteral(L, "gptoss.replica(closed)");
        return 1;
    }
    if (r->gpu) {
        const gptoss_gpu_opts *o = gptoss_gpu_options(r->gpu);
        lua_pushfstring(L, "gptoss.replica(GPU %d, %d slots x %d positions, weights %s, kv %s, "
                           "%d rows per step)", o->device + 1, o->slots, o->ctx,
                        dtype_modes[o->weights_bf16], dtype_modes[o->kv_bf16], o->rows);
        return 1;
    }
    const gptoss_golden_opts *o = gptoss_golden_options(r->g);
    lua_pushfstring(L, "gptoss.replica(cpu, %d slots x %d positions, weights %s, kv %s, %d threads)",
                    o->slots, o->ctx, dtype_modes[o->weights_bf16], dtype_modes[o->kv_bf16],
                    o->threads);
    return 1;
}

/* ---- step handle ---- */

static lua_step *check_step(lua_State *L, int idx) { return luaL_checkudata(L, idx, GPTOSS_STEP_MT); }

static int s_logits(lua_State *L) {
    lua_step *h = check_step(L, 1);
    int64_t shape[2] = {h->rows, h->vocab};
    if (!h->logits) { /* a GPU step taken without logits = true */
        if (!h->replica->gpu)
            return luaL_error(L, "step:logits: the replica is closed and this step was taken "
                                 "without logits = true");
        gptoss_storage *st = gptoss_storage_new(GPTOSS_F32, (size_t)h->rows * (size_t)h->vocab);
        if (!st)
            return luaL_error(L, "step:logits: out of host memory");
        char err[GPTOSS_ERR_LEN];
        if (gptoss_gpu_logits(h->replica->gpu, &h->result, st->data, err)) {
            gptoss_storage_release(st);
            return luaL_error(L, "%s", err);
        }
        h->logits = st;
    }
    gptoss_push_tensor(L, h->logits, 0, 2, shape);
    return 1;
}

static int gpu_tokens(lua_State *L, lua_step *h) {
    char err[GPTOSS_ERR_LEN];
    if (!h->result.delivered && gptoss_gpu_wait(h->replica->gpu, &h->result, err))
        return luaL_error(L, "%s", err);
    if (h->result.bad_row >= 0)
        return luaL_error(L, "step:tokens: row %d: a logit is NaN or +inf, or every logit is -inf",
                          h->result.bad_row + 1);
    lua_createtable(L, h->rows, 0);
    for (int r = 0; r < h->rows; r++) {
        lua_pushinteger(L, h->tokens[r]);
        lua_rawseti(L, -2, r + 1);
    }
    return 1;
}

/* ids per row: greedy (the course's argmax: first maximum), or drawn as the
 * row's slot was set by r:sampling when the step was taken */
static int s_tokens(lua_State *L) {
    lua_step *h = check_step(L, 1);
    if (h->replica)
        return gpu_tokens(L, h);
    lua_createtable(L, h->rows, 0);
    const float *data = h->logits->data;
    char err[GPTOSS_ERR_LEN];
    for (int r = 0; r < h->rows; r++) {
        const float *row = data + (size_t)r * h->vocab;
        const row_sampling *rs = h->rows_sampling ? &h->rows_sampling[r] : NULL;
        int id;
        if (rs && rs->sampled) {
            if (!h->scratch->s && !(h->scratch->s = gptoss_sampler_new(&rs->p, err)))
                return luaL_error(L, "step:tokens: %s", err);
            id = gptoss_sample_with(h->scratch->s, &rs->p, row, h->vocab, rs->position, err);
            if (id < 0)
                return luaL_error(L, "step:tokens: row %d: %s", r + 1, err);
        } else {
            id = (int)gptoss_argmax(GPTOSS_F32, row, (size_t)h->vocab);
        }
        lua_pushinteger(L, id);
        lua_rawseti(L, -2, r + 1);
    }
    return 1;
}

static int s_getter(lua_State *L) {
    lua_step *h = check_step(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k && strcmp(k, "rows") == 0) {
        lua_pushinteger(L, h->rows);
        return 1;
    }
    return 0;
}

static int s_gc(lua_State *L) {
    lua_step *h = check_step(L, 1);
    if (h->replica && h->replica->gpu && !h->result.delivered)
        gptoss_gpu_forget(h->replica->gpu, &h->result);
    gptoss_storage_release(h->logits);
    h->logits = NULL;
    return 0;
}

void gptoss_open_replica(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"step", r_step},     {"trace", r_trace}, {"reset", r_reset},       {"length", r_length},
        {"close", r_close},   {"sampling", r_sampling}, {"profile", r_profile}, {NULL, NULL},
    };
    gptoss_new_class(L, GPTOSS_REPLICA_MT, methods, r_getter);
    luaL_getmetatable(L, GPTOSS_REPLICA_MT);
    lua_pushcfunction(L, r_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, r_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, r_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pop(L, 1);

    static const luaL_Reg box_meta[] = {{"__gc", box_gc}, {NULL, NULL}};
    luaL_newmetatable(L, SAMPLER_BOX_MT);
    luaL_setfuncs(L, box_meta, 0);
    lua_pop(L, 1);

    static const luaL_Reg step_methods[] = {{"logits", s_logits}, {"tokens", s_tokens}, {NULL, NULL}};
    gptoss_new_class(L, GPTOSS_STEP_MT, step_methods, s_getter);
    luaL_getmetatable(L, GPTOSS_STEP_MT);
    lua_pushcfunction(L, s_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
}
