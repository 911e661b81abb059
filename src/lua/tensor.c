/* gptoss.tensor: host tensors (f32, i32), 1-based indexing; t[i] is an
 * element of a 1-D tensor or a row view of an N-D one. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../core/bf16.h"
#include "../core/checked.h"
#include "../core/regular_file.h"
#include "binding.h"

static const char *const dtype_names[] = {"f32", "i32", NULL};

/* Elements of a shape; *overflow set when its 4-byte values pass SIZE_MAX bytes */
static size_t shape_numel(int ndim, const int64_t *shape, int *overflow) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n = gptoss_checked_mul(n, (uint64_t)shape[i], overflow);
    *overflow |= gptoss_checked_mul(n, 4, overflow) > SIZE_MAX;
    return (size_t)n;
}

size_t gptoss_tensor_numel(const lua_tensor *t) {
    int overflow = 0; /* a tensor's storage holds them all */
    return shape_numel(t->ndim, t->shape, &overflow);
}

void *gptoss_tensor_data(const lua_tensor *t) { return (char *)t->storage->data + t->offset * 4; }

lua_tensor *gptoss_push_tensor(lua_State *L) {
    return gptoss_lua_new(L, GPTOSS_TENSOR_MT, sizeof(lua_tensor), 0);
}

void gptoss_tensor_view(lua_tensor *t, gptoss_storage *s, size_t offset, int ndim, const int64_t *shape) {
    gptoss_storage_retain(s);
    t->storage = s;
    t->offset = offset;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
}

lua_tensor *gptoss_new_tensor(lua_State *L, gptoss_dtype dtype, int ndim, const int64_t *shape) {
    lua_tensor *t = gptoss_push_tensor(L); /* first: a raise below leaks nothing */
    int overflow = 0;
    size_t n = shape_numel(ndim, shape, &overflow);
    gptoss_storage *s = overflow ? NULL : gptoss_storage_new(dtype, n);
    if (!s)
        luaL_error(L, "tensor: cannot allocate %f MiB", (double)n * 4 / 1048576.0);
    gptoss_tensor_view(t, s, 0, ndim, shape);
    gptoss_storage_release(s); /* the view holds the only reference now */
    return t;
}

lua_tensor *gptoss_check_tensor(lua_State *L, int idx) {
    return gptoss_lua_check(L, idx, GPTOSS_TENSOR_MT, NULL);
}

/* shape from a Lua table of positive integers */
static int read_shape(lua_State *L, int idx, const char *fn, int64_t *shape) {
    if (!lua_istable(L, idx))
        luaL_error(L, "%s: shape must be a table (got %s)", fn, luaL_typename(L, idx));
    int ndim = (int)luaL_len(L, idx);
    if (ndim < 1 || ndim > GPTOSS_MAX_DIMS)
        luaL_error(L, "%s: shape must have 1..%d dimensions (got %d)", fn, GPTOSS_MAX_DIMS, ndim);
    for (int i = 0; i < ndim; i++) {
        lua_geti(L, idx, i + 1);
        int ok;
        lua_Integer d = lua_tointegerx(L, -1, &ok);
        if (!ok || d < 1 || d > INT32_MAX)
            luaL_error(L, "%s: shape[%d] must be a positive integer (got %s)", fn, i + 1,
                       luaL_tolstring(L, -1, NULL));
        shape[i] = d;
        lua_pop(L, 1);
    }
    int overflow = 0;
    shape_numel(ndim, shape, &overflow);
    if (overflow)
        luaL_error(L, "%s: a shape of %d dimensions this large holds more than 2^64 bytes of 4-byte values", fn,
                   ndim);
    return ndim;
}

static void set_elem(lua_State *L, const lua_tensor *t, size_t i, int vidx, const char *what) {
    void *data = gptoss_tensor_data(t);
    if (t->storage->dtype == GPTOSS_F32) {
        int ok;
        lua_Number v = lua_tonumberx(L, vidx, &ok);
        if (!ok)
            luaL_error(L, "%s must be a number (got %s)", what, luaL_typename(L, vidx));
        ((float *)data)[i] = (float)v;
    } else {
        int ok;
        lua_Integer v = lua_tointegerx(L, vidx, &ok);
        if (!ok || v < INT32_MIN || v > INT32_MAX)
            luaL_error(L, "%s must be a 32-bit integer (got %s)", what, luaL_tolstring(L, vidx, NULL));
        ((int32_t *)data)[i] = (int32_t)v;
    }
}

static void push_elem(lua_State *L, const lua_tensor *t, size_t i) {
    const void *data = gptoss_tensor_data(t);
    if (t->storage->dtype == GPTOSS_F32)
        lua_pushnumber(L, ((const float *)data)[i]);
    else
        lua_pushinteger(L, ((const int32_t *)data)[i]);
}

/* gptoss.core.tensor(dtype, shape [, flat values]) */
int gptoss_lua_tensor_new(lua_State *L) {
    lua_settop(L, 3); /* the new tensor goes above the arguments */
    int dtype = luaL_checkoption(L, 1, NULL, dtype_names);
    int64_t shape[GPTOSS_MAX_DIMS];
    int ndim = read_shape(L, 2, "tensor", shape);
    lua_tensor *t = gptoss_new_tensor(L, (gptoss_dtype)dtype, ndim, shape);
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        size_t n = gptoss_tensor_numel(t);
        lua_Integer given = luaL_len(L, 3);
        if (given < 0 || (uint64_t)given != n)
            return luaL_error(L, "tensor: %I values given for a shape of %I elements", given, (lua_Integer)n);
        char what[64];
        for (size_t i = 0; i < n; i++) {
            lua_geti(L, 3, (lua_Integer)i + 1);
            snprintf(what, sizeof what, "tensor: value %zu", i + 1);
            set_elem(L, t, i, -1, what);
            lua_pop(L, 1);
        }
    }
    return 1;
}

/* gptoss.core.tensor_load(path, dtype [, shape]): raw little-endian values */
int gptoss_lua_tensor_load(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    int dtype = luaL_checkoption(L, 2, NULL, dtype_names);
    int64_t shape[GPTOSS_MAX_DIMS];
    int ndim = lua_isnoneornil(L, 3) ? 0 : read_shape(L, 3, "tensor.load", shape);
    lua_tensor *t = gptoss_push_tensor(L);
    char err[GPTOSS_ERR_LEN];
    int fd;
    uint64_t size;
    if (gptoss_open_regular(path, NULL, &fd, &size, err))
        return luaL_error(L, "tensor.load: %s", err);
    FILE *f = fdopen(fd, "rb"); /* nothing below raises while it is open */
    if (!f) {
        close(fd);
        return luaL_error(L, "tensor.load: out of host memory for a stream of '%s'", path);
    }
    long bytes = (long)size;
    if (ndim == 0 && bytes / 4 > INT32_MAX) { /* a dimension's limit, as read_shape's */
        fclose(f);
        return luaL_error(L, "tensor.load: '%s' has %I bytes, more than 2^31-1 values of 4 bytes: give a shape",
                          path, (lua_Integer)bytes);
    }
    if (ndim == 0 && (bytes == 0 || bytes % 4 != 0)) { /* no shape to say how many values were meant */
        fclose(f);
        if (bytes == 0)
            return luaL_error(L, "tensor.load: '%s' has 0 bytes: no values to load", path);
        return luaL_error(L, "tensor.load: '%s' has %I bytes, not a multiple of 4 (the bytes of one %s value)",
                          path, (lua_Integer)bytes, dtype_names[dtype]);
    }
    if (ndim == 0) {
        ndim = 1;
        shape[0] = bytes / 4;
    }
    int overflow = 0; /* read_shape checked it */
    size_t n = shape_numel(ndim, shape, &overflow);
    if (bytes < 0 || bytes % 4 != 0 || (size_t)bytes != n * 4 || n == 0) {
        fclose(f);
        return luaL_error(L, "tensor.load: '%s' has %I bytes, expected %I (%I values of 4 bytes)",
                          path, (lua_Integer)bytes, (lua_Integer)(n * 4), (lua_Integer)n);
    }
    gptoss_storage *s = gptoss_storage_new((gptoss_dtype)dtype, n);
    if (!s) {
        fclose(f);
        return luaL_error(L, "tensor.load: out of host memory for the %I values of '%s'", (lua_Integer)n, path);
    }
    size_t got = fread(s->data, 4, n, f);
    fclose(f);
    if (got != n) {
        gptoss_storage_release(s);
        return luaL_error(L, "tensor.load: short read from '%s'", path);
    }
    gptoss_tensor_view(t, s, 0, ndim, shape);
    gptoss_storage_release(s);
    return 1;
}

static int tensor_save(lua_State *L) {
    gptoss_check_tensor(L, 1);
    const char *path = luaL_checkstring(L, 2); /* a number converted allocates: t is taken after */
    lua_tensor *t = gptoss_check_tensor(L, 1);
    FILE *f = fopen(path, "wb");
    if (!f)
        return luaL_error(L, "tensor:save: cannot write '%s': %s", path, strerror(errno));
    size_t n = gptoss_tensor_numel(t);
    int bad = fwrite(gptoss_tensor_data(t), 4, n, f) != n;
    bad |= fclose(f) != 0;
    if (bad)
        return luaL_error(L, "tensor:save: cannot write '%s': %s", path, strerror(errno));
    return 0;
}

static int tensor_argmax(lua_State *L) {
    lua_tensor *t = gptoss_check_tensor(L, 1);
    lua_pushinteger(L, (lua_Integer)gptoss_argmax(t->storage->dtype, gptoss_tensor_data(t),
                                                  gptoss_tensor_numel(t)) + 1);
    return 1;
}

static void check_same_shape(lua_State *L, const lua_tensor *a, const lua_tensor *b, const char *fn) {
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++)
        same = a->shape[i] == b->shape[i];
    if (!same) {
        luaL_Buffer buf;
        luaL_buffinit(L, &buf);
        for (int k = 0; k < 2; k++) {
            const lua_tensor *t = k ? b : a;
            luaL_addstring(&buf, k ? " vs {" : "{");
            for (int i = 0; i < t->ndim; i++) {
                lua_pushfstring(L, i ? ", %d" : "%d", (int)t->shape[i]);
                luaL_addvalue(&buf);
            }
            luaL_addchar(&buf, '}');
        }
        luaL_pushresult(&buf);
        luaL_error(L, "%s: shapes differ: %s", fn, lua_tostring(L, -1));
    }
}

static int tensor_max_abs_diff(lua_State *L) {
    lua_tensor *a = gptoss_check_tensor(L, 1), *b = gptoss_lua_check(L, 2, GPTOSS_TENSOR_MT, "max_abs_diff");
    check_same_shape(L, a, b, "max_abs_diff");
    lua_pushnumber(L, gptoss_max_abs_diff(a->storage->dtype, gptoss_tensor_data(a), b->storage->dtype,
                                          gptoss_tensor_data(b), gptoss_tensor_numel(a)));
    return 1;
}

/* t:allclose(other [, atol=1e-5 [, rtol=1e-5]]) -> ok, first failing 1-based index */
static int tensor_allclose(lua_State *L) {
    lua_tensor *a = gptoss_check_tensor(L, 1), *b = gptoss_lua_check(L, 2, GPTOSS_TENSOR_MT, "allclose");
    lua_Number atol = luaL_optnumber(L, 3, 1e-5), rtol = luaL_optnumber(L, 4, 1e-5);
    luaL_argcheck(L, atol >= 0, 3, "atol must be >= 0");
    luaL_argcheck(L, rtol >= 0, 4, "rtol must be >= 0");
    check_same_shape(L, a, b, "allclose");
    size_t n = gptoss_tensor_numel(a);
    size_t bad = gptoss_allclose(a->storage->dtype, gptoss_tensor_data(a), b->storage->dtype,
                                 gptoss_tensor_data(b), n, atol, rtol);
    lua_pushboolean(L, bad == n);
    if (bad == n)
        return 1;
    lua_pushinteger(L, (lua_Integer)bad + 1);
    return 2;
}

static void push_nested(lua_State *L, const lua_tensor *t, int dim, size_t *cursor) {
    int64_t n = t->shape[dim];
    lua_createtable(L, (int)n, 0);
    for (int64_t i = 0; i < n; i++) {
        if (dim == t->ndim - 1)
            push_elem(L, t, (*cursor)++);
        else
            push_nested(L, t, dim + 1, cursor);
        lua_rawseti(L, -2, i + 1);
    }
}

/* t:totable() -> nested tables, read through a view of its own: building
 * them allocates, and a finaliser may let go of t's storage meanwhile */
static int tensor_totable(lua_State *L) {
    gptoss_check_tensor(L, 1);
    luaL_checkstack(L, GPTOSS_MAX_DIMS + 4, "tensor too deep");
    lua_tensor *own = gptoss_push_tensor(L);
    const lua_tensor *t = gptoss_check_tensor(L, 1);
    gptoss_tensor_view(own, t->storage, t->offset, t->ndim, t->shape);
    size_t cursor = 0;
    push_nested(L, own, 0, &cursor);
    return 1;
}

static int tensor_len(lua_State *L) {
    lua_pushinteger(L, gptoss_check_tensor(L, 1)->shape[0]);
    return 1;
}

static size_t check_index(lua_State *L, const lua_tensor *t, int idx) {
    int ok;
    lua_Integer i = lua_tointegerx(L, idx, &ok);
    if (!ok)
        luaL_error(L, "tensor index must be an integer (got %s)", luaL_tolstring(L, idx, NULL));
    if (i < 1 || i > t->shape[0])
        luaL_error(L, "tensor index %I is out of range 1..%I", i, (lua_Integer)t->shape[0]);
    return (size_t)(i - 1);
}

static int tensor_get(lua_State *L) {
    lua_tensor *t = gptoss_check_tensor(L, 1);
    if (lua_type(L, 2) == LUA_TNUMBER) {
        size_t i = check_index(L, t, 2);
        if (t->ndim == 1) {
            push_elem(L, t, i);
        } else { /* a row view, allocated before t's storage is taken */
            lua_tensor *view = gptoss_push_tensor(L);
            t = gptoss_check_tensor(L, 1);
            size_t row = gptoss_tensor_numel(t) / (size_t)t->shape[0];
            gptoss_tensor_view(view, t->storage, t->offset + i * row, t->ndim - 1, t->shape + 1);
        }
        return 1;
    }
    const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
    if (!k)
        return 0;
    if (strcmp(k, "dtype") == 0) {
        lua_pushstring(L, dtype_names[t->storage->dtype]);
    } else if (strcmp(k, "ndim") == 0) {
        lua_pushinteger(L, t->ndim);
    } else if (strcmp(k, "numel") == 0) {
        lua_pushinteger(L, (lua_Integer)gptoss_tensor_numel(t));
    } else if (strcmp(k, "shape") == 0) {
        lua_createtable(L, t->ndim, 0);
        for (int i = 0; i < t->ndim; i++) {
            lua_pushinteger(L, t->shape[i]);
            lua_rawseti(L, -2, i + 1);
        }
    } else {
        return 0;
    }
    return 1;
}

static int tensor_newindex(lua_State *L) {
    lua_tensor *t = gptoss_check_tensor(L, 1);
    if (lua_type(L, 2) != LUA_TNUMBER)
        return luaL_error(L, "tensor: only integer indices can be assigned");
    if (t->ndim != 1)
        return luaL_error(L, "tensor: assign elements of a 1-D tensor (index rows first)");
    size_t i = check_index(L, t, 2);
    set_elem(L, t, i, 3, "tensor element");
    return 0;
}

static int tensor_gc(lua_State *L) {
    lua_tensor *t = gptoss_lua_end(L, 1, GPTOSS_TENSOR_MT, GPTOSS_LUA_COLLECTED);
    if (t) {
        gptoss_storage_release(t->storage);
        t->storage = NULL;
    }
    return 0;
}

static int tensor_tostring(lua_State *L) {
    lua_tensor *t = gptoss_check_tensor(L, 1);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_pushfstring(L, "gptoss.tensor(%s, {", dtype_names[t->storage->dtype]);
    luaL_addvalue(&b);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushfstring(L, i ? ", %d" : "%d", (int)t->shape[i]);
        luaL_addvalue(&b);
    }
    luaL_addstring(&b, "})");
    luaL_pushresult(&b);
    return 1;
}

/* gptoss.core.bf16_round(x) -> x as a float rounded to the nearest bf16 (ties
 * to even), as the bf16 modes round */
int gptoss_lua_bf16_round(lua_State *L) {
    lua_pushnumber(L, gptoss_bf16_round((float)luaL_checknumber(L, 1)));
    return 1;
}

void gptoss_open_tensor(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"argmax", tensor_argmax}, {"max_abs_diff", tensor_max_abs_diff}, {"allclose", tensor_allclose},
        {"totable", tensor_totable}, {"save", tensor_save}, {NULL, NULL},
    };
    static const luaL_Reg meta[] = {
        {"__len", tensor_len}, {"__newindex", tensor_newindex}, {"__gc", tensor_gc},
        {"__tostring", tensor_tostring}, {NULL, NULL},
    };
    static const gptoss_lua_class_def tensor = {GPTOSS_TENSOR_MT, methods, tensor_get, meta};
    gptoss_lua_class(L, &tensor);
}
