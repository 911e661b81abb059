/* luaopen_gptoss_core: the C module behind require "gptoss". */
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../hip/backend.h"
#include "binding.h"

static int class_index(lua_State *L) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1))
        return 1;
    lua_settop(L, 2);
    return lua_tocfunction(L, lua_upvalueindex(2))(L);
}

void gptoss_new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction getter) {
    luaL_newmetatable(L, mt);
    lua_newtable(L);
    luaL_setfuncs(L, methods, 0);
    lua_pushcfunction(L, getter);
    lua_pushcclosure(L, class_index, 2);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

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
    if (dev < 1 || dev > n)
        luaL_error(L, "%s: device %I is out of range 1..%d", fn, dev, n);
    return (int)dev - 1;
}

/* gptoss.core.devices() -> { {id=1, name=..., memory=..., warp=..., arch=...}, ... } */
static int l_devices(lua_State *L) {
    int n = gptoss_hip_device_count();
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        gptoss_device_info d;
        if (gptoss_hip_device_info(i, &d) != 0)
            continue;
        lua_createtable(L, 0, 5);
        lua_pushinteger(L, i + 1);
        lua_setfield(L, -2, "id");
        lua_pushstring(L, d.name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, (lua_Integer)d.memory);
        lua_setfield(L, -2, "memory");
        lua_pushinteger(L, d.warp);
        lua_setfield(L, -2, "warp");
        lua_pushstring(L, d.arch);
        lua_setfield(L, -2, "arch");
        lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    }
    return 1;
}

/* gptoss.core.copy_bandwidth(device [, bytes = 1 GiB]) -> bytes per second
 * of a device-to-device copy, counting bytes read plus bytes written: the
 * ceiling the benchmarks compare their achieved bandwidth with */
static int l_copy_bandwidth(lua_State *L) {
    int dev = gptoss_check_device(L, luaL_checkinteger(L, 1), "copy_bandwidth");
    lua_Integer bytes = luaL_optinteger(L, 2, (lua_Integer)1 << 30);
    if (bytes < 1)
        return luaL_error(L, "copy_bandwidth: bytes = %I must be positive", bytes);
    double bw;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_gpu_copy_bandwidth(dev, (size_t)bytes, &bw, err))
        return luaL_error(L, "copy_bandwidth: %s", err);
    lua_pushnumber(L, bw);
    return 1;
}

/* gptoss.core.clock() -> seconds on a monotonic clock, for benchmarks */
static int l_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + ts.tv_nsec * 1e-9);
    return 1;
}

/* gptoss.core.realtime_ms() -> whole milliseconds of CLOCK_REALTIME, computed as the
 * course's now_ms (course-spec §3.2: tv_sec * 1000 + tv_nsec / 1000000 in integers), so
 * that elapsed times and TPS truncate exactly as the course's harness truncates them */
static int l_realtime_ms(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushinteger(L, (lua_Integer)ts.tv_sec * 1000 + (lua_Integer)(ts.tv_nsec / 1000000));
    return 1;
}

/* gptoss.core.isatty(fd) -> whether the descriptor is a terminal (false for one that is
 * not open or out of range), for output meant only for a person watching */
static int l_isatty(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    lua_pushboolean(L, fd >= 0 && fd <= INT_MAX && isatty((int)fd));
    return 1;
}

int luaopen_gptoss_core(lua_State *L) {
    gptoss_open_tensor(L);
    gptoss_open_model(L);
    gptoss_open_replica(L);
    gptoss_open_tokenizer(L);
    gptoss_open_sampler(L);
    static const luaL_Reg fns[] = {
        {"load", gptoss_lua_load},
        {"synthetic", gptoss_lua_synthetic},
        {"named_config", gptoss_lua_named_config},
        {"tensor", gptoss_lua_tensor_new},
        {"tensor_load", gptoss_lua_tensor_load},
        {"tokenizer", gptoss_lua_tokenizer},
        {"sampler", gptoss_lua_sampler},
        {"devices", l_devices},
        {"clock", l_clock},
        {"realtime_ms", l_realtime_ms},
        {"isatty", l_isatty},
        {"copy_bandwidth", l_copy_bandwidth},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_pushstring(L, gptoss_hip_platform());
    lua_setfield(L, -2, "platform");
    return 1;
}
