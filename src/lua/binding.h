/* Shared pieces of the Lua binding: one metatable per object kind, each
 * registered by its file's open function. */
#ifndef GPTOSS_BINDING_H
#define GPTOSS_BINDING_H

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>

#include "../core/sampler.h"
#include "../core/tensor.h"

#define GPTOSS_TENSOR_MT "gptoss.tensor"
#define GPTOSS_MODEL_MT "gptoss.model"
#define GPTOSS_REPLICA_MT "gptoss.replica"
#define GPTOSS_STEP_MT "gptoss.step"
#define GPTOSS_TOKENIZER_MT "gptoss.tokenizer"
#define GPTOSS_SAMPLER_MT "gptoss.sampler"

#define GPTOSS_MAX_DIMS 8

typedef struct {
    gptoss_storage *storage;
    size_t offset; /* elements */
    int ndim;
    int64_t shape[GPTOSS_MAX_DIMS];
} lua_tensor;

/* Pushes a tensor viewing storage (retained) from offset with this shape. */
lua_tensor *gptoss_push_tensor(lua_State *L, gptoss_storage *s, size_t offset, int ndim,
                               const int64_t *shape);
/* Pushes a new zeroed tensor; raises a Lua error when memory is short. */
lua_tensor *gptoss_new_tensor(lua_State *L, gptoss_dtype dtype, int ndim, const int64_t *shape);
lua_tensor *gptoss_check_tensor(lua_State *L, int idx);
size_t gptoss_tensor_numel(const lua_tensor *t);
void *gptoss_tensor_data(const lua_tensor *t);

/* Reads an integer field of an options table (absent: dflt), with an error
 * naming the function and the field when it is not an integer. */
lua_Integer gptoss_opt_integer(lua_State *L, int idx, const char *fn, const char *field,
                               lua_Integer dflt);
/* Same for a number field (numeric strings convert, as for integers). */
lua_Number gptoss_opt_number(lua_State *L, int idx, const char *fn, const char *field,
                             lua_Number dflt);
/* Same for a string field restricted to a list of choices; returns the index. */
int gptoss_opt_choice(lua_State *L, int idx, const char *fn, const char *field,
                      const char *const *choices, int dflt);
/* Raises "<fn>: unknown option '<key>' (known: ...)" for a key of the options
 * table at idx that the NULL-terminated list known lacks: a misspelt option
 * is an error, never silently its default. */
void gptoss_opt_known(lua_State *L, int idx, const char *fn, const char *const *known);

/* Reads sampler options (GPTOSS_SAMPLE_OPTIONS) of the table at idx with
 * their defaults; a default-mode seed left out is a fresh random one. Raises
 * on wrong types; ranges are the core's check. */
#define GPTOSS_SAMPLE_OPTIONS "mode", "temperature", "top_k", "top_p", "min_p", "seed"
void gptoss_read_sample_params(lua_State *L, int idx, const char *fn, gptoss_sample_params *p);

/* Raises unless dev (1-based) names a visible GPU: "no GPU is available" or
 * "out of range 1..n". Returns the 0-based index. */
int gptoss_check_device(lua_State *L, lua_Integer dev, const char *fn);

/* Sets __index to a function that consults the methods, then getter(L) for
 * other keys (the getter receives the object at 1 and the key at 2). */
void gptoss_new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction getter);

void gptoss_open_tensor(lua_State *L);
void gptoss_open_model(lua_State *L);
void gptoss_open_replica(lua_State *L);
void gptoss_open_tokenizer(lua_State *L);
void gptoss_open_sampler(lua_State *L);

/* functions placed in the module table */
int gptoss_lua_load(lua_State *L);
int gptoss_lua_synthetic(lua_State *L);
int gptoss_lua_tensor_new(lua_State *L);
int gptoss_lua_tensor_load(lua_State *L);
int gptoss_lua_named_config(lua_State *L);
int gptoss_lua_tokenizer(lua_State *L);
int gptoss_lua_sampler(lua_State *L);

#endif
