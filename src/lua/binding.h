/* The Lua binding's shared pieces: one class (metatable) per object kind,
 * each registered by its file's open function through gptoss_lua_class, and
 * every function one binding file calls in another. A class's Lua methods
 * and metamethods are named <class>_<op> (replica_fork, step_tokens,
 * step_gc, ...), module functions and the methods one file registers for
 * another gptoss_lua_<name> (gptoss_lua_replica_step). Errors raised here
 * name the Lua function the user called, then the core's message.
 *
 * Lifetimes (docs/architecture.md#layers): a script can end an object's life
 * in the middle of any binding call (an argument's metamethod, __tostring in
 * an error message, on_progress, or a finaliser, which any allocation may
 * run, can close a replica or call a __gc by hand). So a binding function
 * reaches an object only through gptoss_lua_check and uses the C pointer it
 * gives only until its next call that can run Lua: lua_get* or lua_geti of
 * a caller's table, luaL_len, luaL_tolstring, a call, and any allocation (a
 * lua_newuserdatauv, lua_createtable, lua_push*string, a luaL_Buffer that
 * grows). lua_push* of numbers and lua_rawseti or lua_setfield on a table of
 * its own run none. It reads its arguments first, allocates what it
 * returns, then takes the pointers it computes with; where it must run Lua
 * in between it copies what it needs or checks again. */
#ifndef GPTOSS_BINDING_H
#define GPTOSS_BINDING_H

#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>

#include "../core/engine.h"
#include "../core/grammar.h"
#include "../core/model.h"
#include "../core/sampler.h"
#include "../core/tensor.h"
#include "../core/tokenizer.h"

#define GPTOSS_TENSOR_MT "gptoss.tensor"
#define GPTOSS_MODEL_MT "gptoss.model"
#define GPTOSS_REPLICA_MT "gptoss.replica"
#define GPTOSS_STEP_MT "gptoss.step"
#define GPTOSS_TOKENIZER_MT "gptoss.tokenizer"
#define GPTOSS_DECODER_MT "gptoss.decoder"
#define GPTOSS_SAMPLER_MT "gptoss.sampler"
#define GPTOSS_GRAMMAR_MT "gptoss.grammar"
#define GPTOSS_MATCHER_MT "gptoss.matcher"
#define GPTOSS_TOKEN_SET_MT "gptoss.token_set"

/* ---- class.c: classes and the lives of their objects ---- */

/* Where an object is in its life; it only moves forward. */
typedef enum { GPTOSS_LUA_OPEN, GPTOSS_LUA_CLOSED, GPTOSS_LUA_COLLECTED } gptoss_lua_life;

/* The first member of every object's userdata. */
typedef struct {
    gptoss_lua_life life;
} gptoss_lua_object;

/* Pushes a new object of the class: size bytes (a struct that starts with a
 * gptoss_lua_object) zeroed and open, with nuv user values. */
void *gptoss_lua_new(lua_State *L, const char *class, size_t size, int nuv);
/* The object of the class at idx, open: raises as luaL_checkudata does for
 * anything else, and "<class>: used after close" or "<class>: used after it
 * was garbage-collected" once its life has ended ("<fn>: <class>: ..." with
 * fn, for an argument of fn rather than the object a method was called on).
 * Runs no Lua. */
void *gptoss_lua_check(lua_State *L, int idx, const char *class, const char *fn);
/* The same, NULL for a value of another type. */
void *gptoss_lua_test(lua_State *L, int idx, const char *class, const char *fn);
/* Where the object of the class at idx is in its life (for what answers
 * after it ended: r.closed, tostring(r)). */
gptoss_lua_life gptoss_lua_life_of(lua_State *L, int idx, const char *class);
/* Ends the life of the object of the class at idx: how is CLOSED for a
 * close, COLLECTED for __gc (which a script may call by hand, again and
 * again). Returns the object when it was open, for the caller to free what
 * it holds, else NULL: that was done before. */
void *gptoss_lua_end(lua_State *L, int idx, const char *class, gptoss_lua_life how);

/* A class: methods are looked up first, then getter(L) for other keys (the
 * object at 1, the key at 2; it returns 0 for none); meta holds the
 * metamethods (__gc and __close are the destructor, __tostring, ...).
 * Without methods the objects are not indexable. */
typedef struct {
    const char *name;
    const luaL_Reg *methods;
    lua_CFunction getter; /* NULL: methods only */
    const luaL_Reg *meta; /* NULL: none */
} gptoss_lua_class_def;
void gptoss_lua_class(lua_State *L, const gptoss_lua_class_def *def);

/* ---- options.c: options tables and argument checks ---- */

/* An integer field of the options table at idx (absent: dflt), with an error
 * naming the function and the field when it is not an integer. */
lua_Integer gptoss_opt_integer(lua_State *L, int idx, const char *fn, const char *field,
                               lua_Integer dflt);
/* The same for a number field (numeric strings convert, as for integers). */
lua_Number gptoss_opt_number(lua_State *L, int idx, const char *fn, const char *field,
                             lua_Number dflt);
/* The same for a string field restricted to a list of choices; returns the index. */
int gptoss_opt_choice(lua_State *L, int idx, const char *fn, const char *field,
                      const char *const *choices, int dflt);
/* An integer argument that the engine takes as a C int: raises naming the
 * function, what it is and the value when it is not an integer or does not
 * fit (the engine then checks its range; a cast would have wrapped it). */
int gptoss_check_int(lua_State *L, int idx, const char *fn, const char *what);
/* Raises "<fn>: unknown option '<key>' (known: ...)" for a key of the options
 * table at idx that the NULL-terminated list known lacks: a misspelt option
 * is an error, never silently its default. */
void gptoss_opt_known(lua_State *L, int idx, const char *fn, const char *const *known);
/* Raises unless dev names a visible GPU: "no GPU is available" or "out of range
 * 0..n-1". The Lua API numbers GPUs from 0 as HIP and CUDA do, so dev is the index. */
int gptoss_check_device(lua_State *L, lua_Integer dev, const char *fn);

/* ---- tensor.c ---- */

#define GPTOSS_MAX_DIMS 8

typedef struct {
    gptoss_lua_object obj;
    gptoss_storage *storage; /* a reference of its own; NULL once collected */
    size_t offset; /* elements */
    int ndim;
    int64_t shape[GPTOSS_MAX_DIMS];
} lua_tensor;

/* Pushes a tensor that views nothing yet, for gptoss_tensor_view to fill:
 * allocated before the caller takes the storage it will view (the
 * lifetimes rule above). Never returned to Lua empty. */
lua_tensor *gptoss_push_tensor(lua_State *L);
/* t views storage s (retained) from offset with this shape. */
void gptoss_tensor_view(lua_tensor *t, gptoss_storage *s, size_t offset, int ndim, const int64_t *shape);
/* Pushes a new zeroed tensor; raises a Lua error when memory is short. */
lua_tensor *gptoss_new_tensor(lua_State *L, gptoss_dtype dtype, int ndim, const int64_t *shape);
/* The tensor at idx, alive (gptoss_lua_check). */
lua_tensor *gptoss_check_tensor(lua_State *L, int idx);
size_t gptoss_tensor_numel(const lua_tensor *t);
void *gptoss_tensor_data(const lua_tensor *t);

/* ---- model.c ---- */

/* The model of the model object at idx, alive (gptoss_lua_check). */
gptoss_model *gptoss_check_model(lua_State *L, int idx);

/* ---- replica.c: what the files of a replica's methods share ---- */

typedef struct {
    gptoss_lua_object obj;
    gptoss_engine *e; /* NULL once closed or collected */
} lua_replica;

/* The engine of the replica at idx; raises once it is closed or collected. */
gptoss_engine *gptoss_check_engine(lua_State *L, int idx);
/* 0-based slot from a 1-based argument, range-checked. */
int gptoss_check_slot(lua_State *L, gptoss_engine *e, int idx, const char *fn);
/* Raises "<fn>: <err>" for an engine's status. A row whose token could not
 * be drawn is always the failure of a step's tokens, also when a step fed
 * by it finds out. */
int gptoss_raise_status(lua_State *L, const char *fn, gptoss_status s, const char *err);

/* ---- sampler.c ---- */

/* The sampler options a table may hold: gptoss.sampler's and r:sampling's; Lua reads
 * them as gptoss.sample_options(). */
#define GPTOSS_SAMPLE_OPTIONS                                                                                     \
    "mode", "temperature", "top_k", "top_p", "min_p", "seed", "logit_bias", "logprobs", "presence_penalty",          \
        "frequency_penalty"
/* Reads the parameters from the table at idx with their defaults; a
 * default-mode seed left out is a fresh random one. Raises on wrong types;
 * ranges are the core's check. */
void gptoss_read_sample_params(lua_State *L, int idx, const char *fn, gptoss_sample_params *p);
/* The table's logit_bias = {[id] = bias} as a list sorted by id, kept in a
 * userdata pushed on the stack (nil and NULL without one); *n entries. Raises on keys
 * that are no token id (below vocab when vocab > 0), biases that are not
 * finite or -inf as floats, more than GPTOSS_MAX_LOGIT_BIAS entries. */
const gptoss_logit_bias *gptoss_read_logit_bias(lua_State *L, int idx, const char *fn, int vocab, int *n);
/* The table's logprobs (0..GPTOSS_MAX_LOGPROBS), -1 without one. */
int gptoss_read_logprobs(lua_State *L, int idx, const char *fn);
/* Pushes {{id =, logprob =}, ...}: the n most likely tokens' logprobs. */
void gptoss_push_top_logprobs(lua_State *L, const int *ids, const double *logprobs, int n);

/* ---- tokenizer.c ---- */

/* The tokenizer at idx, alive; fn NULL for the object a method was called on,
 * else the function it was given to (gptoss_lua_check). */
gptoss_tokenizer *gptoss_check_tokenizer(lua_State *L, int idx, const char *fn);

/* ---- grammar_json.c ---- */

/* Pushes the JSON text of the value at idx (a table, string, number,
 * boolean, or a NULL light userdata such as cjson.null): tables with keys
 * 1..n are arrays, others (the empty one too) objects with their keys in
 * sorted order. Raises "<fn>: <what>.<path>: ..." for what JSON cannot say. */
const char *gptoss_lua_json_text(lua_State *L, int idx, const char *fn, const char *what, size_t *len);

/* ---- matcher.c ---- */

/* Pushes a new matcher object with user values grammar (at grammar_idx) and
 * tokenizer (at tokenizer_idx); returns where its core matcher goes (NULL
 * until set). */
gptoss_matcher **gptoss_lua_new_matcher(lua_State *L, int grammar_idx, int tokenizer_idx);
/* The matcher at idx, alive; fn NULL for the object a method was called on,
 * else the function it was given to (gptoss_lua_check). */
gptoss_matcher *gptoss_check_matcher(lua_State *L, int idx, const char *fn);
/* A matcher given to a step's constraint waits for the token the step draws
 * for it (its pending step, a user value): these give the token to it
 * first, so that it is never read or masked a token behind. */
void gptoss_lua_matcher_settle(lua_State *L, int idx);
/* The step at step_idx will draw the next token of the matcher at idx. */
void gptoss_lua_matcher_pend(lua_State *L, int idx, int step_idx);
/* The matcher at idx takes token, drawn for it by the step at step_idx,
 * when that is its pending step (token < 0: the row drew none, the
 * matcher stays as it was); no longer pending either way. A failure
 * (gptoss_matcher_accept's status and err) leaves it as it was. */
gptoss_status gptoss_lua_matcher_took(lua_State *L, int idx, int step_idx, int token, char *err);

/* ---- step_constraint.c: r:step's constraint option ---- */

/* Reads the step table's constraint = {[row] = matcher} (rows 1..n) into
 * q: each matcher settled and its mask taken, the masks and rows in
 * userdata left on the stack, then a table {[row] = matcher} of its own,
 * whose stack index is returned (0 and nothing pushed without the option). */
int gptoss_lua_read_constraint(lua_State *L, int tbl, int n, int vocab, gptoss_step_request *q);

/* ---- step.c ---- */

/* Gives the matchers of the step at idx (its constraint) the tokens it
 * drew, waiting for them; once. Each takes its own token before a matcher
 * that could not take its own raises, naming the first such row. */
void gptoss_lua_step_settle(lua_State *L, int idx);

/* ---- the classes' open functions and the module's functions ---- */

void gptoss_open_tensor(lua_State *L);
void gptoss_open_model(lua_State *L);
void gptoss_open_replica(lua_State *L);
int gptoss_lua_weight_formats(lua_State *L);
int gptoss_lua_kv_formats(lua_State *L);
void gptoss_open_step(lua_State *L);
void gptoss_open_tokenizer(lua_State *L);
void gptoss_open_sampler(lua_State *L);
void gptoss_open_grammar(lua_State *L);
void gptoss_open_matcher(lua_State *L);
void gptoss_open_sender(lua_State *L);
/* mpi.c: adds the mpi_* functions to the module table on top of the stack */
void gptoss_open_mpi(lua_State *L);

int gptoss_lua_load(lua_State *L);          /* model.c */
int gptoss_lua_synthetic(lua_State *L);
int gptoss_lua_named_config(lua_State *L);
int gptoss_lua_replica(lua_State *L);       /* replica.c: model:replica */
int gptoss_lua_replica_bytes(lua_State *L); /* model:replica_bytes */
int gptoss_lua_replica_step(lua_State *L);  /* step.c: r:step */
int gptoss_lua_replica_sampling(lua_State *L);       /* sampler.c: r:sampling */
int gptoss_lua_replica_check_sampling(lua_State *L); /* r:check_sampling */
int gptoss_lua_replica_trace(lua_State *L); /* trace.c: r:trace */
int gptoss_lua_trace_stages(lua_State *L);
int gptoss_lua_tensor_new(lua_State *L);    /* tensor.c */
int gptoss_lua_tensor_load(lua_State *L);
int gptoss_lua_bf16_round(lua_State *L);
int gptoss_lua_tokenizer(lua_State *L);     /* tokenizer.c */
int gptoss_lua_sampler(lua_State *L);       /* sampler.c */
int gptoss_lua_sample_options(lua_State *L);
int gptoss_lua_grammar_json_schema(lua_State *L); /* grammar.c */
int gptoss_lua_grammar_regex(lua_State *L);
int gptoss_lua_grammar_ebnf(lua_State *L);
int gptoss_lua_pcre2_full_match(lua_State *L);
int gptoss_lua_devices(lua_State *L);       /* device.c */
int gptoss_lua_device_memory(lua_State *L);
int gptoss_lua_copy_bandwidth(lua_State *L);
int gptoss_lua_clock(lua_State *L);         /* host.c */
int gptoss_lua_realtime_ms(lua_State *L);
int gptoss_lua_isatty(lua_State *L);
int gptoss_lua_trim_memory(lua_State *L);
int gptoss_lua_regular_file(lua_State *L);
int gptoss_lua_catch_interrupts(lua_State *L);
int gptoss_lua_interrupted(lua_State *L);
int gptoss_lua_wait_readable(lua_State *L);
int gptoss_lua_sender(lua_State *L);         /* sender.c */
int gptoss_lua_edit_open(lua_State *L);     /* line_edit.c */
int gptoss_lua_edit_line(lua_State *L);
int gptoss_lua_edit_history(lua_State *L);
int gptoss_lua_edit_close(lua_State *L);

#endif
