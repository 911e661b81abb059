/* Clocks, terminals and files of the host, for benchmarks, the course's
 * command line and the readers written in Lua. */
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include "../core/regular_file.h"
#include "binding.h"

/* gptoss.core.clock() -> seconds on a monotonic clock, for benchmarks */
int gptoss_lua_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + ts.tv_nsec * 1e-9);
    return 1;
}

/* gptoss.core.realtime_ms() -> whole milliseconds of CLOCK_REALTIME, computed as the
 * course's now_ms (tv_sec * 1000 + tv_nsec / 1000000 in integers, docs/course.md), so
 * that elapsed times and TPS truncate exactly as the course's harness truncates them */
int gptoss_lua_realtime_ms(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushinteger(L, (lua_Integer)ts.tv_sec * 1000 + (lua_Integer)(ts.tv_nsec / 1000000));
    return 1;
}

/* gptoss.core.isatty(fd) -> whether the descriptor is a terminal (false for one that is
 * not open or out of range), for output meant only for a person watching */
int gptoss_lua_isatty(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    lua_pushboolean(L, fd >= 0 && fd <= INT_MAX && isatty((int)fd));
    return 1;
}

/* gptoss.core.regular_file(path) -> true; false and why ("'<path>' is a named pipe, not a
 * regular file"); nil and the system's reason when path cannot be looked at. The Lua
 * readers ask before io.open, which would block on a named pipe until a writer came. */
int gptoss_lua_regular_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char why[GPTOSS_ERR_LEN];
    int regular = gptoss_regular_file(path, why);
    if (regular > 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    if (regular == 0)
        lua_pushboolean(L, 0);
    else
        lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
}
