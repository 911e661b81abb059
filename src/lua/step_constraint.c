/* r:step's constraint option (docs/structured.md#constrained-steps): the
 * rows that draw under a grammar, each matcher's mask taken for the engine.
 * The tokens drawn go back to the matchers when the step's tokens are read
 * (gptoss_lua_step_settle), or before a matcher is used again. */
#include <string.h>

#include "binding.h"

/* The row key at -2 of constraint, within 1..n. */
static int constraint_row(lua_State *L, int n) {
    int ok;
    lua_Integer row = lua_tointegerx(L, -2, &ok);
    if (!ok || lua_type(L, -2) != LUA_TNUMBER)
        luaL_error(L, "step: constraint's keys must be row numbers (got %s)", luaL_typename(L, -2));
    if (row < 1 || row > n)
        luaL_error(L, "step: constraint[%I] is out of range 1..%d (the step's rows)", row, n);
    return (int)row;
}

int gptoss_lua_read_constraint(lua_State *L, int tbl, int n, int vocab, gptoss_step_request *q) {
    q->mask_rows = NULL, q->masks = NULL, q->n_masks = 0;
    if (lua_getfield(L, tbl, "constraint") == LUA_TNIL) {
        lua_pop(L, 1);
        return 0;
    }
    if (!lua_istable(L, -1))
        luaL_error(L, "step: constraint must be a table {[row] = matcher} (got %s)", luaL_typename(L, -1));
    int given = lua_gettop(L);
    lua_newtable(L); /* ours: {[row] = matcher}, then {[matcher] = row} to find a matcher named twice */
    lua_newtable(L);
    int own = given + 1, seen = given + 2, count = 0;
    for (lua_pushnil(L); lua_next(L, given); lua_pop(L, 1)) {
        int row = constraint_row(L, n);
        gptoss_check_matcher(L, -1, "step: constraint");
        lua_pushvalue(L, -1);
        if (lua_rawget(L, seen) != LUA_TNIL)
            luaL_error(L, "step: constraint[%d] is the matcher of constraint[%d] too (fork it for each row)", row,
                       (int)lua_tointeger(L, -1));
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushinteger(L, row);
        lua_rawset(L, seen);
        lua_pushvalue(L, -1);
        lua_rawseti(L, own, row);
        count++;
    }
    int words = gptoss_mask_words(vocab);
    int *rows = lua_newuserdatauv(L, sizeof(int) * (size_t)(count ? count : 1), 0);
    uint32_t *masks = lua_newuserdatauv(L, sizeof(uint32_t) * (size_t)words * (size_t)(count ? count : 1), 0);
    int k = 0;
    for (int row = 1; row <= n && k < count; row++) { /* in row order: the engine's masks are indexed so */
        if (lua_rawgeti(L, own, row) == LUA_TNIL) {
            lua_pop(L, 1);
            continue;
        }
        gptoss_lua_matcher_settle(L, -1);
        gptoss_matcher *m = gptoss_check_matcher(L, -1, "step: constraint");
        if (gptoss_matcher_vocab_size(m) > vocab)
            luaL_error(L, "step: constraint[%d]: the matcher's vocabulary (%d tokens) is larger than the model's (%d)",
                       row, gptoss_matcher_vocab_size(m), vocab);
        if (gptoss_matcher_ended(m))
            luaL_error(L, "step: constraint[%d]: the matcher has ended (it took an end token): nothing may follow",
                       row);
        uint32_t *mask = masks + (size_t)k * (size_t)words;
        memset(mask, 0, sizeof(uint32_t) * (size_t)words); /* tokens past the matcher's vocabulary: never */
        char err[GPTOSS_ERR_LEN];
        if (gptoss_matcher_mask(m, mask, err))
            luaL_error(L, "step: constraint[%d]: %s", row, err);
        rows[k++] = row - 1;
        lua_pop(L, 1);
    }
    lua_remove(L, seen);
    lua_remove(L, given); /* own, rows, masks from given on */
    lua_rotate(L, given, -1); /* rows, masks, own */
    q->mask_rows = rows, q->masks = masks, q->n_masks = count;
    return lua_gettop(L);
}
