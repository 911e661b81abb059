/* One way to register a class: its metatable, methods, getter and
 * metamethods together (as Torch7's luaT_newmetatable takes the
 * destructor). */
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
