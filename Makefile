# memprof: build, test, install, benchmark.
#
# The module is compiled against LuaJIT's public headers only and is never
# linked against libluajit: the host (luajit, tarantool, nvim, ...) already
# provides the VM, and linking a second copy would load a second VM.

PREFIX ?= /usr/local
LUA_VERSION ?= 5.1
LUA_INCDIR ?= $(shell pkg-config --variable=includedir luajit 2>/dev/null)
LUA_CMOD_DIR ?= $(PREFIX)/lib/lua/$(LUA_VERSION)
LUA_LMOD_DIR ?= $(PREFIX)/share/lua/$(LUA_VERSION)
BIN_DIR ?= $(PREFIX)/bin
LUAJIT ?= luajit
BUSTED ?= /usr/bin/busted
# busted's output, then the slowest spec files and specs.
SPEC_OUT = -o spec/support/timed_output.lua

CC ?= cc
CFLAGS ?= -O2 -g
WARN = -Wall -Wextra
ALL_CFLAGS = -std=c99 $(WARN) -fPIC -fvisibility=hidden -I$(LUA_INCDIR) $(CFLAGS)
LDLIBS = -ldl -lpthread -lm

# Where the module and the specs' C module go; another BUILD keeps a
# second build apart (.ci/build-hosts cross-builds one for arm64 there).
BUILD ?= build
SRCS = $(wildcard src/*.c)
HDRS = $(wildcard src/*.h)
OBJS = $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRCS))
MODULE = $(BUILD)/memprof.so
# The Lua modules, by folder of lua/memprof (one stage of the pipeline
# each: read, analysis, report, encode, cli).
LUA_DIRS = read analysis report report/html report/model encode cli
LUA_MODS = $(wildcard lua/memprof/*.lua)
# The HTML page's style and script, read by report/html.lua at run time.
LUA_HTML = $(wildcard lua/memprof/report/html/*.css lua/memprof/report/html/*.js \
  lua/memprof/report/html/*.html)

# The spec host that runs VMs in threads links the VM (see below).
LUAJIT_LIBS = $(shell pkg-config --libs luajit 2>/dev/null)
LUAJIT2_DIR = build/luajit2/usr
LUAJIT2_LIB = $(LUAJIT2_DIR)/lib/x86_64-linux-gnu
ATTACH_REGS_HOST = $(if $(filter x86_64,$(shell uname -m)),build/attach_regs_host build/two_vm_host build/arena_plugin.so)
LUAJIT2_HOST = $(if $(wildcard $(LUAJIT2_LIB)/libluajit-5.1.so.2),build/threads_host_luajit2)

# For the names of C functions (spec/module/symbols_spec.lua): a host program
# with a static C function, and a stripped copy of it; copies of the C
# module, stripped, and stripped with a separate debug file found through
# its debug link (in .debug/ next to it) or its build-id (the spec puts it
# under a debug directory of its own).
NAMES_FIXTURES = build/static_host build/static_host_stripped \
  build/stripped/test_cmodule.so build/debuglink/test_cmodule.so \
  build/buildid/test_cmodule.so build/buildid/test_cmodule.debug

.PHONY: test-valgrind test-sanitizers
.PHONY: all fixtures faults-module hosts test test-reporter test-module \
  test-hosts test-matrix test-luajit2 test-tarantool test-lua51 test-build \
  test-reporter-host test-arm64 \
  arm64-module bench demo install uninstall clean format check-format

# The module alone; the specs' fixtures are built by the test targets.
all: $(MODULE)

# What the specs build on: C modules and hosts of their own, stripped
# copies, the module with fault injection (src/fault.h).
fixtures: $(MODULE) $(BUILD)/test_cmodule.so build/alloc_wrapper.so \
  build/threads_host build/leb128_check build/a64_const_check \
  $(LUAJIT2_HOST) $(NAMES_FIXTURES) $(ATTACH_REGS_HOST) faults-module

$(BUILD)/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(MODULE): $(OBJS)
	$(CC) -shared $(ALL_CFLAGS) -o $@ $(OBJS) $(LDFLAGS) $(LDLIBS)

# A host that runs several VMs in threads, each profiling itself (it links
# the VM, as any host does). With OpenResty's luajit2 unpacked into
# build/luajit2 (see .ci/install-deps), a second host links that VM.

build/threads_host: spec/support/threads_host.c
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LUAJIT_LIBS) -lpthread

# A host whose one thread checks its registers around each sleep, for
# spec/hosts/attach_regs_spec.lua (x86_64 only).
build/attach_regs_host: spec/support/attach_regs_host.c
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LUAJIT_LIBS)

# A host with two VMs in two threads, the second on an allocator of the
# host's, for spec/hosts/attach_two_vms_spec.lua (x86_64 only).
build/two_vm_host: spec/support/two_vm_host.c
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LUAJIT_LIBS) -lpthread -ldl

# Its closed VM's allocator, in a plugin it unloads.
build/arena_plugin.so: spec/support/arena_plugin.c
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -shared -o $@ $<

build/threads_host_luajit2: spec/support/threads_host.c
	$(CC) $(ALL_CFLAGS) -I$(LUAJIT2_DIR)/include/luajit-2.1 -o $@ $< \
	  $(LUAJIT2_LIB)/libluajit-5.1.so.2 -Wl,-rpath,$(CURDIR)/$(LUAJIT2_LIB) \
	  -lpthread

# The writer's LEB128 encoders against a plain loop (spec/module/writer_spec.lua).
build/leb128_check: spec/support/leb128_check.c src/writer.c src/writer.h
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ spec/support/leb128_check.c src/writer.c -lpthread

# arm64: a BLR's target from the loads before it, decoded on any host
# (spec/module/trace_lines_spec.lua).
build/a64_const_check: spec/support/a64_const_check.c src/trace_lines_a64.c \
  src/safe_read.c $(HDRS)
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ spec/support/a64_const_check.c \
	  src/trace_lines_a64.c src/safe_read.c

# A fixed seed for LuaJIT's PRNG, for the callgrind runs of make bench.
build/fixed_seed.so: bench/support/fixed_seed.c
	@mkdir -p build
	$(CC) -shared $(ALL_CFLAGS) -o $@ $< -ldl

# A tiny C module used by the specs to check C-function attribution.
$(BUILD)/test_cmodule.so: spec/support/test_cmodule.c
	@mkdir -p $(BUILD)
	$(CC) -shared $(ALL_CFLAGS) -o $@ $<

# The host program, the stripped copies and the debug files of
# NAMES_FIXTURES (above).
build/static_host: spec/support/static_host.c
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LUAJIT_LIBS)

build/static_host_stripped: build/static_host
	strip --strip-all -o $@ $<

build/stripped/test_cmodule.so: build/test_cmodule.so
	@mkdir -p $(dir $@)
	strip --strip-all -o $@ $<

build/debuglink/test_cmodule.so: build/test_cmodule.so
	@mkdir -p $(dir $@).debug
	objcopy --only-keep-debug $< $(dir $@).debug/test_cmodule.debug
	strip --strip-all -o $@ $<
	objcopy --add-gnu-debuglink=$(dir $@).debug/test_cmodule.debug $@

build/buildid/test_cmodule.so: build/test_cmodule.so
	@mkdir -p $(dir $@)
	strip --strip-all -o $@ $<

build/buildid/test_cmodule.debug: build/test_cmodule.so
	@mkdir -p $(dir $@)
	objcopy --only-keep-debug $< $@

# The module with fault injection (src/fault.h), for spec/module/faults_spec.lua.
faults-module:
	$(MAKE) --no-print-directory BUILD=build/faults \
	  CFLAGS='$(CFLAGS) -DMEMPROF_FAULTS' build/faults/memprof.so

# Another allocator hook, for the specs of the allocator chain.
build/alloc_wrapper.so: spec/support/alloc_wrapper.c
	@mkdir -p build
	$(CC) -shared $(ALL_CFLAGS) -o $@ $<

# The spec suite on every build that is here (.ci/install-deps --tests
# installs them all): Debian's LuaJIT, OpenResty's luajit2, Tarantool;
# then the analysis specs under plain Lua 5.1; then the LuaJIT builds of
# .ci/hosts (below), the arm64 one under qemu.
LUAJIT2 = build/luajit2/usr/bin/luajit
TARANTOOL ?= tarantool

# More LuaJIT builds, listed in .ci/hosts and built from source by
# .ci/build-hosts into HOSTS_DIR (make hosts): HOSTS_DIR/NAME/luajit is
# each one's interpreter, HOSTS_DIR/NAME/lua its jit.* modules. Their
# default paths cover /usr/local only, so Debian's Lua directories (busted,
# cjson) come after ours.
HOSTS_DIR ?= build/hosts
HOST_NAMES = $(shell .ci/host-list names)
HOSTS = $(foreach h,$(HOST_NAMES),$(if $(wildcard $(HOSTS_DIR)/$(h)/luajit),$(h)))
# Seconds one spec file may run (a broken VM can hang).
FILE_TIMEOUT ?= 600
DEBIAN_LUA_PATH = /usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua
DEBIAN_LUA_CPATH = /usr/lib/x86_64-linux-gnu/lua/5.1/?.so
HOST_DIR = $(abspath $(HOSTS_DIR)/$(HOST))
# The known build whose offsets a host's must match (.ci/hosts).
known_build = $(shell .ci/host-list known $(1))
ARM64_HOST ?= $(firstword $(shell .ci/host-list arm64))
ARM64_DIR = $(abspath $(HOSTS_DIR)/$(ARM64_HOST))
ARM64_LUA = $(ARM64_DIR)/luajit

SPEC_CPATH = ./build/?.so;;
SPEC_PATH = ./lua/?.lua;./spec/?.lua;;
SPEC_ENV = LUA_CPATH='$(SPEC_CPATH)' LUA_PATH='$(SPEC_PATH)'

# The specs live in three folders, by what they depend on:
#   spec/reporter  the Lua reporter alone: built streams and files, no VM
#                  of ours (it runs on any LuaJIT: once per run)
#   spec/module    memprof.so in a VM: recording, snapshots, layouts,
#                  trace lines (they run under every LuaJIT build)
#   spec/hosts     programs end to end: nginx, Tarantool's console,
#                  Neovim, C hosts, browsers and pprof, install, the CLI
# `make test` runs the three under Debian's luajit, side by side (their
# outputs kept apart: spec/support/suites); `make test-matrix` runs the
# module's specs under every other build, the reporter's under a
# non-GC64 one, valgrind and the sanitizers, two at a time.
TEST_JOBS ?= 3
MATRIX_JOBS ?= 2
DEBIAN_BUILD = Debian bookworm luajit 2.1.0~beta3+git20220320
SUITES = spec/support/suites
# Each spec file in a busted process of its own (a fresh VM), SPEC_JOBS at
# a time: `$(EACH) 'INTERPRETER' PATH...`.
EACH = BUSTED=$(BUSTED) spec/support/busted_each
SPEC_JOBS ?= 1
export SPEC_JOBS
# The non-GC64 build that runs the reporter's specs in the matrix.
NONGC64_HOST ?= upstream-2026-nongc64

test: fixtures
	$(SUITES) $(TEST_JOBS) module:test-module hosts:test-hosts \
	  reporter:test-reporter lua51:test-lua51

test-reporter:
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(LUAJIT) MEMPROF_TEST_BUILD='$(DEBIAN_BUILD)' \
	  $(EACH) 'timeout $(FILE_TIMEOUT) $(LUAJIT)' spec/reporter

test-module: fixtures
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(LUAJIT) MEMPROF_TEST_BUILD='$(DEBIAN_BUILD)' \
	  $(EACH) 'timeout $(FILE_TIMEOUT) $(LUAJIT)' spec/module

test-hosts: fixtures
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(LUAJIT) MEMPROF_TEST_BUILD='$(DEBIAN_BUILD)' \
	  MEMPROF_TEST_NGINX=1 MEMPROF_TEST_CONSOLE=1 MEMPROF_TEST_INSTALL=1 \
	  $(EACH) 'timeout $(FILE_TIMEOUT) $(LUAJIT)' spec/hosts

# Every build of the matrix that is here: the hosts of .ci/hosts (built
# first; a host that fails to build is left out, and said so, and its
# suite fails), OpenResty's luajit2, Tarantool.
# (The longest first, so that the last to end do not run alone: arm64
# under qemu, valgrind, the sanitizers.)
MATRIX_SUITES = \
  $(foreach h,$(shell .ci/host-list arm64),$(h):test-arm64:ARM64_HOST=$(h)) \
  valgrind:test-valgrind sanitizers:test-sanitizers \
  $(if $(shell command -v $(TARANTOOL)),tarantool:test-tarantool) \
  $(if $(wildcard $(LUAJIT2)),luajit2:test-luajit2) \
  $(foreach h,$(HOST_NAMES),$(h):test-build:HOST=$(h)) \
  reporter-$(NONGC64_HOST):test-reporter-host:HOST=$(NONGC64_HOST)

test-matrix: fixtures hosts
	$(SUITES) $(MATRIX_JOBS) $(MATRIX_SUITES)

hosts:
	.ci/build-hosts $(HOSTS_DIR) || \
	  echo "make hosts: some hosts did not build (see above)" >&2

test-luajit2: fixtures
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(CURDIR)/$(LUAJIT2) \
	  MEMPROF_TEST_BUILD='OpenResty luajit2 2.1-20230119' \
	  $(EACH) 'timeout $(FILE_TIMEOUT) $(LUAJIT2)' spec/module

# (An uncaught error in tarantool can hang it: FILE_TIMEOUT ends it.)
test-tarantool: fixtures
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(TARANTOOL) \
	  MEMPROF_TEST_BUILD='Tarantool 2.6.0' \
	  $(EACH) 'timeout $(FILE_TIMEOUT) $(TARANTOOL)' spec/module

# `make test-build HOST=NAME` runs the module's specs under one build of
# .ci/hosts, with a time limit, as a broken VM can hang;
# `make test-reporter-host HOST=NAME` the reporter's.
HOST_ENV = LUA_CPATH='$(SPEC_CPATH)$(DEBIAN_LUA_CPATH)' \
  LUA_PATH='$(SPEC_PATH)$(HOST_DIR)/lua/?.lua;$(DEBIAN_LUA_PATH)' \
  MEMPROF_TEST_BUILD="$(call known_build,$(HOST))" \
  MEMPROF_TEST_LUA=$(HOST_DIR)/luajit
HOST_CHECK = @test -n "$(HOST)" -a -x "$(HOST_DIR)/luajit" || \
  { echo "no host '$(HOST)' in $(HOSTS_DIR) (HOST=NAME of .ci/hosts; make hosts)"; exit 1; }

test-build: fixtures
	$(HOST_CHECK)
	$(HOST_ENV) $(EACH) 'timeout $(FILE_TIMEOUT) $(HOST_DIR)/luajit' spec/module

test-reporter-host:
	$(HOST_CHECK)
	$(HOST_ENV) $(EACH) 'timeout $(FILE_TIMEOUT) $(HOST_DIR)/luajit' spec/reporter

# Upstream LuaJIT for arm64 under qemu (see .ci/build-hosts): the
# recording specs, with memprof.so and test_cmodule.so cross-built for
# arm64 into that host's folder (rebuilt here when the sources change)
# and Debian's arm64 builds of busted's C modules; no x86_64 C module
# can load there, so the default cpath is left out.
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_SPECS ?= spec/module/binding_spec.lua spec/module/hook_spec.lua \
  spec/module/stacks_spec.lua spec/module/vm_layout_spec.lua \
  spec/module/heap_walk_spec.lua spec/module/dominators_spec.lua \
  spec/module/trace_lines_spec.lua
# With branch protection (a host named *-pac), return addresses are signed
# on the stack: the specs of compiled code by line, which unwind C frames
# (every C function authenticates there, so the whole list is too slow).
ARM64_PAC_SPECS ?= spec/module/hook_spec.lua spec/module/trace_lines_spec.lua
ARM64_TIMEOUT ?= 1800

arm64-module:
	@test -x "$(ARM64_LUA)" || \
	  { echo "no arm64 host in $(HOSTS_DIR): run make hosts"; exit 1; }
	$(MAKE) --no-print-directory BUILD=$(ARM64_DIR) CC=$(ARM64_CC) \
	  LUA_INCDIR=$(ARM64_DIR)/tree/src \
	  $(ARM64_DIR)/memprof.so $(ARM64_DIR)/test_cmodule.so

test-arm64: arm64-module
	LUA_CPATH='$(ARM64_DIR)/?.so;$(ARM64_DIR)/deps/usr/lib/aarch64-linux-gnu/lua/5.1/?.so' \
	  LUA_PATH='$(SPEC_PATH)$(ARM64_DIR)/lua/?.lua;$(DEBIAN_LUA_PATH)' \
	  MEMPROF_TEST_BUILD="$(call known_build,$(ARM64_HOST))" \
	  MEMPROF_TEST_LUA=$(ARM64_LUA) \
	  $(EACH) 'timeout $(ARM64_TIMEOUT) $(ARM64_LUA)' \
	  $(if $(filter %-pac,$(ARM64_HOST)),$(ARM64_PAC_SPECS),$(ARM64_SPECS))

# The specs that load the module, run once under valgrind's memcheck (only
# errors in the module's own code count: spec/support/valgrind_ours.lua)
# and once with the module built with AddressSanitizer and UBSan.
MODULE_SPECS = $(addprefix spec/module/,binding_spec.lua hook_spec.lua \
  stacks_spec.lua vm_layout_spec.lua vm_learn_spec.lua writer_spec.lua \
  symbols_spec.lua alloc_chain_spec.lua sample_spec.lua stats_spec.lua \
  snapshot_spec.lua heap_walk_spec.lua heap_join_spec.lua \
  dominators_spec.lua heap_diff_spec.lua trace_lines_spec.lua \
  snapshot_names_spec.lua)
VALGRIND_DIR = build/valgrind
SANITIZED = build/sanitized
LIBASAN = $(shell $(CC) -print-file-name=libasan.so)

# (A log per process, %p; the checker reads them as one.)
VALGRIND = timeout 1200 valgrind --tool=memcheck --trace-children=no \
  --fair-sched=yes --log-file=$(VALGRIND_DIR)/%p.log
test-valgrind: fixtures
	rm -rf $(VALGRIND_DIR) && mkdir -p $(VALGRIND_DIR)
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(LUAJIT) MEMPROF_TEST_VALGRIND=1 \
	  $(EACH) '$(VALGRIND) $(LUAJIT)' $(MODULE_SPECS)
	for log in $(VALGRIND_DIR)/*.log; do cat $$log; echo; done \
	  >$(VALGRIND_DIR)/all
	$(LUAJIT) spec/support/valgrind_ours.lua $(VALGRIND_DIR)/all

test-sanitizers:
	$(MAKE) --no-print-directory BUILD=$(SANITIZED) \
	  CFLAGS='-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined' \
	  $(SANITIZED)/memprof.so $(SANITIZED)/test_cmodule.so
	$(MAKE) --no-print-directory fixtures
	LUA_CPATH='./$(SANITIZED)/?.so;$(SPEC_CPATH)' LUA_PATH='$(SPEC_PATH)' \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  MEMPROF_TEST_SANITIZERS=1 MEMPROF_TEST_LUA=$(LUAJIT) \
	  $(EACH) 'env LD_PRELOAD=$(LIBASAN) timeout 1800 $(LUAJIT)' $(MODULE_SPECS)

# The reporter runs on LuaJIT only: under plain Lua 5.1, its library and
# commands say so (spec/hosts/plain_lua_spec.lua).
test-lua51:
	LUA_PATH='./lua/?.lua;./spec/?.lua;;' lua5.1 $(BUSTED) $(SPEC_OUT) spec/hosts/plain_lua_spec.lua

# bench/callgrind.lua preloads build/fixed_seed.so into its runs.
# BENCH_REPORTER=only: the reporter's section alone (bench/reporter.lua).
bench: fixtures build/fixed_seed.so
	LUA_CPATH='./build/?.so;;' \
	  LUA_PATH='./lua/?.lua;./bench/?.lua;./spec/?.lua;;' \
	  $(LUAJIT) bench/run.lua

install: $(MODULE)
	install -d $(DESTDIR)$(LUA_CMOD_DIR) $(DESTDIR)$(LUA_LMOD_DIR)/memprof $(DESTDIR)$(BIN_DIR)
	install -m 0755 $(MODULE) $(DESTDIR)$(LUA_CMOD_DIR)/memprof.so
	install -m 0644 $(LUA_MODS) $(DESTDIR)$(LUA_LMOD_DIR)/memprof/
	for d in $(LUA_DIRS); do \
	  install -d $(DESTDIR)$(LUA_LMOD_DIR)/memprof/$$d && \
	  install -m 0644 lua/memprof/$$d/*.lua $(DESTDIR)$(LUA_LMOD_DIR)/memprof/$$d/ || exit 1; \
	done
	install -d $(DESTDIR)$(LUA_LMOD_DIR)/memprof/report/html
	install -m 0644 $(LUA_HTML) $(DESTDIR)$(LUA_LMOD_DIR)/memprof/report/html/
	install -m 0755 bin/memprof-report $(DESTDIR)$(BIN_DIR)/memprof-report
	install -m 0755 bin/memprof $(DESTDIR)$(BIN_DIR)/memprof

uninstall:
	rm -f $(DESTDIR)$(LUA_CMOD_DIR)/memprof.so $(DESTDIR)$(BIN_DIR)/memprof-report \
	  $(DESTDIR)$(BIN_DIR)/memprof
	rm -rf $(DESTDIR)$(LUA_LMOD_DIR)/memprof

format:
	clang-format -i $(SRCS) $(HDRS) spec/support/*.c bench/support/*.c

check-format:
	clang-format --dry-run --Werror $(SRCS) $(HDRS) spec/support/*.c \
	  bench/support/*.c

# Keeps build/luajit2, build/nginx and build/node_modules (unpacked by
# .ci/install-deps --tests) and build/hosts (make hosts).
clean:
	rm -rf build/obj build/*.so build/threads_host build/threads_host_luajit2 \
	  build/leb128_check build/a64_const_check build/static_host build/static_host_stripped \
	  build/stripped build/debuglink build/buildid build/faults \
	  build/sanitized build/valgrind build/fixed_seed.so build/demo.bin

# Profiles a small program that leaks (with its call stacks, the JIT off
# so that every allocation is charged to its line) and prints what it
# leaves live.
demo: $(MODULE)
	LUA_CPATH='./build/?.so;;' LUA_PATH='./lua/?.lua;;' \
	  $(LUAJIT) -joff bench/demo.lua build/demo.bin
	bin/memprof-report --leaks --human-readable --heap=build/demo.bin.heap \
	  build/demo.bin

# memprof-report on mutated heap snapshots for FUZZ_SECONDS (default 60):
# each run in a child with a time limit; fails on a crash, a hang or an
# error other than `FILE: byte N: ...` (bench/fuzz_heap.lua; FUZZ_CASES,
# FUZZ_SEED, FUZZ_KEEP). spec/reporter/heap_fuzz_spec.lua runs a few.
.PHONY: fuzz
fuzz: $(MODULE)
	LUA_CPATH='./build/?.so;;' \
	  LUA_PATH='./lua/?.lua;./bench/?.lua;./spec/?.lua;;' \
	  FUZZ_SECONDS=$${FUZZ_SECONDS:-60} $(LUAJIT) bench/fuzz_heap.lua
