/* The tracer's side of a replica: r:trace, one row run like a step with
 * every stage recorded and handed to Lua as tensors, and
 * gptoss.core.trace_stages, the stage table (src/core/trace.h). */
#include <stdlib.h>

#include "../core/trace.h"
#include "binding.h"

/* pushes stage s as a tensor, which takes over its data */
static void push_stage(lua_State *L, gptoss_stage *s) {
    lua_tensor *t = gptoss_push_tensor(L);
    gptoss_storage *st = malloc(sizeof *st);
    if (!st)
        luaL_error(L, "trace: out of host memory");
    st->refs = 1;
    st->dtype = gptoss_stage_is_int(s->id) ? GPTOSS_I32 : GPTOSS_F32;
    st->count = (size_t)s->dims[0] * (size_t)(s->ndim == 2 ? s->dims[1] : 1);
    st->data = s->data;
    s->data = NULL;
    gptoss_tensor_view(t, st, 0, s->ndim, s->dims);
    gptoss_storage_release(st);
}

/* The trace's stages as {embedding=, final_norm=, logits=, layers = {{attn_norm=,
 * ...}, ...}}; clears the trace. */
static void push_trace(lua_State *L, gptoss_trace *tr, int n_layers) {
    lua_createtable(L, 0, 4);
    int result = lua_gettop(L);
    lua_createtable(L, n_layers, 0);
    for (int l = 0; l < n_layers; l++) {
        lua_createtable(L, 0, GPTOSS_N_STAGES);
        lua_rawseti(L, -2, l + 1);
    }
    lua_setfield(L, result, "layers");
    for (int i = 0; i < tr->n; i++) {
        gptoss_stage *s = &tr->stages[i];
        if (s->layer >= 0) {
            lua_getfield(L, result, "layers");
            lua_rawgeti(L, -1, s->layer + 1);
        } else {
            lua_pushvalue(L, result);
        }
        push_stage(L, s);
        lua_setfield(L, -2, gptoss_stage_names[s->id]);
        lua_settop(L, result);
    }
    gptoss_trace_clear(tr);
}

/* r:trace(slot, token, pos): one row run like a step, every stage recorded */
int gptoss_lua_replica_trace(lua_State *L) {
    gptoss_engine *e = gptoss_check_engine(L, 1);
    int slot = gptoss_check_slot(L, e, 2, "trace");
    int token = gptoss_check_int(L, 3, "trace", "token");
    int pos = gptoss_check_int(L, 4, "trace", "position");
    const gptoss_config *c = &gptoss_engine_model(e)->config;
    int n_layers = c->n_layers;
    float *logits = lua_newuserdatauv(L, sizeof(float) * (size_t)c->vocab_size, 0);
    e = gptoss_check_engine(L, 1); /* after the allocation */
    gptoss_trace tr = {0};
    char err[GPTOSS_ERR_LEN];
    gptoss_status s = gptoss_engine_trace(e, slot, token, pos, &tr, logits, err);
    if (!s && tr.failed)
        s = gptoss_fail(err, GPTOSS_E_HOST_MEMORY, "out of host memory while recording stages");
    if (s) {
        gptoss_trace_clear(&tr);
        return gptoss_raise_status(L, "trace", s, err);
    }
    push_trace(L, &tr, n_layers);
    return 1;
}

/* gptoss.core.trace_stages() -> { {name=, per_layer=}, ... } in forward order */
int gptoss_lua_trace_stages(lua_State *L) {
    lua_createtable(L, GPTOSS_N_STAGES, 0);
    for (int i = 0; i < GPTOSS_N_STAGES; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, gptoss_stage_names[i]);
        lua_setfield(L, -2, "name");
        lua_pushboolean(L, gptoss_stage_per_layer((gptoss_stage_id)i));
        lua_setfield(L, -2, "per_layer");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}
