/* libFuzzer target: the Lua surface of the C module itself, require "gptoss"
 * with the binding (src/lua), the core and the CPU build's engine glue (the
 * C of src/hip) linked into the fuzzer. The driver, lua_api.lua and
 * lua_api_input.lua here (files of their own: too long for a C string),
 * reads the input as a program of API calls on a pool of objects: synthetic,
 * loaded and checkpoint models, CPU replicas, their steps (fed ones
 * included), per-slot sampling, forks, traces, tokenizers, decoders,
 * samplers, host tensors and the module's functions, each argument either
 * plausible or generated (wrong types, out-of-range, huge, negative, NaN,
 * strings, nested and self-containing tables, objects of other classes) or
 * a trap: a table whose metamethods (__index, __len, __pairs, __tostring,
 * __eq, __close, __gc ...) run another call mid-call (closing a replica,
 * collecting garbage, running an object's finaliser by hand, resurrecting
 * objects from another object's __gc, raising). Finalisers of garbage run
 * such calls too, at whatever allocation a C function makes. Every call is
 * under pcall: a Lua error is fine; a sanitizer report, a crash or a hang
 * (libFuzzer's -timeout) is a finding.
 *
 * Cost caps, so that one input takes milliseconds: at most 48 calls an
 * input, traps included, nested at most 3 deep; models are the tests' tiny
 * shape (97 tokens, 16 wide, 2 layers) unless a generated config or a named
 * shape makes them larger, and a larger one (over 1 MiB of fp32 weights, or
 * of a size the driver did not read) is never stepped, saved or read whole;
 * a replica is made only when model:replica_bytes says it takes at most
 * 1 MiB and with at most 4 threads; a new tensor holds at most 4096 values;
 * a trap's __len says at most one more than its table holds (a length of
 * 2^31 would have the binding allocate gigabytes, which libFuzzer reports as
 * running out of memory; -1 and non-integers reach the length checks); the
 * tokenizer is a 97-entry file written at startup, never the full
 * vocabulary (tens of milliseconds to load). */
#define _XOPEN_SOURCE 700 /* nftw's FTW_DEPTH and FTW_PHYS */
#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>

#include "fuzz_lua.h"

int luaopen_gptoss_core(lua_State *L);

/* The files the driver writes (its model, checkpoint and tokenizer at
 * startup, what an input saves under out/): in memory where /dev/shm is,
 * removed when the run exits (a run that crashes leaves them). */
static char scratch[96], scratch_out[112];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT;
}

static void scratch_remove(void) { nftw(scratch, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

/* fuzz_scratch_clear(): out/ emptied, so that each input saves into the
 * same empty folder whatever the last one left */
static int scratch_clear(lua_State *L) {
    (void)L;
    nftw(scratch_out, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    if (mkdir(scratch_out, 0700) != 0)
        abort(); /* the machine's fault, not the binding's */
    return 0;
}

void fuzz_lua_open(lua_State *L) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_gptoss_core);
    lua_setfield(L, -2, "gptoss.core");
    lua_pop(L, 1);
    snprintf(scratch, sizeof scratch, "%s/gptoss-fuzz-api-%d",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
    snprintf(scratch_out, sizeof scratch_out, "%s/out", scratch);
    scratch_remove(); /* a crashed run of the same process id left its files */
    if (mkdir(scratch, 0700) != 0)
        abort();
    atexit(scratch_remove);
    lua_pushstring(L, scratch);
    lua_setglobal(L, "FUZZ_SCRATCH");
    lua_pushcfunction(L, scratch_clear);
    lua_setglobal(L, "fuzz_scratch_clear");
    lua_pushstring(L, FUZZ_LUA_DIR "/../tests/fuzz/");
    lua_setglobal(L, "FUZZ_DIR");
}

const char fuzz_lua_driver[] = "return dofile(FUZZ_DIR .. 'lua_api.lua')\n";
