/* gptoss.core.mpi_*: Open MPI for getp across processes and hosts (lua/gptoss/mpi.lua is
 * their Lua face, docs/getp.md#ranks-under-mpi). Ranks count from 0, as MPI's do; strings
 * travel as bytes, whatever they hold. MPI starts on the first call that needs it (so
 * require "gptoss" never starts it) and is finalized when the process exits.
 *
 * Built with MPI when the Makefile finds mpi.h (GPTOSS_MPI); otherwise every function but
 * mpi_available raises one error saying how to get it. MPI's types stay in this file. */
#include "binding.h"

#define NO_MPI "this build has no MPI: install libopenmpi-dev (Debian) and rebuild (make)"

#ifdef GPTOSS_MPI
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the ranks of this host (MPI_COMM_TYPE_SHARED), made at start */
static MPI_Comm host_comm = MPI_COMM_NULL;

/* An exit without MPI_Finalize makes mpirun end the whole job as failed. atexit in a
 * shared library runs when it is unloaded too (Lua unloads core.so as its state closes). */
static void finalize_at_exit(void) {
    int started, finished;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    if (started && !finished)
        MPI_Finalize();
}

static int raise_mpi(lua_State *L, const char *fn, int code) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", code);
    return luaL_error(L, "mpi.%s: %s", fn, msg);
}

#define MPI_CHECK(L, fn, call)                                                                     \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS)                                                                \
            raise_mpi(L, fn, mpi_rc_);                                                             \
    } while (0)

/* Starts MPI unless it runs already; errors come back as codes (raised as Lua errors)
 * rather than ending the process. */
static void start(lua_State *L, const char *fn) {
    int started, finished;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    if (finished)
        luaL_error(L, "mpi.%s: MPI was finalized", fn);
    if (!started) {
        int provided; /* one thread makes every MPI call: getp's */
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            luaL_error(L, "mpi.%s: MPI_Init_thread failed", fn);
        atexit(finalize_at_exit);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    }
    if (host_comm == MPI_COMM_NULL)
        MPI_CHECK(L, fn, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host_comm));
}

static int comm_number(lua_State *L, const char *fn, MPI_Comm comm, int size) {
    start(L, fn);
    int n;
    MPI_CHECK(L, fn, size ? MPI_Comm_size(comm == MPI_COMM_NULL ? host_comm : comm, &n)
                          : MPI_Comm_rank(comm == MPI_COMM_NULL ? host_comm : comm, &n));
    lua_pushinteger(L, n);
    return 1;
}

/* gptoss.core.mpi_rank(), mpi_size(): this process's rank and the ranks of the job;
 * mpi_local_rank(), mpi_local_size(): the same among the ranks of this host */
static int mpi_rank(lua_State *L) { return comm_number(L, "rank", MPI_COMM_WORLD, 0); }
static int mpi_size(lua_State *L) { return comm_number(L, "size", MPI_COMM_WORLD, 1); }
static int mpi_local_rank(lua_State *L) { return comm_number(L, "local_rank", MPI_COMM_NULL, 0); }
static int mpi_local_size(lua_State *L) { return comm_number(L, "local_size", MPI_COMM_NULL, 1); }

/* gptoss.core.mpi_host() -> the name MPI gives this host */
static int mpi_host(lua_State *L) {
    start(L, "host");
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_CHECK(L, "host", MPI_Get_processor_name(name, &len));
    lua_pushlstring(L, name, (size_t)len);
    return 1;
}

/* gptoss.core.mpi_barrier() */
static int mpi_barrier(lua_State *L) {
    start(L, "barrier");
    MPI_CHECK(L, "barrier", MPI_Barrier(MPI_COMM_WORLD));
    return 0;
}

/* the root argument at idx: a rank, 0 when absent */
static int check_root(lua_State *L, int idx, const char *fn) {
    lua_Integer root = luaL_optinteger(L, idx, 0);
    int size;
    MPI_CHECK(L, fn, MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (root < 0 || root >= size)
        luaL_error(L, "mpi.%s: root %I is not a rank (0..%d)", fn, root, size - 1);
    return (int)root;
}

/* What one rank holds of a collective: its string's length, or one of these (every rank
 * learns of them, so that all raise together rather than some wait for ever). */
enum { NOT_A_STRING = -1, TOO_LONG = -2 };

static int length_of(lua_State *L, int idx) {
    if (lua_type(L, idx) != LUA_TSTRING)
        return NOT_A_STRING;
    size_t n = lua_rawlen(L, idx);
    return n > INT_MAX ? TOO_LONG : (int)n;
}

static int bad_length(lua_State *L, const char *fn, int rank, int length) {
    if (length == TOO_LONG)
        return luaL_error(L, "mpi.%s: rank %d's string is longer than one MPI message holds (%d bytes)", fn,
                          rank, INT_MAX);
    return luaL_error(L, "mpi.%s: rank %d gave no string", fn, rank);
}

/* A scratch block of n bytes that Lua frees, left on the stack. */
static char *scratch(lua_State *L, size_t n) { return lua_newuserdatauv(L, n ? n : 1, 0); }

/* gptoss.core.mpi_broadcast(s [, root = 0]) -> root's string s, on every rank (the others' s is
 * not read) */
static int mpi_broadcast(lua_State *L) {
    start(L, "broadcast");
    int root = check_root(L, 2, "broadcast"), rank;
    MPI_CHECK(L, "broadcast", MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    int n = rank == root ? length_of(L, 1) : 0;
    MPI_CHECK(L, "broadcast", MPI_Bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD));
    if (n < 0)
        return bad_length(L, "broadcast", root, n);
    if (rank == root) {
        lua_settop(L, 1);
        MPI_CHECK(L, "broadcast", MPI_Bcast((void *)lua_tostring(L, 1), n, MPI_BYTE, root, MPI_COMM_WORLD));
        return 1;
    }
    char *buf = scratch(L, (size_t)n);
    MPI_CHECK(L, "broadcast", MPI_Bcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD));
    lua_pushlstring(L, buf, (size_t)n);
    return 1;
}

/* Each rank's count and where it starts in the whole, from every rank's length (checked
 * first: all ranks see the same lengths and raise alike); the whole's length. */
static int layout(lua_State *L, const char *fn, const int *lengths, int size, int *counts, int *starts) {
    long long total = 0;
    for (int r = 0; r < size; r++)
        if (lengths[r] < 0)
            bad_length(L, fn, r, lengths[r]);
    for (int r = 0; r < size; r++) {
        counts[r] = lengths[r];
        starts[r] = (int)total;
        total += lengths[r];
        if (total > INT_MAX)
            luaL_error(L, "mpi.%s: the strings of all ranks together are longer than one MPI message holds "
                          "(%d bytes)", fn, INT_MAX);
    }
    return (int)total;
}

/* Pushes the list of size strings cut from buf. */
static void push_pieces(lua_State *L, const char *buf, const int *counts, const int *starts, int size) {
    lua_createtable(L, size, 0);
    for (int r = 0; r < size; r++) {
        lua_pushlstring(L, buf + starts[r], (size_t)counts[r]);
        lua_rawseti(L, -2, r + 1);
    }
}

/* gptoss.core.mpi_gather(s [, root = 0]) -> on root, the list of every rank's s (rank r's
 * at r + 1), nil elsewhere; mpi_allgather(s) -> that list on every rank */
static int gather(lua_State *L, int all) {
    const char *fn = all ? "allgather" : "gather";
    start(L, fn);
    int root = all ? 0 : check_root(L, 2, fn), rank, size;
    MPI_CHECK(L, fn, MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(L, fn, MPI_Comm_size(MPI_COMM_WORLD, &size));
    lua_settop(L, 1);
    int mine = length_of(L, 1);
    int *lengths = (int *)scratch(L, 3 * sizeof(int) * (size_t)size), *counts = lengths + size,
        *starts = counts + size;
    MPI_CHECK(L, fn, MPI_Allgather(&mine, 1, MPI_INT, lengths, 1, MPI_INT, MPI_COMM_WORLD));
    int total = layout(L, fn, lengths, size, counts, starts);
    const void *send = lua_tostring(L, 1);
    int receives = all || rank == root;
    char *buf = scratch(L, receives ? (size_t)total : 0);
    if (all)
        MPI_CHECK(L, fn, MPI_Allgatherv(send, mine, MPI_BYTE, buf, counts, starts, MPI_BYTE, MPI_COMM_WORLD));
    else
        MPI_CHECK(L, fn,
                  MPI_Gatherv(send, mine, MPI_BYTE, buf, counts, starts, MPI_BYTE, root, MPI_COMM_WORLD));
    if (!receives)
        return 0;
    push_pieces(L, buf, counts, starts, size);
    return 1;
}

static int mpi_gather(lua_State *L) { return gather(L, 0); }
static int mpi_allgather(lua_State *L) { return gather(L, 1); }

/* gptoss.core.mpi_scatter(list [, root = 0]) -> on each rank r, root's list[r + 1] (the others'
 * list is not read) */
static int mpi_scatter(lua_State *L) {
    start(L, "scatter");
    int root = check_root(L, 2, "scatter"), rank, size;
    MPI_CHECK(L, "scatter", MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(L, "scatter", MPI_Comm_size(MPI_COMM_WORLD, &size));
    lua_settop(L, 1);
    int *lengths = (int *)scratch(L, 3 * sizeof(int) * (size_t)size), *counts = lengths + size,
        *starts = counts + size;
    /* root's list checked there, then told to all: a list of the wrong size is size lengths
     * of NOT_A_STRING */
    if (rank == root) {
        int is_list = lua_type(L, 1) == LUA_TTABLE && lua_rawlen(L, 1) == (size_t)size;
        for (int r = 0; r < size; r++) {
            lengths[r] = NOT_A_STRING;
            if (is_list) {
                lua_rawgeti(L, 1, r + 1);
                lengths[r] = length_of(L, -1);
                lua_pop(L, 1);
            }
        }
    }
    MPI_CHECK(L, "scatter", MPI_Bcast(lengths, size, MPI_INT, root, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        if (lengths[r] == NOT_A_STRING)
            luaL_error(L, "mpi.scatter: rank %d's list must hold %d strings, one a rank", root, size);
    int total = layout(L, "scatter", lengths, size, counts, starts);
    char *whole = scratch(L, rank == root ? (size_t)total : 0);
    if (rank == root)
        for (int r = 0; r < size; r++) {
            lua_rawgeti(L, 1, r + 1); /* the list holds it: its bytes stay */
            memcpy(whole + starts[r], lua_tostring(L, -1), (size_t)counts[r]);
            lua_pop(L, 1);
        }
    char *mine = scratch(L, (size_t)counts[rank]);
    MPI_CHECK(L, "scatter", MPI_Scatterv(whole, counts, starts, MPI_BYTE, mine, counts[rank], MPI_BYTE, root,
                                         MPI_COMM_WORLD));
    lua_pushlstring(L, mine, (size_t)counts[rank]);
    return 1;
}

/* gptoss.core.mpi_abort(message [, code = 1]): message on stderr, then every rank of the
 * job ends with code (MPI_Abort); before MPI started, this process alone exits */
static int mpi_abort(lua_State *L) {
    if (lua_type(L, 1) != LUA_TSTRING)
        return luaL_error(L, "mpi.abort: message must be a string (got %s)", luaL_typename(L, 1));
    const char *message = lua_tostring(L, 1);
    lua_Integer code = luaL_optinteger(L, 2, 1);
    if (code < 0 || code > 255)
        return luaL_error(L, "mpi.abort: code %I is not an exit status (0..255)", code);
    fprintf(stderr, "%s\n", message);
    fflush(stderr);
    fflush(stdout);
    int started, finished;
    MPI_Initialized(&started);
    MPI_Finalized(&finished);
    if (started && !finished)
        MPI_Abort(MPI_COMM_WORLD, (int)code);
    exit((int)code);
}

/* gptoss.core.mpi_finalize(): ends MPI now (no MPI call may follow); nothing before it
 * started or after it ended */
static int mpi_finalize(lua_State *L) {
    (void)L;
    finalize_at_exit();
    return 0;
}

#define MPI_FN(f) f
#define HAVE_MPI 1

#else /* no mpi.h: the same names, each saying how to get MPI */

static int no_mpi(lua_State *L) { return luaL_error(L, "gptoss.mpi: " NO_MPI); }
#define MPI_FN(f) no_mpi
#define HAVE_MPI 0
#endif

static const luaL_Reg mpi_fns[] = {
    {"mpi_rank", MPI_FN(mpi_rank)},
    {"mpi_size", MPI_FN(mpi_size)},
    {"mpi_local_rank", MPI_FN(mpi_local_rank)},
    {"mpi_local_size", MPI_FN(mpi_local_size)},
    {"mpi_host", MPI_FN(mpi_host)},
    {"mpi_barrier", MPI_FN(mpi_barrier)},
    {"mpi_broadcast", MPI_FN(mpi_broadcast)},
    {"mpi_gather", MPI_FN(mpi_gather)},
    {"mpi_allgather", MPI_FN(mpi_allgather)},
    {"mpi_scatter", MPI_FN(mpi_scatter)},
    {"mpi_abort", MPI_FN(mpi_abort)},
    {"mpi_finalize", MPI_FN(mpi_finalize)},
    {NULL, NULL},
};

/* Adds the mpi_* functions to the module table on top of the stack, and mpi_available
 * (whether this build has MPI) and mpi_missing (what to do when it has not). */
void gptoss_open_mpi(lua_State *L) {
    luaL_setfuncs(L, mpi_fns, 0);
    lua_pushboolean(L, HAVE_MPI);
    lua_setfield(L, -2, "mpi_available");
    lua_pushstring(L, NO_MPI);
    lua_setfield(L, -2, "mpi_missing");
}
