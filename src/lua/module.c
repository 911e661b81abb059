/* luaopen_gptoss_core: the C module behind require "gptoss". */
#include "../hip/backend.h"
#include "binding.h"

int luaopen_gptoss_core(lua_State *L) {
    gptoss_open_tensor(L);
    gptoss_open_model(L);
    gptoss_open_replica(L);
    gptoss_open_step(L);
    gptoss_open_tokenizer(L);
    gptoss_open_sampler(L);
    gptoss_open_grammar(L);
    gptoss_open_matcher(L);
    gptoss_open_sender(L);
    static const luaL_Reg fns[] = {
        {"load", gptoss_lua_load},
        {"synthetic", gptoss_lua_synthetic},
        {"named_config", gptoss_lua_named_config},
        {"tensor", gptoss_lua_tensor_new},
        {"tensor_load", gptoss_lua_tensor_load},
        {"bf16_round", gptoss_lua_bf16_round},
        {"trace_stages", gptoss_lua_trace_stages},
        {"tokenizer", gptoss_lua_tokenizer},
        {"sampler", gptoss_lua_sampler},
        {"sample_options", gptoss_lua_sample_options},
        {"grammar_json_schema", gptoss_lua_grammar_json_schema},
        {"grammar_regex", gptoss_lua_grammar_regex},
        {"grammar_ebnf", gptoss_lua_grammar_ebnf},
        {"pcre2_full_match", gptoss_lua_pcre2_full_match},
        {"weight_formats", gptoss_lua_weight_formats},
        {"kv_formats", gptoss_lua_kv_formats},
        {"devices", gptoss_lua_devices},
        {"device_memory", gptoss_lua_device_memory},
        {"copy_bandwidth", gptoss_lua_copy_bandwidth},
        {"clock", gptoss_lua_clock},
        {"realtime_ms", gptoss_lua_realtime_ms},
        {"isatty", gptoss_lua_isatty},
        {"trim_memory", gptoss_lua_trim_memory},
        {"sender", gptoss_lua_sender},
        {"regular_file", gptoss_lua_regular_file},
        {"catch_interrupts", gptoss_lua_catch_interrupts},
        {"interrupted", gptoss_lua_interrupted},
        {"wait_readable", gptoss_lua_wait_readable},
        {"edit_open", gptoss_lua_edit_open},
        {"edit_line", gptoss_lua_edit_line},
        {"edit_history", gptoss_lua_edit_history},
        {"edit_close", gptoss_lua_edit_close},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    gptoss_open_mpi(L);
    lua_pushstring(L, gptoss_hip_platform());
    lua_setfield(L, -2, "platform");
    lua_pushinteger(L, GPTOSS_MAX_DIMS); /* tensor.from reads no deeper */
    lua_setfield(L, -2, "max_dims");
    return 1;
}
