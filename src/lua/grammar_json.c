/* Lua values as JSON text, for gptoss.grammar.json_schema's tables. The
 * text grows in a userdata of its own, so that an error raised halfway
 * frees it with the rest of the stack. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

#define JSON_TEXT_MT "gptoss.json_text"
#define MAX_DEPTH 100

typedef struct {
    char *text;
    size_t n, cap;
} json_text;

typedef struct {
    lua_State *L;
    json_text *out;
    const char *fn;
    char path[256]; /* where in the value: "schema.properties.age" */
} writer;

static int json_text_gc(lua_State *L) {
    json_text *t = lua_touserdata(L, 1);
    free(t->text);
    t->text = NULL;
    return 0;
}

static void add(writer *w, const char *s, size_t n) {
    json_text *t = w->out;
    if (!n)
        return;
    if (t->cap - t->n < n) {
        size_t cap = 2 * (t->cap + n);
        char *p = realloc(t->text, cap);
        if (!p)
            luaL_error(w->L, "%s: out of host memory for the JSON text", w->fn);
        t->text = p;
        t->cap = cap;
    }
    memcpy(t->text + t->n, s, n);
    t->n += n;
}

static void add_string(writer *w, const char *s, size_t n) {
    add(w, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\')
            add(w, c == '"' ? "\\\"" : "\\\\", 2);
        else if (c < 0x20)
            add(w, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", c));
        else
            add(w, (const char *)&s[i], 1);
    }
    add(w, "\"", 1);
}

/* raises: luaL_error does not return */
static void refuse(writer *w, const char *why) { luaL_error(w->L, "%s: %s: %s", w->fn, w->path, why); }

static void value(writer *w, int idx, int depth);

/* the value at idx, the path extended by step (".key" or "[i]") meanwhile */
static void nested(writer *w, const char *step, int idx, int depth) {
    size_t at = strlen(w->path);
    snprintf(w->path + at, sizeof w->path - at, "%s", step);
    value(w, idx, depth + 1);
    w->path[at] = 0;
}

typedef struct {
    const char *s;
    size_t n;
} key;

static int by_key(const void *a, const void *b) {
    const key *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* a table: an array when its keys are exactly 1..n (n >= 1), else an object */
static void table(writer *w, int idx, int depth) {
    lua_State *L = w->L;
    lua_Integer count = 0, named = 0, max = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        if (lua_type(L, -2) == LUA_TSTRING)
            named++;
        else if (lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1)
            count++, max = lua_tointeger(L, -2) > max ? lua_tointeger(L, -2) : max;
        else
            refuse(w, "a key that is neither a string nor an index 1..n cannot be JSON");
    }
    if (count && (named || max != count))
        refuse(w, "a table with both list entries and named keys (or gaps) cannot be JSON");
    char step[300];
    if (count) {
        add(w, "[", 1);
        for (lua_Integer i = 1; i <= count; i++) {
            add(w, i > 1 ? "," : "", i > 1);
            lua_rawgeti(L, idx, i);
            snprintf(step, sizeof step, "[%lld]", (long long)i);
            nested(w, step, lua_gettop(L), depth);
            lua_pop(L, 1);
        }
        add(w, "]", 1);
        return;
    }
    key *keys = lua_newuserdatauv(L, (size_t)(named ? named : 1) * sizeof *keys, 0); /* the strings stay in the table */
    lua_Integer k = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        keys[k].s = lua_tolstring(L, -2, &keys[k].n);
        k++;
    }
    qsort(keys, (size_t)k, sizeof *keys, by_key);
    add(w, "{", 1);
    for (lua_Integer i = 0; i < k; i++) {
        add(w, i ? "," : "", i > 0);
        add_string(w, keys[i].s, keys[i].n);
        add(w, ":", 1);
        lua_pushlstring(L, keys[i].s, keys[i].n);
        lua_rawget(L, idx);
        snprintf(step, sizeof step, ".%s", keys[i].s);
        nested(w, step, lua_gettop(L), depth);
        lua_pop(L, 1);
    }
    add(w, "}", 1);
    lua_pop(L, 1);
}

static void value(writer *w, int idx, int depth) {
    lua_State *L = w->L;
    char number[40];
    if (depth > MAX_DEPTH)
        refuse(w, "tables nest too deeply for JSON (is there a cycle?)");
    luaL_checkstack(L, 8, "JSON text");
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: add(w, lua_toboolean(L, idx) ? "true" : "false", lua_toboolean(L, idx) ? 4 : 5); return;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        add_string(w, s, n);
        return;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            add(w, number, (size_t)snprintf(number, sizeof number, "%lld", (long long)lua_tointeger(L, idx)));
        else if (!isfinite(lua_tonumber(L, idx)))
            refuse(w, "infinities and NaN cannot be JSON");
        else
            add(w, number, (size_t)snprintf(number, sizeof number, "%.17g", lua_tonumber(L, idx)));
        return;
    case LUA_TLIGHTUSERDATA:
        if (!lua_touserdata(L, idx)) { /* cjson.null */
            add(w, "null", 4);
            return;
        }
        break;
    case LUA_TTABLE: table(w, lua_absindex(L, idx), depth); return;
    default: break;
    }
    refuse(w, lua_pushfstring(L, "a %s cannot be JSON", luaL_typename(L, idx)));
}

const char *gptoss_lua_json_text(lua_State *L, int idx, const char *fn, const char *what, size_t *len) {
    idx = lua_absindex(L, idx);
    writer w = {L, NULL, fn, ""};
    snprintf(w.path, sizeof w.path, "%s", what);
    w.out = lua_newuserdatauv(L, sizeof *w.out, 0);
    memset(w.out, 0, sizeof *w.out);
    if (luaL_newmetatable(L, JSON_TEXT_MT)) {
        lua_pushcfunction(L, json_text_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    value(&w, idx, 0);
    *len = w.out->n;
    const char *s = lua_pushlstring(L, w.out->text ? w.out->text : "", w.out->n);
    lua_remove(L, -2);
    return s;
}
