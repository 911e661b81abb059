/* What the fuzz targets of the Lua readers share (tests/fuzz/lua_*.c): one
 * Lua 5.4 state for the process, package.path at the tree's lua/
 * (FUZZ_LUA_DIR, from the Makefile), Lua line coverage as libFuzzer's
 * feedback, and fuzz.call, which runs a reader under pcall and raises a
 * finding unless it returns or fails cleanly. A target defines its driver
 * (fuzz_lua_driver), a Lua chunk returning function(path, data); an error
 * out of it is a finding (the message, then abort). A target that links C
 * modules into the fuzzer registers them in fuzz_lua_open, called before
 * anything is loaded (lua_api: the binding, as package.preload's
 * gptoss.core); the others leave it undefined. */
#ifndef GPTOSS_FUZZ_LUA_H
#define GPTOSS_FUZZ_LUA_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "fuzz.h"

/* A clean error is a string that starts with the reader's name and names
 * the file; an internal one is what Lua itself raises (a source position,
 * "attempt to index", a library function's "bad argument", a stack
 * overflow, memory), unless the file's bytes, as they are or as a message
 * quotes them (files.quote: "\x1a" then "ttempt to" reads "attempt to"),
 * hold those words. */
static const char fuzz_lua_helpers[] =
    "local quote = require('gptoss.files').quote\n"
    "local INTERNAL = { '%.lua:%d+:', 'attempt to', 'bad argument', 'stack overflow',\n"
    "  'stack traceback', 'not enough memory' }\n"
    "fuzz = {}\n"
    "function fuzz.call(name, reader, path, data, ...)\n"
    "  local ok, a, b = pcall(reader, path, ...)\n"
    "  if ok then return true, a, b end\n"
    "  if type(a) ~= 'string' then error(name .. ' raised a ' .. type(a), 0) end\n"
    "  if a:sub(1, #name + 2) ~= name .. ': ' or not a:find(path, 1, true) then\n"
    "    error(name .. ': not a clean error (the reader and the file first): ' .. a, 0)\n"
    "  end\n"
    "  local shown = data .. '\\0' .. quote(data)\n"
    "  for _, p in ipairs(INTERNAL) do\n"
    "    if a:find(p) and not shown:find(p) then error(name .. ': an internal error: ' .. a, 0) end\n"
    "  end\n"
    "  return false\n"
    "end\n";

/* The interpreter is not instrumented, so libFuzzer would see nothing of
 * the Lua code: a line hook counts each pair of consecutive (source, line)
 * in a table libFuzzer reads as extra coverage counters. */
enum { FUZZ_LUA_COUNTERS = 1 << 16 };
__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t fuzz_lua_counters[FUZZ_LUA_COUNTERS];
static uint32_t fuzz_lua_previous;

static void fuzz_lua_line(lua_State *L, lua_Debug *ar) {
    lua_getinfo(L, "S", ar);
    uint64_t key = ((uint64_t)(uintptr_t)ar->source * 31 + (uint64_t)ar->currentline) * 0x9E3779B97F4A7C15u;
    uint32_t here = (uint32_t)(key >> 40);
    fuzz_lua_counters[(here ^ fuzz_lua_previous) % FUZZ_LUA_COUNTERS]++;
    fuzz_lua_previous = here >> 1; /* AFL's edge: the previous line shifted, so A->B differs from B->A */
}

/* The target's driver: a chunk returning function(path, data). */
extern const char fuzz_lua_driver[];
__attribute__((weak)) void fuzz_lua_open(lua_State *L);

/* gptoss.core as far as the Lua readers use it (files.lua asks regular_file
 * before io.open), from src/lua/host.c, which the Makefile links in. A
 * preload, which a target's fuzz_lua_open may replace by the whole module. */
int gptoss_lua_regular_file(lua_State *L);
static int fuzz_lua_core(lua_State *L) {
    static const luaL_Reg fns[] = {{"regular_file", gptoss_lua_regular_file}, {NULL, NULL}};
    luaL_newlib(L, fns);
    return 1;
}

/* Runs the driver on the input, written to a file. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lua_State *L;
    if (!L) {
        L = luaL_newstate();
        luaL_openlibs(L);
        lua_getglobal(L, "package");
        lua_pushstring(L, FUZZ_LUA_DIR "/?.lua;" FUZZ_LUA_DIR "/?/init.lua");
        lua_setfield(L, -2, "path");
        lua_pop(L, 1);
        luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
        lua_pushcfunction(L, fuzz_lua_core);
        lua_setfield(L, -2, "gptoss.core");
        lua_pop(L, 1);
        if (fuzz_lua_open)
            fuzz_lua_open(L);
        if (luaL_dostring(L, fuzz_lua_helpers) || luaL_loadstring(L, fuzz_lua_driver) || lua_pcall(L, 0, 1, 0)) {
            fprintf(stderr, "fuzz driver: %s\n", lua_tostring(L, -1));
            abort();
        }
        lua_setfield(L, LUA_REGISTRYINDEX, "fuzz driver");
        lua_sethook(L, fuzz_lua_line, LUA_MASKLINE, 0);
    }
    fuzz_lua_previous = 0;
    const char *path = fuzz_file(data, size, ".txt");
    lua_getfield(L, LUA_REGISTRYINDEX, "fuzz driver");
    lua_pushstring(L, path);
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 2, 0, 0)) {
        fprintf(stderr, "finding: %s\n", lua_tostring(L, -1));
        abort();
    }
    /* what this input allocated is freed before the next: else libFuzzer's
     * leak heuristic (mallocs != frees) would scan the heap after most inputs */
    lua_gc(L, LUA_GCCOLLECT);
    return 0;
}

#endif
