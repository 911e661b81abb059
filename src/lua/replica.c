/* gptoss.replica: a model placed on a device with a pool of KV slots, run by
 * an engine (src/core/engine.h: the CPU golden engine or the GPU engine):
 * model:replica and its options, and the replica's methods but r:step
 * (step.c), r:trace (trace.c), r:sampling and r:check_sampling
 * (sampler.c). The binding speaks to the engine interface only: it reads
 * Lua arguments, names the Lua function in errors and turns results into
 * Lua values. */
#include <stdio.h>
#include <string.h>

#include "../hip/backend.h"
#include "binding.h"

/* in gptoss_weights order */
/* the weights option's choices: the format table's names, in its order */
static const char *weight_names[GPTOSS_N_WEIGHT_FORMATS + 1];
/* the kv option's choices, the index its kv_bf16 (gptoss.kv_formats() lists them) */
static const char *const kv_modes[] = {"fp32", "bf16", NULL};

int gptoss_raise_status(lua_State *L, const char *fn, gptoss_status s, const char *err) {
    return luaL_error(L, "%s: %s", s == GPTOSS_E_DRAW ? "step:tokens" : fn, err);
}

gptoss_engine *gptoss_check_engine(lua_State *L, int idx) {
    return ((lua_replica *)gptoss_lua_check(L, idx, GPTOSS_REPLICA_MT, NULL))->e;
}

int gptoss_check_slot(lua_State *L, gptoss_engine *e, int idx, const char *fn) {
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
 *  on_progress, checked, is left on the stack top (replica_bytes has no use for it). The
 *  model's seq_len comes as a number: reading the table runs its metamethods, which may
 *  end the model object's life. */
static gptoss_engine_opts read_opts(lua_State *L, int idx, const char *fn, int seq_len, int check_device) {
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
    gptoss_engine_opts o = {.device = -1, .slots = 1, .ctx = seq_len, .threads = -1};
    lua_getfield(L, idx, "device");
    if (lua_isinteger(L, -1)) {
        lua_Integer dev = lua_tointeger(L, -1);
        if (check_device)
            o.device = gptoss_check_device(L, dev, fn);
        else if (dev < 0 || dev > INT32_MAX)
            luaL_error(L, "%s: device %I is not a GPU number (they count from 0)", fn, dev);
        else
            o.device = (int)dev;
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
    o.weights = gptoss_opt_choice(L, idx, fn, "weights", weight_names, GPTOSS_WEIGHTS_UNSET);
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

/* model:replica{...}. The engine holds its own reference to the model from
 * before on_progress runs, which may let go of the model object's. */
int gptoss_lua_replica(lua_State *L) {
    int seq_len = gptoss_check_model(L, 1)->config.seq_len;
    lua_settop(L, 2);
    gptoss_engine_opts o = read_opts(L, 2, "replica", seq_len, 1); /* index 3: on_progress, or nil */
    replica_progress rp = {L, 3, 0};
    gptoss_progress progress = {call_progress, &rp};
    lua_replica *r = gptoss_lua_new(L, GPTOSS_REPLICA_MT, sizeof *r, 1);
    lua_pushvalue(L, 1); /* r.model */
    lua_setiuservalue(L, -2, 1);
    gptoss_model *m = gptoss_check_model(L, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_new(gptoss_engine_for(o.device), m, &o, lua_isnil(L, 3) ? NULL : &progress,
                                        &r->e, err);
    if (rp.failed)
        return lua_error(L); /* the callback's error, on the stack top */
    if (s)
        return gptoss_raise_status(L, "replica", s, err);
    return 1;
}

/* model:replica_bytes{...} -> the bytes a replica of these options would
 * take (as r.memory reports them) and headroom, what the device keeps free
 * besides; device = N plans a GPU replica whether or not GPU N is here */
int gptoss_lua_replica_bytes(lua_State *L) {
    int seq_len = gptoss_check_model(L, 1)->config.seq_len;
    lua_settop(L, 2);
    gptoss_engine_opts o = read_opts(L, 2, "replica_bytes", seq_len, 0);
    gptoss_memory mem;
    uint64_t headroom;
    char err[GPTOSS_ERR_LEN];
    gptoss_model *m = gptoss_check_model(L, 1);
    gptoss_status s = gptoss_engine_plan(gptoss_engine_for(o.device), m, &o, &mem, &headroom, err);
    if (s)
        return gptoss_raise_status(L, "replica_bytes", s, err);
    push_memory(L, &mem);
    lua_pushinteger(L, (lua_Integer)headroom);
    lua_setfield(L, -2, "headroom");
    return 1;
}

/* ---- the replica's methods ---- */

/* r:fork(from, to [, length]): slot to holds the first length positions of
 * slot from (default: all it holds), as if prefilled with their tokens */
static int replica_fork(lua_State *L) {
    gptoss_engine *e = gptoss_check_engine(L, 1);
    int from = gptoss_check_slot(L, e, 2, "fork"), to = gptoss_check_slot(L, e, 3, "fork");
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
        return gptoss_raise_status(L, "fork", s, err);
    return 0;
}

static int replica_reset(lua_State *L) {
    gptoss_engine *e = gptoss_check_engine(L, 1);
    gptoss_engine_reset(e, gptoss_check_slot(L, e, 2, "reset"));
    return 0;
}

static int replica_length(lua_State *L) {
    gptoss_engine *e = gptoss_check_engine(L, 1);
    lua_pushinteger(L, gptoss_engine_length(e, gptoss_check_slot(L, e, 2, "length")));
    return 1;
}

/* r:rewind_limit(slot): the lowest position above 0 the slot can go back to
 * (a GPU slot past its windowed rings), 0 for any */
static int replica_rewind_limit(lua_State *L) {
    gptoss_engine *e = gptoss_check_engine(L, 1);
    lua_pushinteger(L, gptoss_engine_rewind_limit(e, gptoss_check_slot(L, e, 2, "rewind_limit")));
    return 1;
}

/* Ends the replica's life as how says; pending steps get their tokens
 * before the engine goes. Closing again, or after __gc, does nothing. */
static void end_replica(lua_State *L, gptoss_lua_life how) {
    lua_replica *r = gptoss_lua_end(L, 1, GPTOSS_REPLICA_MT, how);
    if (r) {
        gptoss_engine_free(r->e);
        r->e = NULL;
    }
}

static int replica_close(lua_State *L) {
    end_replica(L, GPTOSS_LUA_CLOSED);
    return 0;
}

static int replica_gc(lua_State *L) {
    end_replica(L, GPTOSS_LUA_COLLECTED);
    return 0;
}

/* The profile's rows copied out of the engine, in two passes: one counts
 * them (rows NULL), then, in memory allocated between, one copies what fits. */
typedef struct {
    struct profile_row {
        const char *label;
        double seconds;
        long calls;
    } *rows;
    char *labels;
    int n, cap;          /* rows seen; room for */
    size_t bytes, room;  /* label bytes seen (each with its NUL); room for */
    int full;
} profile_copy;

static void copy_profile_row(void *arg, const char *label, double seconds, long calls) {
    profile_copy *c = arg;
    size_t len = strlen(label) + 1;
    if (c->full || (c->rows && (c->n == c->cap || c->bytes + len > c->room))) {
        c->full = 1;
        return;
    }
    if (c->rows) {
        memcpy(c->labels + c->bytes, label, len);
        c->rows[c->n] = (struct profile_row){c->labels + c->bytes, seconds, calls};
    }
    c->n++;
    c->bytes += len;
}

/* Pushes { {label=, seconds=, calls=}, ... }: copied first, since pushing
 * allocates and a finaliser may close the replica meanwhile. */
static int push_profile(lua_State *L) {
    profile_copy c = {0};
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_profile_read(gptoss_check_engine(L, 1), copy_profile_row, &c, err);
    if (s)
        return gptoss_raise_status(L, "profile", s, err);
    c.rows = lua_newuserdatauv(L, sizeof *c.rows * (size_t)(c.n ? c.n : 1) + c.bytes, 0);
    c.labels = (char *)(c.rows + (c.n ? c.n : 1));
    c.cap = c.n;
    c.room = c.bytes;
    c.n = 0;
    c.bytes = 0;
    if ((s = gptoss_engine_profile_read(gptoss_check_engine(L, 1), copy_profile_row, &c, err)))
        return gptoss_raise_status(L, "profile", s, err);
    lua_createtable(L, c.n, 0);
    for (int i = 0; i < c.n; i++) {
        lua_createtable(L, 0, 3);
        lua_pushstring(L, c.rows[i].label);
        lua_setfield(L, -2, "label");
        lua_pushnumber(L, c.rows[i].seconds);
        lua_setfield(L, -2, "seconds");
        lua_pushinteger(L, c.rows[i].calls);
        lua_setfield(L, -2, "calls");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* r:profile(true|false) switches per-kernel timing (each step then waits for
 * the device); r:profile() returns { {label=, seconds=, calls=}, ... } in
 * first-launch order. */
static int replica_profile(lua_State *L) {
    gptoss_engine *e = gptoss_check_engine(L, 1);
    if (lua_isnoneornil(L, 2))
        return push_profile(L);
    luaL_checktype(L, 2, LUA_TBOOLEAN);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_profile(e, lua_toboolean(L, 2), err);
    if (s)
        return gptoss_raise_status(L, "profile", s, err);
    return 0;
}

static int replica_get(lua_State *L) {
    gptoss_lua_life life = gptoss_lua_life_of(L, 1, GPTOSS_REPLICA_MT);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (!k)
        return 0;
    if (strcmp(k, "closed") == 0) { /* also once collected: no step runs */
        lua_pushboolean(L, life != GPTOSS_LUA_OPEN);
        return 1;
    }
    if (strcmp(k, "model") == 0) {
        lua_getiuservalue(L, 1, 1);
        return 1;
    }
    gptoss_engine *e = gptoss_check_engine(L, 1);
    const gptoss_engine_opts *o = gptoss_engine_options(e);
    /* each engine's own options are set (> 0) on its replicas only */
    if (strcmp(k, "device") == 0) {
        if (o->device < 0)
            lua_pushliteral(L, "cpu");
        else
            lua_pushinteger(L, o->device);
    } else if (strcmp(k, "slots") == 0) {
        lua_pushinteger(L, o->slots);
    } else if (strcmp(k, "ctx") == 0) {
        lua_pushinteger(L, o->ctx);
    } else if (strcmp(k, "weights") == 0) {
        lua_pushstring(L, gptoss_weight_format_of(o->weights)->name);
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
        gptoss_engine_memory(e, &mem);
        push_memory(L, &mem);
    } else {
        return 0;
    }
    return 1;
}

static int replica_tostring(lua_State *L) {
    if (gptoss_lua_life_of(L, 1, GPTOSS_REPLICA_MT) == GPTOSS_LUA_CLOSED) {
        lua_pushliteral(L, "gptoss.replica(closed)");
        return 1;
    }
    const gptoss_engine_opts *o = gptoss_engine_options(gptoss_check_engine(L, 1));
    char where[32], bound[48];
    if (o->device < 0)
        snprintf(where, sizeof where, "cpu");
    else
        snprintf(where, sizeof where, "GPU %d", o->device);
    if (o->threads > 0)
        snprintf(bound, sizeof bound, "%d threads", o->threads);
    else
        snprintf(bound, sizeof bound, "%d rows per step", o->rows);
    lua_pushfstring(L, "gptoss.replica(%s, %d slots x %d positions, weights %s, kv %s, %s)", where, o->slots,
                    o->ctx, gptoss_weight_format_of(o->weights)->name, kv_modes[o->kv_bf16], bound);
    return 1;
}

/* gptoss.core.weight_formats() -> the format table (weight_format.h) as
 * { {name=, bits=, block=, exact_against_bf16=, bf16_arithmetic=, summary=}, ... }
 * in its order */
int gptoss_lua_weight_formats(lua_State *L) {
    lua_createtable(L, GPTOSS_N_WEIGHT_FORMATS, 0);
    for (int w = 0; w < GPTOSS_N_WEIGHT_FORMATS; w++) {
        const gptoss_weight_format *f = gptoss_weight_format_of(w);
        lua_createtable(L, 0, 6);
        lua_pushstring(L, f->name);
        lua_setfield(L, -2, "name");
        lua_pushnumber(L, f->bits);
        lua_setfield(L, -2, "bits");
        lua_pushinteger(L, gptoss_weight_format_block(f));
        lua_setfield(L, -2, "block");
        lua_pushboolean(L, f->exact_against_bf16);
        lua_setfield(L, -2, "exact_against_bf16");
        lua_pushboolean(L, f->bf16_arithmetic);
        lua_setfield(L, -2, "bf16_arithmetic");
        lua_pushstring(L, f->summary);
        lua_setfield(L, -2, "summary");
        lua_rawseti(L, -2, w + 1);
    }
    return 1;
}

/* gptoss.core.kv_formats() -> {"fp32", "bf16"}: the kv option's choices */
int gptoss_lua_kv_formats(lua_State *L) {
    lua_newtable(L);
    for (int i = 0; kv_modes[i]; i++) {
        lua_pushstring(L, kv_modes[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

void gptoss_open_replica(lua_State *L) {
    for (int w = 0; w < GPTOSS_N_WEIGHT_FORMATS; w++)
        weight_names[w] = gptoss_weight_format_of(w)->name;
    static const luaL_Reg replica_methods[] = {
        {"step", gptoss_lua_replica_step}, {"trace", gptoss_lua_replica_trace},
        {"reset", replica_reset},          {"length", replica_length},
        {"close", replica_close},          {"sampling", gptoss_lua_replica_sampling},
        {"profile", replica_profile},      {"fork", replica_fork},
        {"rewind_limit", replica_rewind_limit}, {"check_sampling", gptoss_lua_replica_check_sampling},
        {NULL, NULL},
    };
    static const luaL_Reg replica_meta[] = {
        {"__gc", replica_gc}, {"__close", replica_close}, {"__tostring", replica_tostring}, {NULL, NULL},
    };
    static const gptoss_lua_class_def replica = {GPTOSS_REPLICA_MT, replica_methods, replica_get, replica_meta};
    gptoss_lua_class(L, &replica);
}
