# gptoss: one shared library, build/gptoss/core.so (Lua module gptoss.core),
# plus the pure-Lua package in lua/gptoss/.
#
#   make                      build for the detected platform
#   make HIP_PLATFORM=cpu     CPU golden engine only
#   make HIP_PLATFORM=nvidia GPU_ARCH="sm_80 sm_90a"
#   make HIP_PLATFORM=amd GPU_ARCH=gfx90a
#   make setup | test | test-sanitized | fuzz | demo | tokenizer | platforms | deps | install | clean
#
# HIP_PLATFORM defaults to nvidia when nvcc and the HIP headers are present
# and an NVIDIA GPU is there to run it, else cpu. Flags of our own live in
# GPTOSS_* variables because luarocks passes CFLAGS on the command line.

BUILD      ?= build
LUA        ?= lua5.4
BUSTED     ?= /usr/bin/busted
LUA_INCDIR ?= /usr/include/lua5.4
HIP_INCDIR ?= /usr/include
NVCC       ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
HIPCC      ?= hipcc
CFLAGS     ?= -O2
# extra include folders (the GPU machine's private Debian prefix)
EXTRA_INC  ?=
# libjansson (checkpoints' JSON): empty means where Debian puts it
JANSSON_INCDIR ?=
JANSSON_LIBDIR ?=
# libpcre2 (o200k tokenization's regular expression): the same
PCRE2_INCDIR ?=
PCRE2_LIBDIR ?=
# Open MPI (docs/getp.md#ranks-under-mpi): src/lua/mpi.c is built against it when mpicc
# answers; MPI_CFLAGS= MPI_LIBS= builds the binding without it (its functions then say so)
MPICC ?= mpicc
ifeq ($(origin MPI_CFLAGS),undefined)
  ifneq ($(shell $(MPICC) --showme:version 2>/dev/null),)
    MPI_CFLAGS := -DGPTOSS_MPI $(shell $(MPICC) --showme:compile)
    MPI_LIBS := $(shell $(MPICC) --showme:link)
  endif
endif

# An NVIDIA GPU is there when the driver made its device node, or nvidia-smi lists
# one (a container may name the nodes differently). Without one the NVIDIA
# build (minutes) would only report no devices, so the default is then cpu.
NVIDIA_GPU = $(or $(wildcard /dev/nvidia[0-9]*),$(shell nvidia-smi -L 2>/dev/null | grep -m1 '^GPU'))
ifeq ($(strip $(HIP_PLATFORM)),)
  ifneq ($(and $(NVCC),$(wildcard $(HIP_INCDIR)/hip/hip_runtime.h),$(NVIDIA_GPU)),)
    HIP_PLATFORM := nvidia
  else
    HIP_PLATFORM := cpu
  endif
endif
ifeq ($(HIP_PLATFORM),nvidia)
  GPU_ARCH ?= sm_80 sm_90a
else ifeq ($(HIP_PLATFORM),amd)
  GPU_ARCH ?= gfx90a
else ifneq ($(HIP_PLATFORM),cpu)
  $(error HIP_PLATFORM must be nvidia, amd or cpu (got '$(HIP_PLATFORM)'))
endif

OBJ := $(BUILD)/obj/$(HIP_PLATFORM)
LIB := $(BUILD)/gptoss/core.so
TOKENIZER := $(BUILD)/tokenizer.bin

# Course numerics: no fused multiply-add, so every product rounds as run.cpp's.
GPTOSS_CFLAGS := -std=c11 -fPIC -g -Wall -Wextra -ffp-contract=off -fno-math-errno \
                 -D_POSIX_C_SOURCE=200809L -I$(LUA_INCDIR) $(addprefix -I,$(EXTRA_INC) $(JANSSON_INCDIR) $(PCRE2_INCDIR))
LIBS := $(addprefix -L,$(JANSSON_LIBDIR) $(PCRE2_LIBDIR)) -ljansson -lpcre2-8 -lm -lpthread $(MPI_LIBS)
# a HIP prefix outside /usr/include must be -isystem, never -I (toolchain.md)
HIP_INC := $(if $(filter /usr/include /usr/include/,$(HIP_INCDIR)),,-isystem $(HIP_INCDIR))

# src/hip's plain C (the engines' table, the GPU memory plan) is in every build
C_SRC   := $(wildcard src/core/*.c) $(wildcard src/lua/*.c) \
           $(filter-out src/hip/cpu_only.c,$(wildcard src/hip/*.c))
HIP_SRC := $(wildcard src/hip/*.hip) $(wildcard kernels/*.hip)
ifeq ($(HIP_PLATFORM),cpu)
  C_SRC += src/hip/cpu_only.c
  HIP_SRC :=
endif
OBJS := $(patsubst %.c,$(OBJ)/%.o,$(C_SRC)) $(patsubst %.hip,$(OBJ)/%.o,$(HIP_SRC))

NV_GENCODE := $(foreach a,$(GPU_ARCH),-gencode arch=compute_$(subst sm_,,$(a)),code=$(a)) \
              -gencode arch=compute_$(subst sm_,,$(lastword $(GPU_ARCH))),code=compute_$(subst sm_,,$(lastword $(GPU_ARCH)))
# Device code follows the same rule (-fmad=false, -ffp-contract=off): a
# product that the golden rounds rounds on the GPU too; kernels that want a
# fused multiply-add (the bf16 fast path) write __fmaf_rn explicitly.
NVCC_FLAGS := -x cu -std=c++17 -O3 -D__HIP_PLATFORM_NVIDIA__ $(HIP_INC) $(NV_GENCODE) -fmad=false \
              -Xcompiler -fPIC -Xcompiler -ffp-contract=off -Werror all-warnings
AMD_COMMON := -x hip -std=c++17 -O3 -fPIC -ffp-contract=off $(HIP_INC)
AMD_FLAGS  := $(AMD_COMMON) $(addprefix --offload-arch=,$(GPU_ARCH))

.PHONY: FORCE all setup test demo tokenizer platforms deps gpu-machine-prefix gpu-machine-test gpu-machine-run clean install fuzz \
        test-sanitized sanitized-suite
all: $(LIB)

$(OBJ)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(GPTOSS_CFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

ifeq ($(HIP_PLATFORM),nvidia)
$(OBJ)/%.o: %.hip
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -MMD -MP -c $< -o $@
$(LIB): $(OBJS)
	@mkdir -p $(dir $@)
	$(NVCC) -shared -cudart static $(NV_GENCODE) -Xcompiler -fPIC $(OBJS) -o $@ $(LIBS)
# the engine's GEMM dispatch with and without the Hopper GEMM, bit for bit (tests/gpu_gemm_spec.lua)
GEMM_PROBE := $(BUILD)/engine_gemm
$(GEMM_PROBE): tools/hopper_probes/engine_gemm.cu $(wildcard contract/*.h kernels/*.h kernels/*.hip src/hip/*.h src/core/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) $< -o $@
# the same with the Hopper GEMM's timeline stamps (docs/building.md#benchmarks)
$(GEMM_PROBE)_timeline: tools/hopper_probes/engine_gemm.cu $(wildcard contract/*.h kernels/*.h kernels/*.hip src/hip/*.h src/core/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -DGPTOSS_WG_TIMELINE $< -o $@
else ifeq ($(HIP_PLATFORM),amd)
$(OBJ)/%.o: %.hip
	@mkdir -p $(dir $@)
	$(HIPCC) $(AMD_FLAGS) -MMD -MP -c $< -o $@
$(LIB): $(OBJS)
	@mkdir -p $(dir $@)
	$(HIPCC) -shared -fPIC $(addprefix --offload-arch=,$(GPU_ARCH)) $(OBJS) -o $@ $(LIBS)
else
$(LIB): $(OBJS)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) $(OBJS) -o $@ $(LIBS)
endif

-include $(OBJS:.o=.d)

# mpi.c alone sees mpi.h; it is rebuilt when the MPI flags change (MPI installed or removed)
MPI_STAMP := $(OBJ)/mpi.flags
$(OBJ)/src/lua/mpi.o: GPTOSS_CFLAGS += $(MPI_CFLAGS)
$(OBJ)/src/lua/mpi.o: $(MPI_STAMP)
$(MPI_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(MPI_CFLAGS) $(MPI_LIBS)' | cmp -s - $@ || echo '$(MPI_CFLAGS) $(MPI_LIBS)' > $@
FORCE:

# Lua paths for running from the source tree
RUN_ENV = $(if $(RUN_LD_PATH),LD_LIBRARY_PATH='$(RUN_LD_PATH)') $(if $(RUN_DEB_MPI),$(DEB_MPI_ENV)) LUA_PATH='lua/?.lua;lua/?/init.lua;tests/?.lua;$(LUA_PATH_EXTRA);;' \
          LUA_CPATH='$(BUILD)/?.so;$(LUA_CPATH_EXTRA);;' GPTOSS_TOKENIZER='$(TOKENIZER)'

# What demo and test need, installed from Debian when missing (a fresh
# Debian 12 machine needs nothing else). Node only builds $(TOKENIZER), so
# a machine that already has the file (the GPU machine, offline) needs no npm.
# luarocks (docs/building.md#luarocks) only when make setup is asked for by
# name: test and demo, which run setup first, do not use it. gnuplot-nox draws the benchmarks'
# pictures (--plot, examples/plot.lua), whose spec is pending without it. lua-http,
# lua-cqueues and lua-cjson are gptoss serve's (docs/serve.md), lua-http and lua-filesystem
# gptoss pull's (docs/getting-models.md), curl serve's specs' raw client,
# nghttp2-client's h2load its HTTP/2 and load case (tests/serve_hostile_spec.lua, pending without it).
# libedit-dev gives gptoss chat line editing and history (src/lua/line_edit.c, optional to
# build and to run: without it lines are read plainly, so the GPU machine's DEPS_DEBS leave it
# out); tmux runs the chat's terminal spec, pending without it. Open MPI runs getp across
# ranks (tests/mpi_spec.lua, pending without it; installed before the first build, so that
# core.so is built with it).
SETUP_PACKAGES := build-essential lua5.4 liblua5.4-dev lua-busted lua-argparse lua-dkjson libjansson-dev libpcre2-dev \
                  gnuplot-nox lua-http lua-cqueues lua-cjson lua-filesystem curl nghttp2-client libedit-dev tmux libopenmpi-dev \
                  openmpi-bin
SETUP_LUAROCKS := $(if $(filter setup,$(MAKECMDGOALS)),luarocks)
JANSSON_H := $(or $(JANSSON_INCDIR),/usr/include)/jansson.h
PCRE2_H := $(or $(PCRE2_INCDIR),/usr/include)/pcre2.h
SETUP_NODE_PACKAGES := nodejs npm
# The official openai npm client, which tests/serve_spec.lua drives gptoss serve with (its
# package-lock pins it); installed by setup where npm is (the spec is pending elsewhere)
SERVE_CLIENT := tests/serve-client
# ajv and ajv-formats, the independent validator of tests/grammar_walk_spec.lua (pending without them)
SCHEMA_CHECK := tests/schema-check
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
setup:
	@pkgs=; \
	if ! { [ -x "$$(command -v $(LUA))" ] && [ -f $(LUA_INCDIR)/lua.h ] && [ -f $(JANSSON_H) ] && [ -f $(PCRE2_H) ] && [ -f $(BUSTED) ] && \
	        $(RUN_ENV) $(LUA) -e 'require "argparse"; require "dkjson"; require "gptoss.serve_http"' 2>/dev/null && \
	        command -v curl >/dev/null; }; then \
	  pkgs="$(SETUP_PACKAGES)"; \
	fi; \
	if ! command -v npm >/dev/null 2>&1 && [ ! -f $(TOKENIZER) ]; then \
	  pkgs="$$pkgs $(SETUP_NODE_PACKAGES)"; \
	fi; \
	if [ -n "$(SETUP_LUAROCKS)" ] && ! command -v luarocks >/dev/null 2>&1; then \
	  pkgs="$$pkgs $(SETUP_LUAROCKS)"; \
	fi; \
	if [ -n "$$pkgs" ]; then \
	  echo "== installing Debian packages: $${pkgs# }"; \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs; \
	fi; \
	if command -v npm >/dev/null 2>&1 && [ ! -f $(SERVE_CLIENT)/node_modules/openai/package.json ]; then \
	  echo "== installing the openai client for tests/serve_spec.lua"; \
	  (cd $(SERVE_CLIENT) && npm ci --no-audit --no-fund --loglevel=error); \
	fi; \
	if command -v npm >/dev/null 2>&1 && [ ! -f $(SCHEMA_CHECK)/node_modules/ajv/package.json ]; then \
	  echo "== installing ajv for tests/grammar_walk_spec.lua"; \
	  (cd $(SCHEMA_CHECK) && npm ci --no-audit --no-fund --loglevel=error); \
	fi

# Written by Node from gpt-tokenizer's o200k tables, so no Python is needed.
# test and demo only need it to exist (order-only): the GPU machine has no
# network and gets the file carried prebuilt, so no mtime there may rebuild it.
TOKENIZER_EXPORT := tools/tokenizer-export
$(TOKENIZER):
	cd $(TOKENIZER_EXPORT) && npm ci --no-audit --no-fund --loglevel=error
	@mkdir -p $(dir $@)
	node $(TOKENIZER_EXPORT)/export.mjs -o $@

tokenizer:
	$(MAKE) --always-make $(TOKENIZER)

# The closing line "N passed, N failed, N skipped" comes from tests/summary.lua.
# TESTS picks spec files (default: all of tests/).
TESTS ?= tests
test: setup | $(TOKENIZER)
	$(MAKE) all $(GEMM_PROBE) $(AMD_ASM) $(NV_PTX)
	$(RUN_ENV) $(if $(GEMM_PROBE),GPTOSS_GEMM_PROBE='$(GEMM_PROBE)') $(if $(AMD_ASM),GPTOSS_AMD_ASM='$(AMD_ASM)') \
	  $(if $(NV_PTX),GPTOSS_NV_PTX='$(NV_PTX)') $(LUA) $(BUSTED) --output=tests/summary.lua $(TESTS)

# Where hipcc is installed: the gfx90a device assembly of the matrix-core
# kernels, which tests/amd_build_spec.lua reads (no AMD GPU runs them here)
AMD_ASM := $(if $(shell command -v $(HIPCC) 2>/dev/null),$(BUILD)/amd-asm/gemm.s $(BUILD)/amd-asm/attention.s)
$(BUILD)/amd-asm/%.s: kernels/%.hip $(wildcard contract/*.h kernels/*.h src/hip/*.h src/core/*.h)
	@mkdir -p $(dir $@)
	$(HIPCC) $(AMD_COMMON) -Wno-pass-failed -Wno-unused-command-line-argument --offload-arch=gfx90a --cuda-device-only -S $< -o $@

# Where nvcc is installed: the PTX of the kernels a step launches, for sm_90a and (one file) for
# sm_80, which tests/programmatic_launch_spec.lua reads for their programmatic waits
NV_PTX := $(if $(NVCC),$(foreach k,embedding rmsnorm rope_kv router moe_dispatch attention gemm,$(BUILD)/nv-ptx/$(k).sm_90a.ptx) \
            $(BUILD)/nv-ptx/rmsnorm.sm_80.ptx)
$(BUILD)/nv-ptx/%.sm_90a.ptx: kernels/%.hip $(wildcard contract/*.h kernels/*.h src/core/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -x cu -std=c++17 -D__HIP_PLATFORM_NVIDIA__ $(HIP_INC) -arch=compute_90a -ptx $< -o $@
$(BUILD)/nv-ptx/%.sm_80.ptx: kernels/%.hip $(wildcard contract/*.h kernels/*.h src/core/*.h)
	@mkdir -p $(dir $@)
	$(NVCC) -x cu -std=c++17 -D__HIP_PLATFORM_NVIDIA__ $(HIP_INC) -arch=compute_80 -ptx $< -o $@

demo: setup | $(TOKENIZER)
	$(MAKE) all
	$(RUN_ENV) $(LUA) examples/demo.lua

# The CPU suite with core.so under AddressSanitizer and UBSan, in its own
# build folder. lua5.4 is not instrumented, so the runtimes are preloaded
# (gcc links core.so against libasan.so and libubsan.so, and ASan's must
# come first in the process); every process of the suite, the examples it
# runs included, writes its reports to SANITIZE_LOGS, and any report fails
# the target. Leaks are detected: Lua frees its state at exit, and what a
# system tool the suite runs leaks is suppressed (tests/lsan.supp).
SANITIZE := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
SANITIZE_LOGS = $(abspath $(BUILD))/sanitizer-report
SANITIZE_ENV = LD_PRELOAD='$(shell $(CC) -print-file-name=libasan.so) $(shell $(CC) -print-file-name=libubsan.so)' \
               ASAN_OPTIONS=detect_leaks=1:log_path=$(SANITIZE_LOGS) UBSAN_OPTIONS=print_stacktrace=1:log_path=$(SANITIZE_LOGS) \
               LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
test-sanitized: setup | $(TOKENIZER)
	$(MAKE) BUILD=$(BUILD)/sanitize TOKENIZER=$(TOKENIZER) HIP_PLATFORM=cpu CFLAGS='-O1 -g $(SANITIZE)' \
	  LDFLAGS='$(SANITIZE)' sanitized-suite
sanitized-suite: all
	rm -f $(SANITIZE_LOGS).*
	$(SANITIZE_ENV) $(RUN_ENV) $(LUA) $(BUSTED) --output=tests/summary.lua $(TESTS); status=$$?; \
	if ls $(SANITIZE_LOGS).* >/dev/null 2>&1; then cat $(SANITIZE_LOGS).*; echo "sanitizers: reports above"; exit 1; fi; \
	exit $$status

# Compile and link every platform into its own build folder (CI); sm_75
# has no bf16 matrix cores, so it compiles the plain fallback of matrix_core.h.
platforms:
	$(MAKE) BUILD=$(BUILD)/platform-cpu HIP_PLATFORM=cpu
	$(MAKE) BUILD=$(BUILD)/platform-nvidia HIP_PLATFORM=nvidia GPU_ARCH="sm_75 sm_80 sm_90a"
	$(MAKE) BUILD=$(BUILD)/platform-amd HIP_PLATFORM=amd GPU_ARCH=gfx90a

# libFuzzer targets of the file readers and of the Lua API (tests/fuzz/*.c,
# clang with ASan and UBSan): each runs FUZZ_SECONDS from its seed corpus; any
# report fails, and so does an input that runs FUZZ_TIMEOUT seconds (a hang:
# every target keeps its inputs to milliseconds). The lua_* targets embed Lua
# 5.4 to reach the readers of lua/gptoss/; lua_api drives require "gptoss".
#   make fuzz [FUZZ_SECONDS=60]
FUZZ_SECONDS ?= 60
FUZZ_TIMEOUT ?= 10
FUZZ_TARGETS := $(basename $(notdir $(wildcard tests/fuzz/*.c)))
FUZZ_LUA_LIB ?= -llua5.4
FUZZ_FLAGS := -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=all -Isrc/core -I$(LUA_INCDIR) -DFUZZ_LUA_DIR='"$(CURDIR)/lua"' \
              $(addprefix -I,$(JANSSON_INCDIR) $(PCRE2_INCDIR))
# lua_api links the binding and the engine glue besides the core: the CPU
# build's C_SRC (src/hip's C is cpu_only.c and what every build has); the
# other targets compile the core and src/lua/host.c (the one core function the
# Lua readers call).
FUZZ_API_SRC := $(wildcard src/lua/*.c src/hip/*.c)
FUZZ_EXTRA_SRC = src/lua/host.c
$(BUILD)/fuzz/lua_api: FUZZ_EXTRA_SRC := $(FUZZ_API_SRC)
$(BUILD)/fuzz/lua_api: $(FUZZ_API_SRC) $(wildcard contract/*.h src/lua/*.h src/hip/*.h)
$(BUILD)/fuzz/%: tests/fuzz/%.c $(wildcard tests/fuzz/*.h contract/*.h src/core/*.c src/core/*.h) src/lua/host.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) $< $(wildcard src/core/*.c) $(FUZZ_EXTRA_SRC) -o $@ $(LIBS) $(FUZZ_LUA_LIB)
# Every target runs, whatever another found, and the failures are listed at the end.
fuzz: $(FUZZ_TARGETS:%=$(BUILD)/fuzz/%) | $(TOKENIZER)
	failed=; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(BUILD)/fuzz/corpus-$$t && \
	  if GPTOSS_TOKENIZER=$(TOKENIZER) $(BUILD)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=$(FUZZ_TIMEOUT) \
	       -print_final_stats=1 -artifact_prefix=$(BUILD)/fuzz/$$t- $(BUILD)/fuzz/corpus-$$t tests/fuzz/corpus/$$t \
	       > $(BUILD)/fuzz/$$t.log 2>&1; then \
	    echo "fuzz: $$t: $$(grep -o 'number_of_executed_units: [0-9]*' $(BUILD)/fuzz/$$t.log), nothing found"; \
	  else \
	    tail -n 40 $(BUILD)/fuzz/$$t.log; echo "fuzz: $$t failed"; failed="$$failed $$t"; \
	  fi; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

# Debian packages the GPU machine lacks (no network there): carry .deps/. Open MPI's are its
# runtime and headers (without the InfiniBand, UCX and libfabric transports, which one host
# does without: their components are passed over)
DEPS_DEBS := lua5.4 liblua5.4-0 liblua5.4-dev libamdhip64-dev libreadline8 libtinfo6 \
             lua-busted lua-cliargs lua-dkjson lua-filesystem lua-luassert lua-mediator \
             lua-penlight lua-say lua-system lua-term lua-argparse libjansson4 libjansson-dev \
             libpcre2-8-0 libpcre2-dev \
             lua-http lua-cqueues lua-cjson lua-basexx lua-binaryheap lua-bit32 lua-compat53 lua-fifo \
             lua-lpeg lua-lpeg-patterns lua-luaossl libssl3 \
             libopenmpi3 libopenmpi-dev openmpi-bin openmpi-common libpmix2 libmunge2 libhwloc15 libudev1 \
             libevent-core-2.1-7 libevent-pthreads-2.1-7
deps:
	@mkdir -p .deps
	cd .deps && apt-get download $(DEPS_DEBS)

# On the GPU machine (an NVIDIA one, so the build is nvidia whatever the
# detection above says): unpack .deps into a private prefix (never /) and run
# the whole suite with that prefix's Lua, busted and headers.
DEBROOT ?= /tmp/gptoss-debroot
DEB_LIB := $(DEBROOT)/usr/lib/x86_64-linux-gnu
# Open MPI from the prefix: built against its headers; run with its mpirun (linked as an
# installed system's update-alternatives would), relocated there by OPAL_PREFIX, with
# Debian's settings from its /etc/openmpi, PMIx finding its plugins by their path, the
# components whose libraries the machine lacks passed over quietly, and shared memory copied
# through its buffers rather than read across processes (the GPU machine's sandbox may not
# offer process_vm_readv)
DEB_MPI_FLAGS := MPI_CFLAGS='-DGPTOSS_MPI -I$(DEB_LIB)/openmpi/include' MPI_LIBS='-L$(DEB_LIB)/openmpi/lib -lmpi'
DEB_MPI_ENV = PATH='$(DEBROOT)/usr/bin:$(PATH)' OPAL_PREFIX='$(DEBROOT)/usr' OPAL_SYSCONFDIR='$(DEBROOT)/etc/openmpi' \
	  PMIX_MCA_mca_base_component_path='$(DEB_LIB)/pmix2/lib/pmix' OMPI_MCA_mca_base_component_show_load_errors=0 \
	  OMPI_MCA_btl_vader_single_copy_mechanism=none
# (test, then demo: as goals of one parallel make, both would link core.so
# at once and one could load it half written)
GPU_MACHINE_MAKE = $(MAKE) HIP_PLATFORM=nvidia RUN_LD_PATH=$(DEB_LIB) RUN_DEB_MPI=1 LUA=$(DEBROOT)/usr/bin/lua5.4 \
	  LUA_INCDIR=$(DEBROOT)/usr/include/lua5.4 HIP_INCDIR=$(DEBROOT)/usr/include \
	  EXTRA_INC=$(DEBROOT)/usr/include/x86_64-linux-gnu BUSTED=$(DEBROOT)/usr/bin/busted \
	  JANSSON_INCDIR=$(DEBROOT)/usr/include JANSSON_LIBDIR=$(DEB_LIB) \
	  PCRE2_INCDIR=$(DEBROOT)/usr/include PCRE2_LIBDIR=$(DEB_LIB) $(DEB_MPI_FLAGS) \
	  LUA_PATH_EXTRA='$(DEBROOT)/usr/share/lua/5.4/?.lua;$(DEBROOT)/usr/share/lua/5.4/?/init.lua' \
	  LUA_CPATH_EXTRA='$(DEB_LIB)/lua/5.4/?.so' TESTS='$(TESTS)'
gpu-machine-prefix:
	mkdir -p $(DEBROOT)
	for deb in .deps/*.deb; do dpkg -x $$deb $(DEBROOT); done
	ln -sf mpirun.openmpi $(DEBROOT)/usr/bin/mpirun
gpu-machine-test: gpu-machine-prefix
	$(GPU_MACHINE_MAKE) test
	$(GPU_MACHINE_MAKE) demo

# A Lua script, or a command (./gptoss, mpirun, examples/bench_getp_mpi.sh), on the GPU
# machine with the private prefix's Lua, modules and Open MPI:
#   make gpu-machine-run SCRIPT="examples/bench_gpu.lua --ctx 256"
#   make gpu-machine-run COMMAND="examples/bench_getp_mpi.sh 20b"
gpu-machine-run: gpu-machine-prefix
	$(GPU_MACHINE_MAKE) all
	LD_LIBRARY_PATH='$(DEB_LIB)' LUA_PATH='lua/?.lua;lua/?/init.lua;$(DEBROOT)/usr/share/lua/5.4/?.lua;$(DEBROOT)/usr/share/lua/5.4/?/init.lua;;' \
	  LUA_CPATH='$(BUILD)/?.so;$(DEB_LIB)/lua/5.4/?.so;;' $(DEB_MPI_ENV) $(or $(COMMAND),$(DEBROOT)/usr/bin/lua5.4 $(SCRIPT))

# luarocks (build.type = "make") installs through these. tokenizer.bin, README.md
# (bench_tokenizer's default text), the examples (the gptoss program's commands) and docs/
# (which gptoss help names) go beside the Lua modules, where gptoss.project_file() finds them from gptoss's own folder
INST_LIBDIR ?= $(BUILD)/install/lib
INST_LUADIR ?= $(BUILD)/install/lua
install: $(LIB) | $(TOKENIZER)
	mkdir -p $(INST_LIBDIR)/gptoss $(INST_LUADIR)/gptoss/examples $(INST_LUADIR)/gptoss/docs
	cp $(LIB) $(INST_LIBDIR)/gptoss/core.so
	cp lua/gptoss/*.lua $(TOKENIZER) README.md $(INST_LUADIR)/gptoss/
	cp examples/*.lua $(INST_LUADIR)/gptoss/examples/
	cp docs/*.md $(INST_LUADIR)/gptoss/docs/

clean:
	rm -rf $(BUILD)
