/* One way to register a class: its metatable, methods, getter and
 * metamethods together (as Torch7's luaT_newmetatable takes the
 * destructor). And the one place an object's life is checked: every
 * object's userdata starts with a gptoss_lua_object, which says whether it
 * is open, closed or finalised, and every binding function reaches an
 * object through gptoss_lua_check, so that no file hand-rolls the check or
 * its message. */
#include <string.h>

#include "binding.h"

/* __index: a method of the class, else whatever the getter says */
static int class_index(lua_State *L) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1) || lua_isnil(L, lua_upvalueindex(2)))
        return 1;
    lua_settop(L, 2);
    return lua_tocfunction(L, lua_upvalueindex(2))(L);
}

void gptoss_lua_class(lua_State *L, const gptoss_lua_class_def *def) {
    luaL_newmetatable(L, def->name);
    if (def->meta)
        luaL_setfuncs(L, def->meta, 0);
    if (!def->methods) { /* a holder of native memory, freed by __gc */
        lua_pop(L, 1);
        return;
    }
    lua_newtable(L);
    luaL_setfuncs(L, def->methods, 0);
    if (def->getter)
        lua_pushcfunction(L, def->getter);
    else
        lua_pushnil(L);
    lua_pushcclosure(L, class_index, 2);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}

void *gptoss_lua_new(lua_State *L, const char *class, size_t size, int nuv) {
    gptoss_lua_object *o = lua_newuserdatauv(L, size, nuv);
    memset(o, 0, size);
    o->life = GPTOSS_LUA_OPEN;
    luaL_setmetatable(L, class);
    return o;
}

/* "model" for "gptoss.model": how messages name a class */
static const char *short_name(const char *class) {
    const char *dot = strrchr(class, '.');
    return dot ? dot + 1 : class;
}

/* Raises "<class>: used after close" (or "... after it was
 * garbage-collected") for the object a method was called on (fn NULL), or
 * "<fn>: <class>: ..." for an argument of fn or a parent reached through
 * another object. */
static void raise_ended(lua_State *L, const gptoss_lua_object *o, const char *class, const char *fn) {
    const char *when = o->life == GPTOSS_LUA_CLOSED ? "close" : "it was garbage-collected";
    if (fn)
        luaL_error(L, "%s: %s: used after %s", fn, short_name(class), when);
    luaL_error(L, "%s: used after %s", short_name(class), when);
}

void *gptoss_lua_test(lua_State *L, int idx, const char *class, const char *fn) {
    gptoss_lua_object *o = luaL_testudata(L, idx, class);
    if (o && o->life != GPTOSS_LUA_OPEN)
        raise_ended(L, o, class, fn);
    return o;
}

void *gptoss_lua_check(lua_State *L, int idx, const char *class, const char *fn) {
    gptoss_lua_object *o = luaL_checkudata(L, idx, class);
    if (o->life != GPTOSS_LUA_OPEN)
        raise_ended(L, o, class, fn);
    return o;
}

gptoss_lua_life gptoss_lua_life_of(lua_State *L, int idx, const char *class) {
    return ((gptoss_lua_object *)luaL_checkudata(L, idx, class))->life;
}

void *gptoss_lua_end(lua_State *L, int idx, const char *class, gptoss_lua_life how) {
    gptoss_lua_object *o = luaL_checkudata(L, idx, class);
    int was_open = o->life == GPTOSS_LUA_OPEN;
    if (how > o->life) /* a finalised object stays so when closed by hand */
        o->life = how;
    return was_open ? o : NULL;
}
