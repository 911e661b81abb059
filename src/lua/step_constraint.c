/* r:step's constraint option (docs/structured.md#constrained-steps): the
 * rows that draw under a grammar, each matcher's mask taken for the engine.
 * The tokens drawn go back to the matchers when the step's tokens are read
 * (gptoss_lua_step_settle), or before a matcher is used again. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/pool.h"
#include "binding.h"

/* The masks of a step's constrained rows, one task each: each row's own
 * matcher, their grammars' caches filling lock-free (grammar.h), so a
 * server's many constrained rows take the host's cores rather than one.
 * One pool a process, made at first use, for at most MASK_THREADS; a
 * step that finds it busy (another thread's) computes its masks itself. */
enum { MASK_THREADS = 8 };
static gptoss_pool *mask_pool;
static pthread_once_t mask_pool_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mask_pool_busy = PTHREAD_MUTEX_INITIALIZER;

static void make_mask_pool(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 1)
        mask_pool = gptoss_pool_new(cores < MASK_THREADS ? (int)cores : MASK_THREADS);
}

typedef struct {
    gptoss_matcher **matchers;
    uint32_t *masks;
    int words;
    char **errors; /* a failed row's message (malloc'd, or unrecorded_error), else NULL */
} mask_job;

/* a row's message where copying it failed (never freed) */
static char unrecorded_error[] = "out of host memory";

static void mask_task(void *ctx, int k) {
    mask_job *j = ctx;
    uint32_t *mask = j->masks + (size_t)k * (size_t)j->words;
    /* the matcher clears its own words; tokens past its vocabulary: never */
    const int matcher_words = gptoss_matcher_mask_words(j->matchers[k]);
    memset(mask + matcher_words, 0, sizeof(uint32_t) * (size_t)(j->words - matcher_words));
    char err[GPTOSS_ERR_LEN];
    if (gptoss_matcher_mask(j->matchers[k], mask, err)) {
        char *copy = strdup(err);
        j->errors[k] = copy ? copy : unrecorded_error;
    }
}

/* the masks of job's count rows, on the pool where it is free */
static void take_masks(mask_job *job, int count) {
    pthread_once(&mask_pool_once, make_mask_pool);
    if (count > 1 && mask_pool && pthread_mutex_trylock(&mask_pool_busy) == 0) {
        gptoss_pool_run(mask_pool, count, mask_task, job);
        pthread_mutex_unlock(&mask_pool_busy);
    } else {
        for (int k = 0; k < count; k++)
            mask_task(job, k);
    }
}

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
    int words = gptoss_mask_words(vocab), slots = count ? count : 1;
    int *rows = lua_newuserdatauv(L, sizeof(int) * (size_t)slots, 0);
    uint32_t *masks = lua_newuserdatauv(L, sizeof(uint32_t) * (size_t)words * (size_t)slots, 0);
    gptoss_matcher **matchers = lua_newuserdatauv(L, sizeof *matchers * (size_t)slots, 0);
    char **errors = lua_newuserdatauv(L, sizeof *errors * (size_t)slots, 0);
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
        matchers[k] = m; /* kept alive by own */
        errors[k] = NULL;
        rows[k++] = row - 1;
        lua_pop(L, 1);
    }
    mask_job job = {matchers, masks, words, errors};
    take_masks(&job, count);
    int failed = -1;
    char err[GPTOSS_ERR_LEN];
    for (k = 0; k < count; k++)
        if (errors[k]) {
            if (failed < 0) {
                failed = k;
                snprintf(err, sizeof err, "%s", errors[k]);
            }
            if (errors[k] != unrecorded_error)
                free(errors[k]);
        }
    if (failed >= 0)
        luaL_error(L, "step: constraint[%d]: %s", rows[failed] + 1, err);
    lua_pop(L, 2); /* matchers, errors */
    lua_remove(L, seen);
    lua_remove(L, given); /* own, rows, masks from given on */
    lua_rotate(L, given, -1); /* rows, masks, own */
    q->mask_rows = rows, q->masks = masks, q->n_masks = count;
    return lua_gettop(L);
}
