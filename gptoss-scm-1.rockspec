rockspec_format = "3.0"
package = "gptoss"
version = "scm-1"
source = {
  url = "git+file://./",
}
description = {
  summary = "gpt-oss inference from Lua: course .bin models, synthetic models, a CPU golden engine and HIP GPU engines",
  detailed = [[
A Lua 5.4 extension module written in C with HIP kernels. The Makefile builds
gptoss/core.so for HIP_PLATFORM=nvidia|amd|cpu (environment variables reach
make) together with the pure-Lua package gptoss and tokenizer.bin (built with
npm when build/ lacks it; gptoss.tokenizer() finds the installed copy), and
installs the examples and docs/ beside the modules. The commands: gptoss (gptoss help
lists what it runs) and gptoss-run, the course's command line.
Needs the Lua modules argparse and dkjson (Debian: lua-argparse, lua-dkjson;
elsewhere: luarocks install argparse dkjson).
]],
  license = "MIT",
}
-- Also argparse (the command lines) and dkjson (gptoss.chat's tool arguments, the --json
-- outputs), not listed: the project takes them from Debian (lua-argparse, lua-dkjson; make
-- setup installs them), which luarocks cannot see, so that listing them made every install
-- fetch them again or, with --deps-mode=none, end in "Missing dependencies". The gptoss
-- command names the one missing, and how to install it, in one line.
dependencies = {
  "lua >= 5.4",
}
-- checkpoints' JSON (Debian: libjansson-dev); o200k tokenization's regular expression (libpcre2-dev)
external_dependencies = {
  JANSSON = { header = "jansson.h", library = "jansson" },
  PCRE2 = { header = "pcre2.h", library = "pcre2-8" },
}
build = {
  type = "make",
  build_variables = {
    CFLAGS = "$(CFLAGS)",
    LUA_INCDIR = "$(LUA_INCDIR)",
    LUA = "$(LUA)",
    JANSSON_INCDIR = "$(JANSSON_INCDIR)",
    JANSSON_LIBDIR = "$(JANSSON_LIBDIR)",
    PCRE2_INCDIR = "$(PCRE2_INCDIR)",
    PCRE2_LIBDIR = "$(PCRE2_LIBDIR)",
  },
  install_variables = {
    INST_LIBDIR = "$(LIBDIR)",
    INST_LUADIR = "$(LUADIR)",
  },
  -- luarocks copies these itself after the make install pass, whatever the build type,
  -- and puts a wrapper in the tree's bin/ that sets the tree's module paths
  install = {
    bin = { gptoss = "bin/gptoss.lua", ["gptoss-run"] = "examples/run.lua" },
  },
}
