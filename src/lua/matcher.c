/* A grammar's matcher (m:accept, m:allowed, m:mask, ...) and the token sets
 * m:allowed returns (docs/structured.md#the-lua-api). */
#include <stdio.h>
#include <string.h>

#include "binding.h"

/* user values: 1 the grammar, 2 the tokenizer (kept alive with it), 3 the
 * step whose token it waits for (nil: none) */
typedef struct {
    gptoss_lua_object obj;
    gptoss_matcher *m;
} lua_matcher;

/* the allowed tokens when it was made, a bit each */
typedef struct {
    gptoss_lua_object obj;
    int vocab, words, count;
    uint32_t bits[];
} token_set;

gptoss_matcher *gptoss_check_matcher(lua_State *L, int idx, const char *fn) {
    return ((lua_matcher *)gptoss_lua_check(L, idx, GPTOSS_MATCHER_MT, fn))->m;
}

static gptoss_matcher *check_matcher(lua_State *L, int idx) { return gptoss_check_matcher(L, idx, NULL); }

void gptoss_lua_matcher_settle(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    gptoss_check_matcher(L, idx, NULL);
    if (lua_getiuservalue(L, idx, 3) == LUA_TNIL)
        lua_pop(L, 1);
    else
        gptoss_lua_step_settle(L, -1), lua_pop(L, 1);
}

void gptoss_lua_matcher_pend(lua_State *L, int idx, int step_idx) {
    idx = lua_absindex(L, idx);
    lua_pushvalue(L, step_idx);
    lua_setiuservalue(L, idx, 3);
}

gptoss_status gptoss_lua_matcher_took(lua_State *L, int idx, int step_idx, int token, char *err) {
    idx = lua_absindex(L, idx);
    lua_getiuservalue(L, idx, 3);
    int pending = lua_rawequal(L, -1, step_idx);
    lua_pop(L, 1);
    if (!pending)
        return GPTOSS_OK;
    lua_pushnil(L);
    lua_setiuservalue(L, idx, 3);
    return token >= 0 ? gptoss_matcher_accept(gptoss_check_matcher(L, idx, "step"), token, err) : GPTOSS_OK;
}

/* The matcher a method was called on, given any token a step drew for it first. */
static gptoss_matcher *settled(lua_State *L) {
    gptoss_lua_matcher_settle(L, 1);
    return check_matcher(L, 1);
}

gptoss_matcher **gptoss_lua_new_matcher(lua_State *L, int grammar_idx, int tokenizer_idx) {
    grammar_idx = lua_absindex(L, grammar_idx);
    tokenizer_idx = lua_absindex(L, tokenizer_idx);
    lua_matcher *u = gptoss_lua_new(L, GPTOSS_MATCHER_MT, sizeof *u, 3);
    lua_pushvalue(L, grammar_idx);
    lua_setiuservalue(L, -2, 1);
    lua_pushvalue(L, tokenizer_idx);
    lua_setiuservalue(L, -2, 2);
    return &u->m;
}

static int raise(lua_State *L, const char *fn, const char *err) { return luaL_error(L, "%s: %s", fn, err); }

/* the token id at idx, within the matcher's vocabulary: one outside it is a
 * caller's mistake (raised), not a token the grammar refuses */
static int check_id(lua_State *L, int idx, const char *fn) {
    int id = gptoss_check_int(L, idx, fn, "id");
    int vocab = gptoss_matcher_vocab_size(settled(L));
    if (id < 0 || id >= vocab)
        luaL_error(L, "%s: id %d is out of range 0..%d", fn, id, vocab - 1);
    return id;
}

/* m:accept(id) -> true, or false and the reason (the matcher unchanged) */
static int matcher_accept(lua_State *L) {
    int id = check_id(L, 2, "matcher:accept");
    char err[GPTOSS_ERR_LEN];
    gptoss_status st = gptoss_matcher_accept(check_matcher(L, 1), id, err);
    if (st && st != GPTOSS_E_INVALID)
        return raise(L, "matcher:accept", err);
    lua_pushboolean(L, st == GPTOSS_OK);
    if (st)
        lua_pushstring(L, err);
    return st ? 2 : 1;
}

/* m:allows(id) -> whether accept(id) would succeed */
static int matcher_allows(lua_State *L) {
    int id = check_id(L, 2, "matcher:allows");
    char err[GPTOSS_ERR_LEN];
    int ok = gptoss_matcher_allows(check_matcher(L, 1), id, err);
    if (ok < 0)
        return raise(L, "matcher:allows", err);
    lua_pushboolean(L, ok);
    return 1;
}

/* m:allowed() -> the token set allowed next */
static int matcher_allowed(lua_State *L) {
    int words = gptoss_matcher_mask_words(settled(L));
    token_set *s = gptoss_lua_new(L, GPTOSS_TOKEN_SET_MT, sizeof *s + (size_t)words * sizeof(uint32_t), 0);
    gptoss_matcher *m = check_matcher(L, 1); /* the allocation may have run a finaliser */
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_mask(m, s->bits, err))
        return raise(L, "matcher:allowed", err);
    s->vocab = gptoss_matcher_vocab_size(m);
    s->words = words;
    for (int w = 0; w < words; w++)
        s->count += __builtin_popcount(s->bits[w]);
    return 1;
}

/* m:mask([t]) -> an i32 host tensor of the mask's words (t when given) */
static int matcher_mask(lua_State *L) {
    int64_t words = gptoss_matcher_mask_words(settled(L));
    lua_tensor *t;
    if (lua_isnoneornil(L, 2)) {
        t = gptoss_new_tensor(L, GPTOSS_I32, 1, &words);
    } else {
        t = gptoss_check_tensor(L, 2);
        lua_pushvalue(L, 2);
        if (t->storage->dtype != GPTOSS_I32 || gptoss_tensor_numel(t) != (size_t)words)
            return luaL_error(L, "matcher:mask: the tensor must be i32 of %d elements (the mask's words)", (int)words);
    }
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_mask(check_matcher(L, 1), gptoss_tensor_data(t), err))
        return raise(L, "matcher:mask", err);
    return 1;
}

/* m:forced() -> the token ids to fast-forward, and the forced bytes */
static int matcher_forced(lua_State *L) {
    gptoss_matcher *m = settled(L);
    int32_t ids[1024];
    uint8_t bytes[4096];
    int n;
    size_t len;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_forced(m, ids, 1024, &n, err) || gptoss_matcher_forced_bytes(m, bytes, sizeof bytes, &len, err))
        return raise(L, "matcher:forced", err);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushlstring(L, (const char *)bytes, len);
    return 2;
}

/* m:done() -> whether the output is complete here */
static int matcher_done(lua_State *L) {
    char err[GPTOSS_ERR_LEN];
    int done = gptoss_matcher_done(settled(L), err);
    if (done < 0)
        return raise(L, "matcher:done", err);
    lua_pushboolean(L, done);
    return 1;
}

/* m:fork() -> a matcher that goes on from here on its own */
static int matcher_fork(lua_State *L) {
    settled(L);
    lua_getiuservalue(L, 1, 1);
    lua_getiuservalue(L, 1, 2);
    gptoss_matcher **f = gptoss_lua_new_matcher(L, -2, -1);
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_fork(check_matcher(L, 1), f, err))
        return raise(L, "matcher:fork", err);
    return 1;
}

/* m:rollback([n = 1]): undoes the last n accepted tokens */
static int matcher_rollback(lua_State *L) {
    settled(L);
    int n = lua_isnoneornil(L, 2) ? 1 : gptoss_check_int(L, 2, "matcher:rollback", "n");
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_rollback(check_matcher(L, 1), n, err))
        return raise(L, "matcher:rollback", err);
    return 0;
}

static int matcher_get(lua_State *L) {
    gptoss_matcher *m = settled(L);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
    if (!strcmp(k, "tokens"))
        lua_pushinteger(L, gptoss_matcher_tokens(m));
    else if (!strcmp(k, "ended"))
        lua_pushboolean(L, gptoss_matcher_ended(m));
    else if (!strcmp(k, "vocab_size"))
        lua_pushinteger(L, gptoss_matcher_vocab_size(m));
    else if (!strcmp(k, "grammar"))
        lua_getiuservalue(L, 1, 1);
    else
        return 0;
    return 1;
}

static int matcher_tostring(lua_State *L) {
    gptoss_matcher *m = check_matcher(L, 1);
    lua_pushfstring(L, "gptoss.matcher(%d tokens%s)", gptoss_matcher_tokens(m), gptoss_matcher_ended(m) ? ", ended" : "");
    return 1;
}

static int matcher_gc(lua_State *L) {
    lua_matcher *u = gptoss_lua_end(L, 1, GPTOSS_MATCHER_MT, GPTOSS_LUA_COLLECTED);
    if (u) {
        gptoss_matcher_free(u->m);
        u->m = NULL;
    }
    return 0;
}

/* ---- token sets ---- */

static token_set *check_set(lua_State *L) { return gptoss_lua_check(L, 1, GPTOSS_TOKEN_SET_MT, NULL); }

/* s:has(id) -> whether id is in the set */
static int set_has(lua_State *L) {
    token_set *s = check_set(L);
    int id = gptoss_check_int(L, 2, "token_set:has", "id");
    if (id < 0 || id >= s->vocab)
        return luaL_error(L, "token_set:has: id %d is out of range 0..%d", id, s->vocab - 1);
    lua_pushboolean(L, s->bits[id >> 5] >> (id & 31) & 1);
    return 1;
}

/* s:ids() -> the ids in the set, ascending */
static int set_ids(lua_State *L) {
    int count = check_set(L)->count;
    lua_createtable(L, count, 0);
    token_set *s = check_set(L);
    for (int id = 0, k = 0; id < s->vocab && k < count; id++)
        if (s->bits[id >> 5] >> (id & 31) & 1) {
            lua_pushinteger(L, id);
            lua_rawseti(L, -2, ++k);
        }
    return 1;
}

/* s:nth(k) -> the k-th id of the set (1-based, ascending) */
static int set_nth(lua_State *L) {
    token_set *s = check_set(L);
    int k = gptoss_check_int(L, 2, "token_set:nth", "k");
    if (k < 1 || k > s->count)
        return luaL_error(L, "token_set:nth: k %d is out of range 1..%d", k, s->count);
    int w = 0;
    for (int seen; k > (seen = __builtin_popcount(s->bits[w])); w++)
        k -= seen;
    uint32_t bits = s->bits[w];
    while (--k)
        bits &= bits - 1; /* drops the lowest set bit */
    lua_pushinteger(L, (lua_Integer)w * 32 + __builtin_ctz(bits));
    return 1;
}

static int set_len(lua_State *L) {
    lua_pushinteger(L, check_set(L)->count);
    return 1;
}

static int set_tostring(lua_State *L) {
    token_set *s = check_set(L);
    lua_pushfstring(L, "gptoss.token_set(%d of %d tokens)", s->count, s->vocab);
    return 1;
}

void gptoss_open_matcher(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"accept", matcher_accept}, {"allows", matcher_allows}, {"allowed", matcher_allowed},
        {"mask", matcher_mask},     {"forced", matcher_forced}, {"done", matcher_done},
        {"fork", matcher_fork},     {"rollback", matcher_rollback}, {NULL, NULL},
    };
    static const luaL_Reg meta[] = {{"__gc", matcher_gc}, {"__tostring", matcher_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def matcher = {GPTOSS_MATCHER_MT, methods, matcher_get, meta};
    gptoss_lua_class(L, &matcher);
    static const luaL_Reg set_methods[] = {{"has", set_has}, {"ids", set_ids}, {"nth", set_nth}, {NULL, NULL}};
    static const luaL_Reg set_meta[] = {{"__len", set_len}, {"__tostring", set_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def set = {GPTOSS_TOKEN_SET_MT, set_methods, NULL, set_meta};
    gptoss_lua_class(L, &set);
}
