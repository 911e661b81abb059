/* Options tables and argument checks every binding file shares: each
 * raises a Lua error naming the function (fn) and the field. */
#include <string.h>

#include "../hip/backend.h"
#include "binding.h"

lua_Integer gptoss_opt_integer(lua_State *L, int idx, const char *fn, const char *field,
                               lua_Integer dflt) {
    lua_getfield(L, idx, field);
    lua_Integer v = dflt;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "%s: %s must be an integer (got %s)", fn, field, luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    return v;
}

lua_Number gptoss_opt_number(lua_State *L, int idx, const char *fn, const char *field,
                             lua_Number dflt) {
    lua_getfield(L, idx, field);
    lua_Number v = dflt;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tonumberx(L, -1, &ok);
        if (!ok)
            luaL_error(L, "%s: %s must be a number (got %s)", fn, field, luaL_tolstring(L, -1, NULL));
    }
    lua_pop(L, 1);
    return v;
}

/* pushes the NULL-terminated list as "a, b, c" */
static const char *push_joined(lua_State *L, const char *const *list) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = 0; list[i]; i++) {
        luaL_addstring(&b, i ? ", " : "");
        luaL_addstring(&b, list[i]);
    }
    luaL_pushresult(&b);
    return lua_tostring(L, -1);
}

void gptoss_opt_known(lua_State *L, int idx, const char *fn, const char *const *known) {
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++)
            ok = lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), known[i]) == 0;
        if (!ok) {
            const char *key = luaL_tolstring(L, -2, NULL);
            luaL_error(L, "%s: unknown option '%s' (known: %s)", fn, key, push_joined(L, known));
        }
        lua_pop(L, 1);
    }
}

int gptoss_opt_choice(lua_State *L, int idx, const char *fn, const char *field,
                      const char *const *choices, int dflt) {
    lua_getfield(L, idx, field);
    int v = dflt;
    if (!lua_isnil(L, -1)) {
        const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        v = -1;
        for (int i = 0; s && choices[i]; i++)
            if (strcmp(s, choices[i]) == 0)
                v = i;
        if (v < 0) {
            const char *allowed = push_joined(L, choices);
            const char *got = luaL_tolstring(L, -2, NULL);
            luaL_error(L, "%s: %s must be one of %s (got %s)", fn, field, allowed, got);
        }
    }
    lua_pop(L, 1);
    return v;
}

int gptoss_check_device(lua_State *L, lua_Integer dev, const char *fn) {
    int n = gptoss_hip_device_count();
    if (n == 0)
        luaL_error(L, "%s: device %I: no GPU is available (gptoss.devices() is empty)", fn, dev);
    if (dev < 0 || dev >= n)
        luaL_error(L, "%s: device %I is out of range 0..%d", fn, dev, n - 1);
    return (int)dev;
}


int gptoss_check_int(lua_State *L, int idx, const char *fn, const char *what) {
    lua_Integer v = luaL_checkinteger(L, idx);
    if (v < INT32_MIN || v > INT32_MAX)
        luaL_error(L, "%s: %s %I is out of range (a 32-bit integer)", fn, what, v);
    return (int)v;
}
