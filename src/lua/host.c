/* Clocks, terminals, interrupts, files and memory of the host, for benchmarks, the
 * course's command line, the terminal chat, the server and the readers written in Lua. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "../core/regular_file.h"
#include "binding.h"

/* gptoss.core.trim_memory() -> whether the C allocator was asked to give its free memory
 * back to the system (glibc keeps what a burst freed: a server gone idle returns it) */
int gptoss_lua_trim_memory(lua_State *L) {
#if defined(__GLIBC__)
    malloc_trim(0);
    lua_pushboolean(L, 1);
#else
    lua_pushboolean(L, 0);
#endif
    return 1;
}

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

/* Ctrl-C for loops that stop what they are doing rather than the program: while caught,
 * SIGINT only raises this flag, which the loop polls. One flag for the process, as the
 * signal's action is the process's. */
static volatile sig_atomic_t interrupt_flag;
static struct sigaction uncaught; /* SIGINT's action before catch_interrupts(true) */
static int catching;

static void raise_interrupt_flag(int sig) {
    (void)sig;
    interrupt_flag = 1;
}

/* gptoss.core.catch_interrupts(on) -> whether SIGINT was caught before. On: SIGINT raises
 * the flag instead of its action (lua5.4's is an "interrupted!" error), the flag cleared;
 * without SA_RESTART, so that a read or wait_readable waiting for input returns. Off: the
 * action before is back. */
int gptoss_lua_catch_interrupts(lua_State *L) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    int on = lua_toboolean(L, 1), was = catching;
    if (on && !catching) {
        struct sigaction caught;
        memset(&caught, 0, sizeof caught);
        caught.sa_handler = raise_interrupt_flag;
        sigemptyset(&caught.sa_mask);
        if (sigaction(SIGINT, &caught, &uncaught) != 0)
            return luaL_error(L, "catch_interrupts: %s", strerror(errno));
        interrupt_flag = 0;
        catching = 1;
    } else if (!on && catching) {
        if (sigaction(SIGINT, &uncaught, NULL) != 0)
            return luaL_error(L, "catch_interrupts: %s", strerror(errno));
        catching = 0;
    }
    lua_pushboolean(L, was);
    return 1;
}

/* gptoss.core.interrupted() -> whether SIGINT came while caught since the last call; the
 * flag is cleared, so that each Ctrl-C is seen once */
int gptoss_lua_interrupted(lua_State *L) {
    int raised = interrupt_flag;
    interrupt_flag = 0;
    lua_pushboolean(L, raised);
    return 1;
}

/* gptoss.core.wait_readable(fd [, seconds]) -> true once a read of fd will not block (input,
 * its end or an error, which the read then reports); false when the seconds (default: no
 * limit) pass first, or a caught SIGINT ends the wait or had come before it, unread.
 * SIGINT is blocked from the flag's check until pselect unblocks it as it starts waiting,
 * so that one arriving in between cannot be missed. */
int gptoss_lua_wait_readable(lua_State *L) {
    lua_Integer fd = luaL_checkinteger(L, 1);
    lua_Number seconds = luaL_optnumber(L, 2, -1);
    if (fd < 0 || fd >= FD_SETSIZE)
        return luaL_error(L, "wait_readable: fd must be in 0..%d (got %I)", FD_SETSIZE - 1, fd);
    if (lua_gettop(L) >= 2 && !(seconds >= 0 && seconds <= 1e9))
        return luaL_error(L, "wait_readable: seconds must be in 0..1e9 (got %f)", seconds);
    if (fcntl((int)fd, F_GETFD) < 0) return luaL_error(L, "wait_readable: fd %d is not open", (int)fd);
    struct timespec limit = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (time_t)seconds) * 1e9)};
    sigset_t interrupt, unblocked;
    sigemptyset(&interrupt);
    sigaddset(&interrupt, SIGINT);
    sigprocmask(SIG_BLOCK, &interrupt, &unblocked);
    int n = 0, err = 0;
    if (!interrupt_flag) {
        fd_set readable;
        FD_ZERO(&readable);
        FD_SET((int)fd, &readable);
        n = pselect((int)fd + 1, &readable, NULL, NULL, seconds < 0 ? NULL : &limit, &unblocked);
        err = errno;
    }
    sigprocmask(SIG_SETMASK, &unblocked, NULL);
    if (n < 0 && err != EINTR) return luaL_error(L, "wait_readable: %s", strerror(err));
    lua_pushboolean(L, n > 0);
    return 1;
}
