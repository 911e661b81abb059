/* gptoss.devices, gptoss.device_memory, gptoss.copy_bandwidth: the GPUs
 * this build sees, and what they measure. */
#include "../hip/backend.h"
#include "binding.h"

/* gptoss.core.devices() -> { {id=0, name=..., memory=..., warp=..., arch=...}, ... } */
int gptoss_lua_devices(lua_State *L) {
    int n = gptoss_hip_device_count();
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        gptoss_device_info d;
        if (gptoss_hip_device_info(i, &d) != 0)
            continue;
        lua_createtable(L, 0, 5);
        lua_pushinteger(L, i);
        lua_setfield(L, -2, "id");
        lua_pushstring(L, d.name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, (lua_Integer)d.memory);
        lua_setfield(L, -2, "memory");
        lua_pushinteger(L, d.warp);
        lua_setfield(L, -2, "warp");
        lua_pushstring(L, d.arch);
        lua_setfield(L, -2, "arch");
        lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    }
    return 1;
}

/* gptoss.core.device_memory(device) -> bytes free now, bytes in all. Kept
 * apart from devices(): reading free memory makes the device's context. */
int gptoss_lua_device_memory(lua_State *L) {
    int dev = gptoss_check_device(L, luaL_checkinteger(L, 1), "device_memory");
    gptoss_device_info d;
    uint64_t free_bytes;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_hip_device_info(dev, &d) != 0)
        return luaL_error(L, "device_memory: device %d: cannot read its properties", dev);
    if (gptoss_hip_device_free(dev, &free_bytes, err))
        return luaL_error(L, "device_memory: %s", err);
    lua_pushinteger(L, (lua_Integer)free_bytes);
    lua_pushinteger(L, (lua_Integer)d.memory);
    return 2;
}

/* gptoss.core.copy_bandwidth(device [, bytes = 1 GiB]) -> bytes per second
 * of a device-to-device copy, counting bytes read plus bytes written: the
 * ceiling the benchmarks compare their achieved bandwidth with */
int gptoss_lua_copy_bandwidth(lua_State *L) {
    int dev = gptoss_check_device(L, luaL_checkinteger(L, 1), "copy_bandwidth");
    lua_Integer bytes = luaL_optinteger(L, 2, (lua_Integer)1 << 30);
    if (bytes < 1)
        return luaL_error(L, "copy_bandwidth: bytes = %I must be positive", bytes);
    double bw;
    char err[GPTOSS_ERR_LEN];
    if (gptoss_hip_copy_bandwidth(dev, (size_t)bytes, &bw, err))
        return luaL_error(L, "copy_bandwidth: %s", err);
    lua_pushnumber(L, bw);
    return 1;
}
