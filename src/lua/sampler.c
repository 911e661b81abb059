/* gptoss.sampler{...}: the course's sampler and ours over one logits row;
 * and a replica's per-slot sampling, r:sampling and r:check_sampling. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../core/config.h"
#include "../core/sampler.h"
#include "binding.h"

/* user values: 1 the constructor's logit bias list */
typedef struct {
    gptoss_lua_object obj;
    gptoss_sampler *s;
    uint64_t position; /* the next draw's position when none is given */
    int logprobs;      /* alternatives returned with each draw; -1: none */
    const gptoss_logit_bias *bias; /* the constructor's, in user value 1 */
    int n_bias;
} lua_sampler;

static lua_sampler *check_sampler(lua_State *L, int idx) {
    return gptoss_lua_check(L, idx, GPTOSS_SAMPLER_MT, NULL);
}

int gptoss_read_logprobs(lua_State *L, int idx, const char *fn) {
    lua_getfield(L, idx, "logprobs");
    int given = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (!given)
        return -1;
    lua_Integer n = gptoss_opt_integer(L, idx, fn, "logprobs", 0);
    if (n < 0 || n > GPTOSS_MAX_LOGPROBS)
        luaL_error(L, "%s: logprobs must be within 0..%d (got %I)", fn, GPTOSS_MAX_LOGPROBS, n);
    return (int)n;
}

static int by_id(const void *a, const void *b) {
    int32_t x = ((const gptoss_logit_bias *)a)->id, y = ((const gptoss_logit_bias *)b)->id;
    return (x > y) - (x < y);
}

const gptoss_logit_bias *gptoss_read_logit_bias(lua_State *L, int idx, const char *fn, int vocab, int *n) {
    *n = 0;
    lua_getfield(L, idx, "logit_bias");
    if (lua_isnil(L, -1))
        return NULL;
    if (!lua_istable(L, -1))
        luaL_error(L, "%s: logit_bias must be a table {[token id] = bias} (got %s)", fn, luaL_typename(L, -1));
    int count = 0;
    for (lua_pushnil(L); lua_next(L, -2); lua_pop(L, 1))
        if (++count > GPTOSS_MAX_LOGIT_BIAS)
            luaL_error(L, "%s: logit_bias has more than %d entries", fn, GPTOSS_MAX_LOGIT_BIAS);
    gptoss_logit_bias *out = lua_newuserdatauv(L, sizeof *out * (size_t)(count ? count : 1), 0);
    for (lua_pushnil(L); lua_next(L, -3); lua_pop(L, 1)) {
        if (*n == count) /* a finaliser the allocation ran added entries */
            luaL_error(L, "%s: logit_bias changed while it was read", fn);
        int ok;
        lua_Integer id = lua_tointegerx(L, -2, &ok);
        if (!ok)
            luaL_error(L, "%s: logit_bias keys must be token ids (got %s)", fn, luaL_tolstring(L, -2, NULL));
        if (id < 0 || id > (vocab > 0 ? vocab - 1 : INT32_MAX))
            luaL_error(L, "%s: logit_bias: token %I is out of range 0..%d", fn, id, vocab > 0 ? vocab - 1 : INT32_MAX);
        lua_Number bias = lua_tonumberx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "%s: logit_bias[%I] must be a number (got %s)", fn, id, luaL_tolstring(L, -1, NULL));
        /* finite as a float, or -inf: +inf or NaN would leave the row no valid draw */
        if (!(bias == -HUGE_VAL || fabs(bias) <= FLT_MAX))
            luaL_error(L, "%s: logit_bias[%I] = %f: a bias is a finite float or -math.huge", fn, id, bias);
        out[*n].id = (int32_t)id;
        out[*n].bias = (float)bias;
        ++*n;
    }
    lua_remove(L, -2); /* the table; the list stays */
    qsort(out, (size_t)*n, sizeof *out, by_id);
    return out;
}

/* an unpredictable default seed for the default mode (reported as s.seed) */
static uint64_t fresh_seed(void) {
    static uint64_t calls;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return gptoss_mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                        gptoss_mix64(++calls) + (uint64_t)(uintptr_t)&ts);
}

void gptoss_read_sample_params(lua_State *L, int idx, const char *fn, gptoss_sample_params *p) {
    static const char *const modes[] = {"default", "course", NULL};
    memset(p, 0, sizeof *p);
    p->mode = gptoss_opt_choice(L, idx, fn, "mode", modes, 0);
    int course = p->mode == GPTOSS_SAMPLE_COURSE;
    /* course defaults are its command line's: -t 0, -p 0.9 */
    p->temperature = gptoss_opt_number(L, idx, fn, "temperature", course ? 0.0 : 1.0);
    p->top_p = gptoss_opt_number(L, idx, fn, "top_p", course ? 0.9 : 1.0);
    p->min_p = gptoss_opt_number(L, idx, fn, "min_p", 0.0);
    p->presence_penalty = gptoss_opt_number(L, idx, fn, "presence_penalty", 0.0);
    p->frequency_penalty = gptoss_opt_number(L, idx, fn, "frequency_penalty", 0.0);
    lua_Integer top_k = gptoss_opt_integer(L, idx, fn, "top_k", 0);
    if (top_k < 0)
        luaL_error(L, "%s: top_k must be >= 0 (0 turns it off) (got %I)", fn, top_k);
    p->top_k = top_k > INT32_MAX ? INT32_MAX : (int)top_k; /* beyond the row: no filter either way */
    lua_getfield(L, idx, "seed");
    int seeded = !lua_isnil(L, -1);
    lua_pop(L, 1);
    p->seed = (uint64_t)gptoss_opt_integer(L, idx, fn, "seed", 0);
    if (course && p->seed == 0) /* the course seeds with the clock when -s is 0 */
        p->seed = (uint64_t)(unsigned)time(NULL);
    else if (!course && !seeded)
        p->seed = fresh_seed();
}

/* The sampling table at idx (r:sampling's options) read into s as fn, its
 * bias list left on the stack; the table's metamethods may run, so the
 * replica at 1 is taken again after. */
static void read_slot_sampling(lua_State *L, int idx, const char *fn, gptoss_slot_sampling *s) {
    luaL_checktype(L, idx, LUA_TTABLE);
    static const char *const known[] = {GPTOSS_SAMPLE_OPTIONS, NULL};
    gptoss_opt_known(L, idx, fn, known);
    gptoss_read_sample_params(L, idx, fn, &s->params);
    if (s->params.mode != GPTOSS_SAMPLE_DEFAULT)
        luaL_error(L, "%s: per-slot sampling has the default mode only; the course sampler is one stream "
                      "shared by all requests: use gptoss.sampler{mode=\"course\"} on h:logits()",
                   fn);
    s->logprobs = gptoss_read_logprobs(L, idx, fn);
    int vocab = gptoss_engine_model(gptoss_check_engine(L, 1))->config.vocab_size;
    s->bias = gptoss_read_logit_bias(L, idx, fn, vocab, &s->n_bias);
}

/* r:sampling(slot, {temperature=, top_k=, top_p=, min_p=, seed=, logit_bias=,
 * logprobs=, presence_penalty=, frequency_penalty=}) sets how the slot's rows
 * draw their tokens (the default mode), its penalties counting from none;
 * r:sampling(slot) makes it greedy again, without bias or logprobs. */
int gptoss_lua_replica_sampling(lua_State *L) {
    gptoss_engine *e = gptoss_check_engine(L, 1);
    int slot = gptoss_check_slot(L, e, 2, "sampling");
    char err[GPTOSS_ERR_LEN];
    gptoss_status st;
    if (lua_isnoneornil(L, 3)) {
        if ((st = gptoss_engine_sampling(e, slot, NULL, err)))
            return gptoss_raise_status(L, "replica:sampling", st, err);
        return 0;
    }
    gptoss_slot_sampling s;
    read_slot_sampling(L, 3, "replica:sampling", &s);
    e = gptoss_check_engine(L, 1); /* the table's metamethods ran */
    if ((st = gptoss_engine_sampling(e, slot, &s, err)))
        return gptoss_raise_status(L, "replica:sampling", st, err);
    return 0;
}

/* r:check_sampling({...}) -> true when r:sampling would take these options
 * for a slot, raising as it would (naming replica:check_sampling) when it
 * would not; no slot changes. A server checks a request's sampling with it
 * before the request is queued. */
int gptoss_lua_replica_check_sampling(lua_State *L) {
    gptoss_check_engine(L, 1);
    gptoss_slot_sampling s;
    read_slot_sampling(L, 2, "replica:check_sampling", &s);
    char err[GPTOSS_ERR_LEN];
    gptoss_status st = gptoss_engine_sampling_check(gptoss_check_engine(L, 1), &s, err);
    if (st)
        return gptoss_raise_status(L, "replica:check_sampling", st, err);
    lua_pushboolean(L, 1);
    return 1;
}

/* gptoss.core.sample_options() -> {"mode", "temperature", ...}: GPTOSS_SAMPLE_OPTIONS in
 * order, a fresh list, so the Lua modules that pass sampling options on read the names here. */
int gptoss_lua_sample_options(lua_State *L) {
    static const char *const names[] = {GPTOSS_SAMPLE_OPTIONS};
    int n = (int)(sizeof names / sizeof names[0]);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* gptoss.core.sampler{mode=, temperature=, top_p=, top_k=, min_p=, seed=, logit_bias=, logprobs=,
 * presence_penalty=, frequency_penalty=} */
int gptoss_lua_sampler(lua_State *L) {
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    static const char *const known[] = {GPTOSS_SAMPLE_OPTIONS, NULL};
    gptoss_opt_known(L, 1, "sampler", known);
    gptoss_sample_params p;
    gptoss_read_sample_params(L, 1, "sampler", &p);
    int logprobs = gptoss_read_logprobs(L, 1, "sampler"), n_bias;
    const gptoss_logit_bias *bias = gptoss_read_logit_bias(L, 1, "sampler", 0, &n_bias);

    lua_sampler *u = gptoss_lua_new(L, GPTOSS_SAMPLER_MT, sizeof *u, 1);
    u->logprobs = logprobs;
    u->bias = bias;
    u->n_bias = n_bias;
    lua_pushvalue(L, -2); /* the sampler keeps its list */
    lua_setiuservalue(L, -2, 1);
    char err[GPTOSS_ERR_LEN];
    u->s = gptoss_sampler_new(&p, err);
    if (!u->s)
        return luaL_error(L, "%s", err);
    return 1;
}

/* The row at idx as floats: a host f32 tensor holding one row, or a table of
 * numbers (copied into a scratch userdata pushed on the stack). */
static const float *check_row(lua_State *L, int idx, int *n) {
    if (lua_type(L, idx) == LUA_TTABLE) {
        lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
        if (len > INT32_MAX)
            luaL_error(L, "sampler:sample: the logits table is too long");
        float *row = lua_newuserdatauv(L, sizeof *row * (size_t)(len ? len : 1), 0);
        for (lua_Integer i = 1; i <= len; i++) {
            lua_geti(L, idx, i);
            if (lua_type(L, -1) != LUA_TNUMBER)
                luaL_error(L, "sampler:sample: logits[%I] must be a number (got %s)", i,
                           luaL_typename(L, -1));
            row[i - 1] = (float)lua_tonumber(L, -1);
            lua_pop(L, 1);
        }
        *n = (int)len;
        return row;
    }
    lua_tensor *t = gptoss_lua_test(L, idx, GPTOSS_TENSOR_MT, "sampler:sample");
    if (!t)
        luaL_error(L, "sampler:sample: expected a host tensor row or a table of logits (got %s)",
                   luaL_typename(L, idx));
    if (t->storage->dtype != GPTOSS_F32)
        luaL_error(L, "sampler:sample: logits must be an f32 tensor (got i32)");
    for (int d = 0; d + 1 < t->ndim; d++)
        if (t->shape[d] != 1)
            luaL_error(L, "sampler:sample: expected one row of logits (got %I rows); index the "
                          "tensor first, e.g. logits[1]",
                       (lua_Integer)(gptoss_tensor_numel(t) / (size_t)t->shape[t->ndim - 1]));
    size_t numel = gptoss_tensor_numel(t);
    if (numel > INT32_MAX)
        luaL_error(L, "sampler:sample: the row is too long");
    *n = (int)numel;
    return gptoss_tensor_data(t);
}

/* s:sample(logits [, position | {position=, logprobs=, logit_bias=}]) -> id [, logprob, alternatives]:
 * the arguments read (their metamethods may end the sampler's life) before
 * the sampler is taken again to draw. A sampler with penalties counts each
 * id it draws, and its later draws see them. */
static int sampler_sample(lua_State *L) {
    const lua_sampler *u = check_sampler(L, 1);
    lua_Integer position = (lua_Integer)u->position;
    int logprobs = u->logprobs, n_bias = u->n_bias;
    const gptoss_logit_bias *bias = u->bias;
    if (lua_type(L, 3) == LUA_TTABLE) {
        static const char *const known[] = {"position", "logprobs", "logit_bias", NULL};
        gptoss_opt_known(L, 3, "sampler:sample", known);
        position = gptoss_opt_integer(L, 3, "sampler:sample", "position", position);
        int call_logprobs = gptoss_read_logprobs(L, 3, "sampler:sample"), call_n_bias;
        logprobs = call_logprobs >= 0 ? call_logprobs : logprobs;
        const gptoss_logit_bias *call_bias = gptoss_read_logit_bias(L, 3, "sampler:sample", 0, &call_n_bias);
        if (call_bias) /* replaces the constructor's */
            bias = call_bias, n_bias = call_n_bias;
    } else if (!lua_isnoneornil(L, 3)) {
        int ok;
        position = lua_tointegerx(L, 3, &ok);
        if (!ok)
            return luaL_error(L, "sampler:sample: position must be an integer (got %s)",
                              luaL_tolstring(L, 3, NULL));
    }
    /* the counter moves to position + 1, which must stay a Lua integer */
    if (position < 0 || position == LUA_MAXINTEGER)
        return luaL_error(L, "sampler:sample: position must be within 0..%I (got %I)",
                          (lua_Integer)(LUA_MAXINTEGER - 1), position);
    int n;
    const float *row = check_row(L, 2, &n);
    lua_sampler *live = check_sampler(L, 1);
    char err[GPTOSS_ERR_LEN];
    const float *seen; /* the row under the bias and the penalties */
    const gptoss_sample_params *p = gptoss_sampler_params(live->s);
    int penalized = gptoss_sample_penalized(p);
    if (gptoss_bias_row(live->s, row, n, bias, n_bias, &seen, err) ||
        (penalized && gptoss_penalty_row(live->s, &seen, n, gptoss_sampler_drawn(live->s), 0,
                                         (float)p->presence_penalty, (float)p->frequency_penalty, err)))
        return luaL_error(L, "%s", err);
    int id = gptoss_sample(live->s, seen, n, (uint64_t)position, err);
    if (id < 0 || (penalized && gptoss_sampler_count(live->s, id, err)))
        return luaL_error(L, "%s", err);
    live->position = (uint64_t)position + 1;
    lua_pushinteger(L, id);
    if (logprobs < 0)
        return 1;
    int top_ids[GPTOSS_MAX_LOGPROBS];
    double lp, top_lps[GPTOSS_MAX_LOGPROBS];
    int have = gptoss_logprobs(seen, n, id, logprobs, &lp, top_ids, top_lps, err);
    lua_pushnumber(L, lp);
    gptoss_push_top_logprobs(L, top_ids, top_lps, have);
    return 3;
}

void gptoss_push_top_logprobs(lua_State *L, const int *ids, const double *logprobs, int n) {
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) {
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, ids[k]);
        lua_setfield(L, -2, "id");
        lua_pushnumber(L, logprobs[k]);
        lua_setfield(L, -2, "logprob");
        lua_rawseti(L, -2, k + 1);
    }
}

static int sampler_get(lua_State *L) {
    lua_sampler *u = check_sampler(L, 1);
    const gptoss_sample_params *p = gptoss_sampler_params(u->s);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (!k)
        return 0;
    if (strcmp(k, "mode") == 0)
        lua_pushstring(L, p->mode == GPTOSS_SAMPLE_COURSE ? "course" : "default");
    else if (strcmp(k, "temperature") == 0)
        lua_pushnumber(L, p->temperature);
    else if (strcmp(k, "top_p") == 0)
        lua_pushnumber(L, p->top_p);
    else if (strcmp(k, "top_k") == 0)
        lua_pushinteger(L, p->top_k);
    else if (strcmp(k, "min_p") == 0)
        lua_pushnumber(L, p->min_p);
    else if (strcmp(k, "presence_penalty") == 0)
        lua_pushnumber(L, p->presence_penalty);
    else if (strcmp(k, "frequency_penalty") == 0)
        lua_pushnumber(L, p->frequency_penalty);
    else if (strcmp(k, "seed") == 0)
        lua_pushinteger(L, (lua_Integer)p->seed);
    else if (strcmp(k, "position") == 0)
        lua_pushinteger(L, (lua_Integer)u->position);
    else if (strcmp(k, "logprobs") == 0 && u->logprobs >= 0)
        lua_pushinteger(L, u->logprobs);
    else if (strcmp(k, "state") == 0 && p->mode == GPTOSS_SAMPLE_COURSE)
        lua_pushinteger(L, (lua_Integer)gptoss_sampler_state(u->s));
    else
        return 0;
    return 1;
}

static int sampler_gc(lua_State *L) {
    lua_sampler *u = gptoss_lua_end(L, 1, GPTOSS_SAMPLER_MT, GPTOSS_LUA_COLLECTED);
    if (u) {
        gptoss_sampler_free(u->s);
        u->s = NULL;
    }
    return 0;
}

static int sampler_tostring(lua_State *L) {
    lua_sampler *u = check_sampler(L, 1);
    const gptoss_sample_params *p = gptoss_sampler_params(u->s);
    char buf[160];
    snprintf(buf, sizeof buf, "gptoss.sampler(%s, temperature=%g, top_p=%g, top_k=%d, min_p=%g)",
             p->mode == GPTOSS_SAMPLE_COURSE ? "course" : "default", p->temperature, p->top_p,
             p->top_k, p->min_p);
    lua_pushstring(L, buf);
    return 1;
}

void gptoss_open_sampler(lua_State *L) {
    static const luaL_Reg methods[] = {{"sample", sampler_sample}, {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__gc", sampler_gc}, {"__tostring", sampler_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def sampler = {GPTOSS_SAMPLER_MT, methods, sampler_get, meta};
    gptoss_lua_class(L, &sampler);
}
