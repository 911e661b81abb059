/* gptoss.model: a course .bin or a checkpoint directory mapped read-only, or
 * a synthetic model. */
#include <stdio.h>
#include <string.h>

#include "../core/checkpoint.h"
#include "../core/model.h"
#include "../core/model_load.h"
#include "../core/synth_params.h"
#include "../hip/backend.h"
#include "binding.h"

typedef struct {
    gptoss_lua_object obj;
    gptoss_model *m; /* the binding's reference (replicas' engines hold their own) */
} lua_model;

gptoss_model *gptoss_check_model(lua_State *L, int idx) {
    return ((lua_model *)gptoss_lua_check(L, idx, GPTOSS_MODEL_MT, NULL))->m;
}

/* gptoss.core.load(path) */
int gptoss_lua_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_model *m;
    lua_model *u = gptoss_lua_new(L, GPTOSS_MODEL_MT, sizeof *u, 0); /* allocated first: no leak on error */
    if (gptoss_model_open(path, &m, err))
        return luaL_error(L, "load: %s", err);
    u->m = m;
    return 1;
}

static void read_config(lua_State *L, int idx, gptoss_config *c) {
    luaL_checktype(L, idx, LUA_TTABLE);
    memset(c, 0, sizeof *c);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const gptoss_field *f = NULL;
        for (int i = 0; key && i < GPTOSS_N_FIELDS; i++)
            if (strcmp(gptoss_fields[i].name, key) == 0)
                f = &gptoss_fields[i];
        if (!f)
            luaL_error(L, "synthetic: unknown config field '%s'", luaL_tolstring(L, -2, NULL));
        int ok;
        if (f->type == GPTOSS_FIELD_INT) {
            lua_Integer v = lua_tointegerx(L, -1, &ok);
            if (!ok || v < INT32_MIN || v > INT32_MAX)
                luaL_error(L, "synthetic: config field %s must be a 32-bit integer (got %s)", key,
                           luaL_tolstring(L, -1, NULL));
            int32_t iv = (int32_t)v;
            memcpy((char *)c + f->offset, &iv, sizeof iv);
        } else {
            lua_Number v = lua_tonumberx(L, -1, &ok);
            if (!ok)
                luaL_error(L, "synthetic: config field %s must be a number (got %s)", key,
                           luaL_typename(L, -1));
            float fv = (float)v;
            memcpy((char *)c + f->offset, &fv, sizeof fv);
        }
        lua_pop(L, 1);
    }
}

static void push_config(lua_State *L, const gptoss_config *c) {
    lua_createtable(L, 0, GPTOSS_N_FIELDS);
    for (int i = 0; i < GPTOSS_N_FIELDS; i++) {
        const gptoss_field *f = &gptoss_fields[i];
        if (f->type == GPTOSS_FIELD_INT) {
            int32_t v;
            memcpy(&v, (const char *)c + f->offset, sizeof v);
            lua_pushinteger(L, v);
        } else {
            float v;
            memcpy(&v, (const char *)c + f->offset, sizeof v);
            lua_pushnumber(L, v);
        }
        lua_setfield(L, -2, f->name);
    }
}

/* gptoss.core.named_config(name) -> config table or nil */
int gptoss_lua_named_config(lua_State *L) {
    gptoss_config c;
    if (gptoss_config_named(luaL_checkstring(L, 1), &c))
        return 0;
    push_config(L, &c);
    return 1;
}

/* gptoss.core.synthetic(config_table, seed): every field must be given */
int gptoss_lua_synthetic(lua_State *L) {
    gptoss_config c;
    read_config(L, 1, &c);
    lua_Integer seed = luaL_checkinteger(L, 2);
    lua_model *u = gptoss_lua_new(L, GPTOSS_MODEL_MT, sizeof *u, 0);
    char err[GPTOSS_ERR_LEN];
    if (gptoss_model_synthetic(&c, (uint64_t)seed, &u->m, err))
        return luaL_error(L, "synthetic: %s", err);
    return 1;
}

static void push_shape(lua_State *L, const int64_t *dims, int ndim) {
    lua_createtable(L, ndim, 0);
    for (int i = 0; i < ndim; i++) {
        lua_pushinteger(L, dims[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* model.tensors: records in file order, also reachable by name; matrix:
 * whether a bf16 replica holds it in bf16 */
static void push_tensors(lua_State *L, gptoss_layout layout) {
    lua_createtable(L, GPTOSS_N_TENSORS, GPTOSS_N_TENSORS);
    for (int i = 0; i < GPTOSS_N_TENSORS; i++) {
        const gptoss_tensor_desc *d = &layout.t[i];
        lua_createtable(L, 0, 5);
        lua_pushstring(L, d->name);
        lua_setfield(L, -2, "name");
        push_shape(L, d->dims, d->ndim);
        lua_setfield(L, -2, "shape");
        lua_pushinteger(L, (lua_Integer)(d->count * 4));
        lua_setfield(L, -2, "bytes");
        lua_pushinteger(L, (lua_Integer)d->offset);
        lua_setfield(L, -2, "offset");
        lua_pushboolean(L, gptoss_tensor_is_matrix(i));
        lua_setfield(L, -2, "matrix");
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, d->name);
        lua_rawseti(L, -2, i + 1);
    }
}

/* model.windowed[l]: whether Lua layer l (1-based) attends to the last
 * sliding_window keys only */
static void push_windowed(lua_State *L, const gptoss_config *c) {
    lua_createtable(L, c->n_layers, 0);
    for (int l = 0; l < c->n_layers; l++) {
        lua_pushboolean(L, gptoss_layer_windowed(c, l));
        lua_rawseti(L, -2, l + 1);
    }
}

typedef struct {
    int id;
    int ndim;
    int64_t dims[4]; /* copied: the model may go while the caller allocates */
    uint64_t first, count;
} slice;

/* name at arg, then optional 1-based layer and expert: the elements they
 * select in the tensor of the model at 1 */
static slice check_slice(lua_State *L, int arg, const char *fn) {
    const char *name = luaL_checkstring(L, arg); /* before the model: a number converted allocates */
    const gptoss_model *m = gptoss_check_model(L, 1);
    int id = gptoss_tensor_by_name(name);
    if (id < 0)
        luaL_error(L, "%s: unknown tensor '%s'", fn, name);
    const gptoss_tensor_desc *d = &m->layout.t[id];
    slice s = {id, d->ndim, {0}, 0, d->count};
    memcpy(s.dims, d->dims, sizeof s.dims);
    if (lua_isnoneornil(L, arg + 1) && !lua_isnoneornil(L, arg + 2))
        luaL_error(L, "%s: an expert needs a layer", fn);
    int k = 0;
    for (; k < 2 && !lua_isnoneornil(L, arg + 1 + k); k++) {
        const char *what = k == 0 ? "layer" : "expert";
        if (!(k == 0 ? d->per_layer : d->per_expert))
            luaL_error(L, "%s: %s has no %s dimension", fn, name, what);
        lua_Integer i = luaL_checkinteger(L, arg + 1 + k);
        if (i < 1 || i > d->dims[k])
            luaL_error(L, "%s: %s %I is out of range 1..%I", fn, what, i, (lua_Integer)d->dims[k]);
        s.count /= (uint64_t)d->dims[k];
        s.first += (uint64_t)(i - 1) * s.count;
        s.ndim--;
    }
    memmove(s.dims, s.dims + k, sizeof(int64_t) * (size_t)s.ndim); /* the dimensions left */
    return s;
}

/* model:tensor(name [, layer [, expert]]) -> host copy of the tensor or slice */
static int model_tensor(lua_State *L) {
    gptoss_check_model(L, 1);
    slice s = check_slice(L, 2, "tensor");
    lua_tensor *t = gptoss_new_tensor(L, GPTOSS_F32, s.ndim, s.dims);
    gptoss_model_read(gptoss_check_model(L, 1), s.id, s.first, s.count, gptoss_tensor_data(t));
    return 1;
}

/* model:gpu_tensor(device, name [, layer [, expert]]): a synthetic model's
 * slice generated by the GPU kernel on that device, copied back */
static int model_gpu_tensor(lua_State *L) {
    gptoss_check_model(L, 1);
    lua_Integer dev = luaL_checkinteger(L, 2);
    slice s = check_slice(L, 3, "gpu_tensor");
    if (!gptoss_model_is_synthetic(gptoss_check_model(L, 1)))
        return luaL_error(L, "gpu_tensor: only synthetic models are generated on a GPU");
    int device = gptoss_check_device(L, dev, "gpu_tensor");
    lua_tensor *t = gptoss_new_tensor(L, GPTOSS_F32, s.ndim, s.dims);
    const gptoss_model *m = gptoss_check_model(L, 1);
    gptoss_synth_param p = gptoss_synth_params(&m->config, m->seed, s.id);
    char err[GPTOSS_ERR_LEN];
    if (gptoss_hip_synth_read(device, &p, s.first, s.count, gptoss_tensor_data(t), err))
        return luaL_error(L, "gpu_tensor: %s", err);
    return 1;
}

/* model:save(path [, {format = "course" | "hf" | "original", shard_bytes = n, tokenizer = tok}]) */
static int model_save(lua_State *L) {
    static const char *const known[] = {"format", "shard_bytes", "tokenizer", NULL};
    static const char *const formats[] = {"course", "hf", "original", NULL};
    gptoss_check_model(L, 1);
    const char *path = luaL_checkstring(L, 2);
    int format = 0, tokenizer = 0; /* tokenizer: its stack slot, 0 for none */
    lua_Integer shard_bytes = (lua_Integer)GPTOSS_SHARD_BYTES;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        gptoss_opt_known(L, 3, "save", known);
        format = gptoss_opt_choice(L, 3, "save", "format", formats, 0);
        lua_getfield(L, 3, "shard_bytes");
        int given = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, 3, "tokenizer") != LUA_TNIL) {
            tokenizer = lua_gettop(L); /* kept on the stack, so alive until save returns */
            if (!gptoss_lua_test(L, tokenizer, GPTOSS_TOKENIZER_MT, "save"))
                return luaL_error(L, "save: tokenizer must be a gptoss tokenizer (got %s)",
                                  luaL_typename(L, tokenizer));
        }
        if ((given || tokenizer) && format == 0)
            return luaL_error(L, "save: %s is for checkpoints (format = \"hf\" or \"original\")",
                              given ? "shard_bytes" : "tokenizer");
        shard_bytes = gptoss_opt_integer(L, 3, "save", "shard_bytes", shard_bytes);
        if (shard_bytes < 1)
            return luaL_error(L, "save: shard_bytes must be a positive integer (got %I)", shard_bytes);
    }
    char err[GPTOSS_ERR_LEN];
    /* the options' metamethods ran: the objects are checked again */
    gptoss_model *m = gptoss_check_model(L, 1);
    const gptoss_tokenizer *tok = tokenizer ? gptoss_check_tokenizer(L, tokenizer, "save") : NULL;
    gptoss_status s =
        format == 0 ? gptoss_model_save(m, path, err)
                    : gptoss_checkpoint_save(m, path, gptoss_format_by_name(formats[format]), tok,
                                             (uint64_t)shard_bytes, err);
    if (s)
        return luaL_error(L, "save: %s", err);
    return 0;
}

/* model:experts_mxfp4() -> true, or false and the first expert weight that is not MXFP4 */
static int model_experts_mxfp4(lua_State *L) {
    gptoss_model *m = gptoss_check_model(L, 1);
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_model_experts_in(m, GPTOSS_WEIGHTS_MXFP4, err);
    if (s == GPTOSS_E_HOST_MEMORY)
        return luaL_error(L, "experts_mxfp4: %s", err);
    lua_pushboolean(L, s == GPTOSS_OK);
    if (s == GPTOSS_OK)
        return 1;
    lua_pushstring(L, err);
    return 2;
}

/* The tables are built from copies: building them allocates, and a
 * finaliser may let go of the model meanwhile. */
static int model_get(lua_State *L) {
    const gptoss_model *m = gptoss_check_model(L, 1);
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (!k)
        return 0;
    gptoss_config config = m->config;
    if (strcmp(k, "config") == 0)
        push_config(L, &config);
    else if (strcmp(k, "bytes") == 0)
        lua_pushinteger(L, (lua_Integer)m->layout.total_bytes);
    else if (strcmp(k, "trailing_bytes") == 0)
        lua_pushinteger(L, (lua_Integer)m->trailing_bytes);
    else if (strcmp(k, "path") == 0)
        m->path ? (void)lua_pushstring(L, m->path) : lua_pushnil(L);
    else if (strcmp(k, "synthetic") == 0)
        lua_pushboolean(L, gptoss_model_is_synthetic(m));
    else if (strcmp(k, "format") == 0)
        lua_pushstring(L, gptoss_format_name(m->format));
    else if (strcmp(k, "seed") == 0)
        gptoss_model_is_synthetic(m) ? lua_pushinteger(L, (lua_Integer)m->seed) : lua_pushnil(L);
    else if (strcmp(k, "tensors") == 0)
        push_tensors(L, m->layout);
    else if (strcmp(k, "windowed") == 0)
        push_windowed(L, &config);
    else
        return 0;
    return 1;
}

static int model_tostring(lua_State *L) {
    const gptoss_model *m = gptoss_check_model(L, 1);
    const gptoss_config *c = &m->config;
    char src[300];
    if (gptoss_model_is_synthetic(m))
        snprintf(src, sizeof src, "synthetic seed=%llu", (unsigned long long)m->seed);
    else
        snprintf(src, sizeof src, "%s %s", gptoss_format_name(m->format), m->path);
    lua_pushfstring(L,
                    "gptoss.model(%s: %d layers, hidden %d, %d experts (top %d), intermediate %d, "
                    "%d q heads / %d kv heads of %d, vocab %d, %f GB)",
                    src, c->n_layers, c->hidden_dim, c->n_experts, c->experts_per_token,
                    c->intermediate_dim, c->n_attn_heads, c->n_kv_heads, c->head_dim,
                    c->vocab_size, (double)m->layout.total_bytes / 1e9);
    return 1;
}

/* lets go of the binding's reference: replicas of the model keep theirs */
static int model_gc(lua_State *L) {
    lua_model *u = gptoss_lua_end(L, 1, GPTOSS_MODEL_MT, GPTOSS_LUA_COLLECTED);
    if (u) {
        gptoss_model_free(u->m);
        u->m = NULL;
    }
    return 0;
}

void gptoss_open_model(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"tensor", model_tensor},   {"gpu_tensor", model_gpu_tensor},
        {"save", model_save},       {"experts_mxfp4", model_experts_mxfp4},
        {"replica", gptoss_lua_replica},
        {"replica_bytes", gptoss_lua_replica_bytes}, {NULL, NULL},
    };
    static const luaL_Reg meta[] = {{"__gc", model_gc}, {"__tostring", model_tostring}, {NULL, NULL}};
    static const gptoss_lua_class_def model = {GPTOSS_MODEL_MT, methods, model_get, meta};
    gptoss_lua_class(L, &model);
}
