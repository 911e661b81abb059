/* gptoss.replica: a model placed on a device with a pool of KV slots, run by
 * an engine (src/core/engine.h: the CPU golden engine or the GPU engine),
 * and gptoss.step: the handle of one step. This file speaks to the engine
 * interface only: it reads Lua arguments, names the Lua function in errors
 * and turns results into Lua values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/device_contract.h" /* gptoss_fed_token */
#include "../core/trace.h"
#include "../hip/backend.h"
#include "binding.h"

typedef struct {
    gptoss_engine *e; /* NULL once closed */
} lua_replica;

/* user values: 1 the replica (which keeps the model alive) */
typedef struct {
    gptoss_result res;
    lua_replica *replica;
    int collected; /* its finaliser ran (a later finaliser may still reach it) */
} lua_step;

/* in gptoss_weights order */
static const char *const weight_modes[] = {"fp32", "bf16", "mxfp4", NULL};
static const char *const kv_modes[] = {"fp32", "bf16", NULL};

/* Raises "<fn>: <message>". A row whose token could not be drawn is always
 * the failure of a step's tokens, also when a step fed by it finds out. */
static int raise_status(lua_State *L, const char *fn, gptoss_status s, const char *err) {
    return luaL_error(L, "%s: %s", s == GPTOSS_E_DRAW ? "step:tokens" : fn, err);
}

static lua_replica *check_replica(lua_State *L, int idx) {
    return luaL_checkudata(L, idx, GPTOSS_REPLICA_MT);
}

/* the replica's engine; raises once it is closed */
static gptoss_engine *check_open(lua_State *L, int idx) {
    lua_replica *r = check_replica(L, idx);
    if (!r->e)
        luaL_error(L, "replica: used after close");
    return r->e;
}

/* 0-based slot from a 1-based argument, range-checked */
static int check_slot(lua_State *L, gptoss_engine *e, int idx, const char *fn) {
    lua_Integer s = luaL_checkinteger(L, idx);
    int slots = gptoss_engine_options(e)->slots;
    if (s < 1 || s > slots)
        luaL_error(L, "%s: slot %I is out of range 1..%d", fn, s, slots);
    return (int)s - 1;
}

/* ---- options: model:replica{...} and model:replica_bytes{...} ---- */

/* {device="cpu"|N, slots=1, ctx=seq_len, weights="fp32", kv="fp32", threads (CPU),
 *  rows, chunk (GPU), on_progress}: the options at idx, ranges checked; each engine says
 *  which it takes and fills in its defaults. check_device: N must be a visible GPU.
 *  on_progress is only checked here (replica_bytes has no use for it). */
static gptoss_engine_opts read_opts(lua_State *L, int idx, const char *fn, const gptoss_model *m,
                                    int check_device) {
    if (lua_isnoneornil(L, idx)) {
        lua_newtable(L);
        lua_replace(L, idx);
    }
    luaL_checktype(L, idx, LUA_TTABLE);
    static const char *const known[] = {"device", "slots", "ctx",  "weights",     "kv",
                                        "threads", "rows",  "chunk", "on_progress", NULL};
    gptoss_opt_known(L, idx, fn, known);
    lua_getfield(L, idx, "on_progress");
    if (!lua_isnil(L, -1) && !lua_isfunction(L, -1))
        luaL_error(L, "%s: on_progress must be a function(done, total) (got %s)", fn, luaL_typename(L, -1));
    lua_pop(L, 1);
    gptoss_engine_opts o = {.device = -1, .slots = 1, .ctx = m->config.seq_len, .threads = -1};
    lua_getfield(L, idx, "device");
    if (lua_isinteger(L, -1)) {
        lua_Integer dev = lua_tointeger(L, -1);
        if (check_device)
            o.device = gptoss_check_device(L, dev, fn);
        else if (dev < 1 || dev > INT32_MAX)
            luaL_error(L, "%s: device %I is not a GPU number", fn, dev);
        else
            o.device = (int)dev - 1;
    } else if (!lua_isnil(L, -1) &&
               !(lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "cpu") == 0)) {
        luaL_error(L, "%s: device must be \"cpu\" or a GPU number (got %s)", fn, luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    lua_Integer slots = gptoss_opt_integer(L, idx, fn, "slots", o.slots);
    lua_Integer ctx = gptoss_opt_integer(L, idx, fn, "ctx", o.ctx);
    lua_Integer threads = gptoss_opt_integer(L, idx, fn, "threads", 0);
    lua_Integer rows = gptoss_opt_integer(L, idx, fn, "rows", o.rows);
    lua_Integer chunk = gptoss_opt_integer(L, idx, fn, "chunk", o.chunk);
    if (slots < 1 || slots > 1 << 20)
        luaL_error(L, "%s: slots = %I must be in 1..%d", fn, slots, 1 << 20);
    if (ctx < 1 || ctx > INT32_MAX / 2)
        luaL_error(L, "%s: ctx = %I must be in 1..%d", fn, ctx, INT32_MAX / 2);
    lua_getfield(L, idx, "threads");
    int threads_given = !lua_isnil(L, -1);
    lua_getfield(L, idx, "rows");
    int rows_given = !lua_isnil(L, -1);
    lua_getfield(L, idx, "chunk");
    int chunk_given = !lua_isnil(L, -1);
    lua_pop(L, 3);
    if (threads_given && (threads < 0 || threads > 1024))
        luaL_error(L, "%s: threads = %I must be in 0..1024 (0: all CPUs)", fn, threads);
    if (rows_given && (rows < 1 || rows > 1 << 20))
        luaL_error(L, "%s: rows = %I must be in 1..%d", fn, rows, 1 << 20);
    if (chunk_given && (chunk < 1 || chunk > 1 << 20))
        luaL_error(L, "%s: chunk = %I must be in 1..rows", fn, chunk);
    o.slots = (int)slots;
    o.ctx = (int)ctx;
    o.threads = threads_given ? (int)threads : -1;
    o.rows = (int)rows;
    o.chunk = (int)chunk;
    o.weights = gptoss_opt_choice(L, idx, fn, "weights", weight_modes, GPTOSS_WEIGHTS_UNSET);
    o.kv_bf16 = gptoss_opt_choice(L, idx, fn, "kv", kv_modes, -1);
    return o;
}

static void push_memory(lua_State *L, const gptoss_memory *mem) {
    lua_createtable(L, 0, mem->n + 1);
    for (int i = 0; i < mem->n; i++) {
        lua_pushinteger(L, (lua_Integer)mem->part[i].bytes);
        lua_setfield(L, -2, mem->part[i].name);
    }
}

/* opts.on_progress of model:replica, called from the engine; the function is at
 * stack index fn. An error inside it stops the engine's work; the error value is
 * left on the stack top for the binding to raise once the engine has undone it. */
typedef struct {
    lua_State *L;
    int fn;
    int failed;
} replica_progress;

static int call_progress(void *arg, uint64_t done, uint64_t total) {
    replica_progress *p = arg;
    lua_State *L = p->L; /* 3 slots: within the LUA_MINSTACK a C function starts with */
    lua_pushvalue(L, p->fn);
    lua_pushinteger(L, (lua_Integer)done);
    lua_pushinteger(L, (lua_Integer)total);
    p->failed = lua_pcall(L, 2, 0, 0) != LUA_OK;
    return p->failed;
}

/* model:replica{...} */
int gptoss_lua_replica(lua_State *L) {
    gptoss_model *m = gptoss_check_model(L, 1);
    lua_settop(L, 2);
    gptoss_engine_opts o = read_opts(L, 2, "replica", m, 1);
    lua_getfield(L, 2, "on_progress"); /* index 3: the function, or nil */
    replica_progress rp = {L, 3, 0};
    gptoss_progress progress = {call_progress, &rp};
    lua_replica *r = lua_newuserdatauv(L, sizeof *r, 1);
    r->e = NULL;
    luaL_setmetatable(L, GPTOSS_REPLICA_MT);
    lua_pushvalue(L, 1); /* the replica keeps its model alive */
    lua_setiuservalue(L, -2, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_new(gptoss_engine_for(o.device), m, &o, lua_isnil(L, 3) ? NULL : &progress,
                                        &r->e, err);
    if (rp.failed)
        return lua_error(L); /* the callback's error, on the stack top */
    if (s)
        return raise_status(L, "replica", s, err);
    return 1;
}

/* model:replica_bytes{...} -> the bytes a replica of these options would
 * take (as r.memory reports them) and headroom, what the device keeps free
 * besides; device = N plans a GPU replica whether or not GPU N is here */
int gptoss_lua_replica_bytes(lua_State *L) {
    gptoss_model *m = gptoss_check_model(L, 1);
    lua_settop(L, 2);
    gptoss_engine_opts o = read_opts(L, 2, "replica_bytes", m, 0);
    gptoss_memory mem;
    uint64_t headroom;
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_plan(gptoss_engine_for(o.device), m, &o, &mem, &headroom, err);
    if (s)
        return raise_status(L, "replica_bytes", s, err);
    push_memory(L, &mem);
    lua_pushinteger(L, (lua_Integer)headroom);
    lua_setfield(L, -2, "headroom");
    return 1;
}

/* ---- r:step ---- */

/* #t of the list field at the top of the stack, as the engine's int count
 * (a __len may say anything) */
static int list_length(lua_State *L, const char *field) {
    lua_Integer length = luaL_len(L, -1);
    if (length < 0 || length > INT32_MAX)
        luaL_error(L, "step: %s has length %I, outside 0..%d", field, length, INT32_MAX);
    return (int)length;
}

/* reads t[field] as an array of n integers (n < 0: sets n), left on the stack */
static int *int_array(lua_State *L, int tbl, const char *field, int *n) {
    lua_getfield(L, tbl, field);
    if (!lua_istable(L, -1))
        luaL_error(L, "step: %s must be a table of integers (got %s)", field, luaL_typename(L, -1));
    int len = list_length(L, field);
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

/* The value at the top of the stack (field of the batch) as the step feeding
 * this batch: a step of this replica, and its latest. */
static lua_step *feeding_step(lua_State *L, const lua_replica *r, const char *field) {
    lua_step *h = luaL_testudata(L, -1, GPTOSS_STEP_MT);
    if (!h)
        luaL_error(L, "step: %s must be a step of this replica (got %s)", field, luaL_typename(L, -1));
    if (h->replica != r)
        luaL_error(L, "step: %s is a step of another replica", field);
    uint64_t latest = gptoss_engine_steps(r->e);
    if (h->res.seq != latest)
        luaL_error(L, "step: %s is step %I of this replica, not its latest (%I): only the latest "
                      "feeds the next", field, (lua_Integer)h->res.seq, (lua_Integer)latest);
    return h;
}

/* The batch of the table at tbl (buffers left on the stack) and the step
 * feeding it, or NULL. tokens = h: row i takes the token h drew for its row
 * i (h of as many rows); from = h with a table of tokens: a token -j takes
 * the one h drew for its row j (1-based), passed on as the core's fed
 * token. */
static lua_step *read_batch(lua_State *L, int tbl, const lua_replica *r, gptoss_batch *b) {
    luaL_checktype(L, tbl, LUA_TTABLE);
    static const char *const known[] = {"slots", "positions", "tokens", "from", "logits", NULL};
    gptoss_opt_known(L, tbl, "step", known);
    int n = -1;
    int *slots = int_array(L, tbl, "slots", &n);
    b->positions = int_array(L, tbl, "positions", &n);
    lua_step *fed_by = NULL;
    lua_getfield(L, tbl, "tokens");
    if (luaL_testudata(L, -1, GPTOSS_STEP_MT)) {
        fed_by = feeding_step(L, r, "tokens");
        if (fed_by->res.rows != n)
            luaL_error(L, "step: tokens is a step of %d rows; this batch has %d", fed_by->res.rows, n);
        lua_getfield(L, tbl, "from");
        if (!lua_isnil(L, -1))
            luaL_error(L, "step: from is for a table of tokens; tokens = h already names the feeding step");
        lua_pop(L, 2);
        int *tokens = lua_newuserdatauv(L, sizeof(int) * (size_t)(n ? n : 1), 0);
        for (int i = 0; i < n; i++)
            tokens[i] = gptoss_fed_token(i);
        b->tokens = tokens;
    } else {
        if (!lua_istable(L, -1))
            luaL_error(L, "step: tokens must be a table of integers or the replica's latest step (got %s)",
                       luaL_typename(L, -1));
        lua_pop(L, 1);
        int *tokens = int_array(L, tbl, "tokens", &n);
        lua_getfield(L, tbl, "from");
        if (!lua_isnil(L, -1)) {
            fed_by = feeding_step(L, r, "from");
            for (int i = 0; i < n; i++) {
                if (tokens[i] >= 0)
                    continue;
                lua_Integer row = -(lua_Integer)tokens[i]; /* not -tokens[i]: INT32_MIN has no negation */
                if (row > fed_by->res.rows)
                    luaL_error(L, "step: tokens[%d] = %d refers to row %I of from, a step of %d rows", i + 1,
                               tokens[i], row, fed_by->res.rows);
                tokens[i] = gptoss_fed_token((int)row - 1);
            }
        }
        lua_pop(L, 1);
        b->tokens = tokens;
    }
    for (int i = 0; i < n; i++)
        slots[i]--; /* 1-based in Lua */
    b->slots = slots;
    b->n = n;
    b->fed_rows = 0;
    return fed_by;
}

/* The step's logits option at tbl into q: false/nil (keep none), true
 * (every row) or a table of 1-based rows, kept 0-based in a userdata left
 * on the stack. */
static void read_keep(lua_State *L, int tbl, gptoss_step_request *q) {
    lua_getfield(L, tbl, "logits");
    q->keep = NULL;
    q->n_keep = 0;
    q->keep_logits = lua_toboolean(L, -1);
    if (lua_isnil(L, -1) || lua_isboolean(L, -1))
        return;
    if (!lua_istable(L, -1))
        luaL_error(L, "step: logits must be true, false or a table of row numbers (got %s)", luaL_typename(L, -1));
    int len = list_length(L, "logits");
    int *rows = lua_newuserdatauv(L, sizeof(int) * (size_t)(len ? len : 1), 0);
    for (int i = 1; i <= len; i++) {
        int ok;
        lua_geti(L, -2, i);
        lua_Integer row = lua_tointegerx(L, -1, &ok);
        if (!ok || row < INT32_MIN + 1 || row > INT32_MAX) /* the engine checks the batch's range */
            luaL_error(L, "step: logits[%d] must be a row number (got %s)", i, luaL_tolstring(L, -1, NULL));
        rows[i - 1] = (int)row - 1;
        lua_pop(L, 1);
    }
    q->keep = rows;
    q->n_keep = len;
}

/* r:step{slots=, positions=, tokens= (ids, or the latest step) [, from=, logits=true|{rows}]} */
static int replica_step(lua_State *L) {
    gptoss_engine *e = check_open(L, 1);
    lua_replica *r = lua_touserdata(L, 1);
    gptoss_batch b;
    lua_step *fed_by = read_batch(L, 2, r, &b);
    gptoss_step_request q = {.batch = &b, .fed_by = fed_by ? &fed_by->res : NULL};
    read_keep(L, 2, &q);
    lua_step *h = lua_newuserdatauv(L, sizeof *h, 1);
    memset(h, 0, sizeof *h);
    h->res.delivered = 1; /* nothing to forget until the engine has it */
    h->replica = r;
    luaL_setmetatable(L, GPTOSS_STEP_MT);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_step(e, &q, &h->res, err);
    if (s)
        return raise_status(L, "step", s, err);
    return 1;
}

/* ---- the replica's other methods ---- */

/* r:sampling(slot, {temperature=, top_k=, top_p=, min_p=, seed=, logit_bias=,
 * logprobs=}) sets how the slot's rows draw their tokens (the default mode);
 * r:sampling(slot) makes it greedy again, without bias or logprobs. */
static int replica_sampling(lua_State *L) {
    gptoss_engine *e = check_open(L, 1);
    int slot = check_slot(L, e, 2, "sampling");
    char err[GPTOSS_ERR_LEN];
    gptoss_status st;
    if (lua_isnoneornil(L, 3)) {
        if ((st = gptoss_engine_sampling(e, slot, NULL, err)))
            return raise_status(L, "replica:sampling", st, err);
        return 0;
    }
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const known[] = {GPTOSS_SAMPLE_OPTIONS, NULL};
    gptoss_opt_known(L, 3, "replica:sampling", known);
    gptoss_slot_sampling s;
    gptoss_read_sample_params(L, 3, "replica:sampling", &s.params);
    if (s.params.mode != GPTOSS_SAMPLE_DEFAULT)
        return luaL_error(L, "replica:sampling: per-slot sampling has the default mode only; the "
                             "course sampler is one stream shared by all requests: use "
                             "gptoss.sampler{mode=\"course\"} on h:logits()");
    s.logprobs = gptoss_read_logprobs(L, 3, "replica:sampling");
    lua_getiuservalue(L, 1, 1);
    int vocab = gptoss_check_model(L, -1)->config.vocab_size;
    lua_pop(L, 1);
    s.bias = gptoss_read_logit_bias(L, 3, "replica:sampling", vocab, &s.n_bias);
    if ((st = gptoss_engine_sampling(e, slot, &s, err)))
        return raise_status(L, "replica:sampling", st, err);
    return 0;
}

/* r:fork(from, to [, length]): slot to holds the first length positions of
 * slot from (default: all it holds), as if prefilled with their tokens */
static int replica_fork(lua_State *L) {
    gptoss_engine *e = check_open(L, 1);
    int from = check_slot(L, e, 2, "fork"), to = check_slot(L, e, 3, "fork");
    int length = -1;
    if (!lua_isnoneornil(L, 4)) {
        lua_Integer n = luaL_checkinteger(L, 4);
        if (n < 0 || n > INT32_MAX)
            return luaL_error(L, "fork: length %I must be >= 0", n);
        length = (int)n;
    }
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_fork(e, from, to, length, err);
    if (s)
        return raise_status(L, "fork", s, err);
    return 0;
}

/* pushes stage s as a tensor, which takes over its data */
static void push_stage(lua_State *L, gptoss_stage *s) {
    gptoss_storage *st = malloc(sizeof *st);
    if (!st)
        luaL_error(L, "trace: out of host memory");
    st->refs = 1;
    st->dtype = gptoss_stage_is_int(s->id) ? GPTOSS_I32 : GPTOSS_F32;
    st->count = (size_t)s->dims[0] * (size_t)(s->ndim == 2 ? s->dims[1] : 1);
    st->data = s->data;
    s->data = NULL;
    gptoss_push_tensor(L, st, 0, s->ndim, s->dims);
    gptoss_storage_release(st);
}

/* The trace's stages as {embedding=, final_norm=, logits=, layers = {{attn_norm=,
 * ...}, ...}}; clears the trace. */
static void push_trace(lua_State *L, gptoss_trace *tr, int n_layers) {
    lua_createtable(L, 0, 4);
    int result = lua_gettop(L);
    lua_createtable(L, n_layers, 0);
    for (int l = 0; l < n_layers; l++) {
        lua_createtable(L, 0, GPTOSS_N_STAGES);
        lua_rawseti(L, -2, l + 1);
    }
    lua_setfield(L, result, "layers");
    for (int i = 0; i < tr->n; i++) {
        gptoss_stage *s = &tr->stages[i];
        if (s->layer >= 0) {
            lua_getfield(L, result, "layers");
            lua_rawgeti(L, -1, s->layer + 1);
        } else {
            lua_pushvalue(L, result);
        }
        push_stage(L, s);
        lua_setfield(L, -2, gptoss_stage_names[s->id]);
        lua_settop(L, result);
    }
    gptoss_trace_clear(tr);
}

/* r:trace(slot, token, pos): one row run like a step, every stage recorded */
static int replica_trace(lua_State *L) {
    gptoss_engine *e = check_open(L, 1);
    int slot = check_slot(L, e, 2, "trace");
    int token = gptoss_check_int(L, 3, "trace", "token");
    int pos = gptoss_check_int(L, 4, "trace", "position");
    lua_getiuservalue(L, 1, 1);
    const gptoss_config *c = &gptoss_check_model(L, -1)->config;
    lua_pop(L, 1);
    float *logits = lua_newuserdatauv(L, sizeof(float) * (size_t)c->vocab_size, 0);
    gptoss_trace tr = {0};
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_trace(e, slot, token, pos, &tr, logits, err);
    if (!s && tr.failed)
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory while recording stages");
    if (s) {
        gptoss_trace_clear(&tr);
        return raise_status(L, "trace", s, err);
    }
    push_trace(L, &tr, c->n_layers);
    return 1;
}

static int replica_reset(lua_State *L) {
    gptoss_engine *e = check_open(L, 1);
    gptoss_engine_reset(e, check_slot(L, e, 2, "reset"));
    return 0;
}

static int replica_length(lua_State *L) {
    gptoss_engine *e = check_open(L, 1);
    lua_pushinteger(L, gptoss_engine_length(e, check_slot(L, e, 2, "length")));
    return 1;
}

/* pending steps get their tokens before the engine goes */
static int replica_close(lua_State *L) {
    lua_replica *r = check_replica(L, 1);
    gptoss_engine_free(r->e);
    r->e = NULL;
    return 0;
}

static void push_profile_row(void *arg, const char *label, double seconds, long calls) {
    lua_State *L = arg;
    lua_createtable(L, 0, 3);
    lua_pushstring(L, label);
    lua_setfield(L, -2, "label");
    lua_pushnumber(L, seconds);
    lua_setfield(L, -2, "seconds");
    lua_pushinteger(L, calls);
    lua_setfield(L, -2, "calls");
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

/* r:profile(true|false) switches per-kernel timing (each step then waits for
 * the device); r:profile() returns { {label=, seconds=, calls=}, ... } in
 * first-launch order. */
static int replica_profile(lua_State *L) {
    gptoss_engine *e = check_open(L, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TBOOLEAN);
        if ((s = gptoss_engine_profile(e, lua_toboolean(L, 2), err)))
            return raise_status(L, "profile", s, err);
        return 0;
    }
    lua_newtable(L);
    if ((s = gptoss_engine_profile_read(e, push_profile_row, L, err)))
        return raise_status(L, "profile", s, err);
    return 1;
}

static int replica_get(lua_State *L) {
    lua_replica *r = check_replica(L, 1);
    const char *k = lua_tostring(L, 2);
    if (!k)
        return 0;
    if (strcmp(k, "closed") == 0) {
        lua_pushboolean(L, r->e == NULL);
        return 1;
    }
    if (strcmp(k, "model") == 0) {
        lua_getiuservalue(L, 1, 1);
        return 1;
    }
    const gptoss_engine_opts *o = gptoss_engine_options(check_open(L, 1));
    /* each engine's own options are set (> 0) on its replicas only */
    if (strcmp(k, "device") == 0) {
        if (o->device < 0)
            lua_pushliteral(L, "cpu");
        else
            lua_pushinteger(L, o->device + 1);
    } else if (strcmp(k, "slots") == 0) {
        lua_pushinteger(L, o->slots);
    } else if (strcmp(k, "ctx") == 0) {
        lua_pushinteger(L, o->ctx);
    } else if (strcmp(k, "weights") == 0) {
        lua_pushstring(L, weight_modes[o->weights]);
    } else if (strcmp(k, "kv") == 0) {
        lua_pushstring(L, kv_modes[o->kv_bf16]);
    } else if (strcmp(k, "threads") == 0 && o->threads > 0) {
        lua_pushinteger(L, o->threads);
    } else if (strcmp(k, "rows") == 0 && o->rows > 0) {
        lua_pushinteger(L, o->rows);
    } else if (strcmp(k, "chunk") == 0 && o->chunk > 0) {
        lua_pushinteger(L, o->chunk);
    } else if (strcmp(k, "memory") == 0) {
        gptoss_memory mem;
        gptoss_engine_memory(r->e, &mem);
        push_memory(L, &mem);
    } else {
        return 0;
    }
    return 1;
}

static int replica_tostring(lua_State *L) {
    lua_replica *r = check_replica(L, 1);
    if (!r->e) {
        lua_pushliteral(L, "gptoss.replica(closed)");
        return 1;
    }
    const gptoss_engine_opts *o = gptoss_engine_options(r->e);
    char where[32], bound[48];
    if (o->device < 0)
        snprintf(where, sizeof where, "cpu");
    else
        snprintf(where, sizeof where, "GPU %d", o->device + 1);
    if (o->threads > 0)
        snprintf(bound, sizeof bound, "%d threads", o->threads);
    else
        snprintf(bound, sizeof bound, "%d rows per step", o->rows);
    lua_pushfstring(L, "gptoss.replica(%s, %d slots x %d positions, weights %s, kv %s, %s)", where, o->slots,
                    o->ctx, weight_modes[o->weights], kv_modes[o->kv_bf16], bound);
    return 1;
}

/* ---- step handle ---- */

static lua_step *check_step(lua_State *L, int idx) {
    lua_step *h = luaL_checkudata(L, idx, GPTOSS_STEP_MT);
    if (h->collected)
        luaL_error(L, "step: used after it was garbage-collected");
    return h;
}

/* h:logits() -> host tensor {rows, vocab} */
static int step_logits(lua_State *L) {
    lua_step *h = check_step(L, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_logits(h->replica->e, &h->res, err);
    if (s == GPTOSS_E_STATE) /* gone from the device: how to keep them next time */
        return luaL_error(L, "step:logits: %s; read them before the next step, or pass logits = true "
                             "to r:step", err);
    if (s)
        return raise_status(L, "step:logits", s, err);
    int64_t shape[2] = {h->res.logits_rows, h->res.vocab};
    gptoss_push_tensor(L, h->res.logits, 0, 2, shape);
    return 1;
}

/* The step at idx with its tokens in, waiting for them; raises (as fn) where
 * a row could not be drawn. */
static lua_step *check_delivered(lua_State *L, int idx, const char *fn) {
    lua_step *h = check_step(L, idx);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_tokens(h->replica->e, &h->res, err);
    if (s)
        raise_status(L, fn, s, err);
    return h;
}

/* h:logprobs() -> per row {id =, logprob =, top = {{id =, logprob =}, ...}}
 * where the row's slot asked (r:sampling's logprobs), false elsewhere */
static int step_logprobs(lua_State *L) {
    if (!check_step(L, 1)->res.logprobs)
        return luaL_error(L, "step:logprobs: no row of this step asked for logprobs (r:sampling(slot, "
                             "{logprobs = n}) before the step)");
    lua_step *h = check_delivered(L, 1, "step:logprobs");
    lua_createtable(L, h->res.rows, 0);
    for (int i = 0; i < h->res.rows; i++) {
        const gptoss_row_logprobs *lp = &h->res.logprobs[i];
        if (lp->n_top < 0) {
            lua_pushboolean(L, 0);
        } else {
            lua_createtable(L, 0, 3);
            lua_pushinteger(L, h->res.tokens[i]);
            lua_setfield(L, -2, "id");
            lua_pushnumber(L, lp->logprob);
            lua_setfield(L, -2, "logprob");
            gptoss_push_top_logprobs(L, lp->top_id, lp->top_logprob, lp->n_top);
            lua_setfield(L, -2, "top");
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* h:tokens() -> the id each row drew: greedy (the first maximum, as the
 * course's argmax) or as its slot's sampling was when the step was taken */
static int step_tokens(lua_State *L) {
    lua_step *h = check_delivered(L, 1, "step:tokens");
    lua_createtable(L, h->res.rows, 0);
    for (int i = 0; i < h->res.rows; i++) {
        lua_pushinteger(L, h->res.tokens[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int step_get(lua_State *L) {
    lua_step *h = check_step(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k && strcmp(k, "rows") == 0) {
        lua_pushinteger(L, h->res.rows);
        return 1;
    }
    return 0;
}

static int step_tostring(lua_State *L) {
    lua_step *h = check_step(L, 1);
    lua_pushfstring(L, "gptoss.step(%d rows, step %I of its replica, tokens %s%s)", h->res.rows,
                    (lua_Integer)h->res.seq, h->res.delivered ? "ready" : "pending",
                    h->res.logits ? ", logits on the host" : "");
    return 1;
}

static int step_gc(lua_State *L) {
    lua_step *h = luaL_checkudata(L, 1, GPTOSS_STEP_MT);
    if (!h->collected)
        gptoss_result_release(h->replica ? h->replica->e : NULL, &h->res);
    h->collected = 1;
    return 0;
}

/* gptoss.core.trace_stages() -> { {name=, per_layer=}, ... } in forward order */
int gptoss_lua_trace_stages(lua_State *L) {
    lua_createtable(L, GPTOSS_N_STAGES, 0);
    for (int i = 0; i < GPTOSS_N_STAGES; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, gptoss_stage_names[i]);
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, gptoss_stage_per_layer((gptoss_stage_id)i));
        lua_setfield(L, -2, "per_layer");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

void gptoss_open_replica(lua_State *L) {
    static const luaL_Reg replica_methods[] = {
        {"step", replica_step},         {"trace", replica_trace},   {"reset", replica_reset},
        {"length", replica_length},     {"close", replica_close},   {"sampling", replica_sampling},
        {"profile", replica_profile},   {"fork", replica_fork},     {NULL, NULL},
    };
    static const luaL_Reg replica_meta[] = {
        {"__gc", replica_close}, {"__close", replica_close}, {"__tostring", replica_tostring}, {NULL, NULL},
    };
    static const gptoss_lua_class_def replica = {GPTOSS_REPLICA_MT, replica_methods, replica_get, replica_meta};
    gptoss_lua_class(L, &replica);

    static const luaL_Reg step_methods[] = {
        {"logits", step_logits}, {"tokens", step_tokens}, {"logprobs", step_logprobs}, {NULL, NULL}};
    static const luaL_Reg step_meta[] = {{"__gc", step_gc}, {"__tostring", step_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def step = {GPTOSS_STEP_MT, step_methods, step_get, step_meta};
    gptoss_lua_class(L, &step);
}
