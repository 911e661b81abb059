/* Clocks and terminals of the host, for benchmarks and the course's
 * command line. */
#include <limits.h>
#include <time.h>
#include <unistd.h>

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
