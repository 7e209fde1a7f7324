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

CC ?= cc
CFLAGS ?= -O2 -g
WARN = -Wall -Wextra
ALL_CFLAGS = -std=c99 $(WARN) -fPIC -fvisibility=hidden -I$(LUA_INCDIR) $(CFLAGS)
LDLIBS = -ldl -lpthread

SRCS = $(wildcard src/*.c)
HDRS = $(wildcard src/*.h)
OBJS = $(patsubst src/%.c,build/obj/%.o,$(SRCS))
MODULE = build/memprof.so
LUA_MODS = $(wildcard lua/memprof/*.lua)
LUA_REPORTS = $(wildcard lua/memprof/report/*.lua)

# The spec host that runs VMs in threads links the VM (see below).
LUAJIT_LIBS = $(shell pkg-config --libs luajit 2>/dev/null)
LUAJIT2_DIR = build/luajit2/usr
LUAJIT2_LIB = $(LUAJIT2_DIR)/lib/x86_64-linux-gnu
LUAJIT2_HOST = $(if $(wildcard $(LUAJIT2_LIB)/libluajit-5.1.so.2),build/threads_host_luajit2)

.PHONY: all test test-luajit test-luajit2 test-tarantool test-lua51 bench demo install uninstall clean format check-format

all: $(MODULE) build/test_cmodule.so build/alloc_wrapper.so build/threads_host \
  build/leb128_check $(LUAJIT2_HOST)

build/obj/%.o: src/%.c $(HDRS)
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

build/threads_host_luajit2: spec/support/threads_host.c
	$(CC) $(ALL_CFLAGS) -I$(LUAJIT2_DIR)/include/luajit-2.1 -o $@ $< \
	  $(LUAJIT2_LIB)/libluajit-5.1.so.2 -Wl,-rpath,$(CURDIR)/$(LUAJIT2_LIB) \
	  -lpthread

# The writer's LEB128 encoders against a plain loop (spec/writer_spec.lua).
build/leb128_check: spec/support/leb128_check.c src/writer.c src/writer.h
	@mkdir -p build
	$(CC) $(ALL_CFLAGS) -o $@ spec/support/leb128_check.c src/writer.c -lpthread

# A tiny C module used by the specs to check C-function attribution.
build/test_cmodule.so: spec/support/test_cmodule.c
	@mkdir -p build
	$(CC) -shared $(ALL_CFLAGS) -o $@ $<

# Another allocator hook, for the specs of the allocator chain.
build/alloc_wrapper.so: spec/support/alloc_wrapper.c
	@mkdir -p build
	$(CC) -shared $(ALL_CFLAGS) -o $@ $<

# The spec suite on every build that is here (.ci/install-deps installs
# them all): Debian's LuaJIT, OpenResty's luajit2, Tarantool; then the
# analysis specs under plain Lua 5.1.
LUAJIT2 = build/luajit2/usr/bin/luajit
TARANTOOL ?= tarantool
SPEC_ENV = LUA_CPATH='./build/?.so;;' LUA_PATH='./lua/?.lua;./spec/?.lua;;'
test: test-luajit $(if $(wildcard $(LUAJIT2)),test-luajit2) \
  $(if $(shell command -v $(TARANTOOL)),test-tarantool) test-lua51

test-luajit: all
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(LUAJIT) $(LUAJIT) $(BUSTED) spec

test-luajit2: all
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(CURDIR)/$(LUAJIT2) $(LUAJIT2) $(BUSTED) spec

# An uncaught error in tarantool can hang it: hence the time limit.
test-tarantool: all
	$(SPEC_ENV) MEMPROF_TEST_LUA=$(TARANTOOL) timeout 900 \
	  $(TARANTOOL) $(BUSTED) spec

# The analysis side also runs on plain Lua 5.1.
LUA51_SPECS = spec/reader_spec.lua spec/analysis_spec.lua \
  spec/report_text_spec.lua spec/cli_spec.lua spec/views_spec.lua \
  spec/report_views_spec.lua spec/report_json_spec.lua \
  spec/report_folded_spec.lua spec/report_pprof_spec.lua \
  spec/report_chrome_spec.lua spec/diff_spec.lua spec/progress_spec.lua \
  spec/report_html_spec.lua
test-lua51:
	LUA_PATH='./lua/?.lua;./spec/?.lua;;' lua5.1 $(BUSTED) $(LUA51_SPECS)

bench: all
	LUA_CPATH='./build/?.so;;' LUA_PATH='./lua/?.lua;./bench/?.lua;;' \
	  $(LUAJIT) bench/run.lua

install: $(MODULE)
	install -d $(DESTDIR)$(LUA_CMOD_DIR) $(DESTDIR)$(LUA_LMOD_DIR)/memprof $(DESTDIR)$(BIN_DIR)
	install -m 0755 $(MODULE) $(DESTDIR)$(LUA_CMOD_DIR)/memprof.so
	install -d $(DESTDIR)$(LUA_LMOD_DIR)/memprof/report
	install -m 0644 $(LUA_MODS) $(DESTDIR)$(LUA_LMOD_DIR)/memprof/
	install -m 0644 $(LUA_REPORTS) $(DESTDIR)$(LUA_LMOD_DIR)/memprof/report/
	install -m 0755 bin/memprof-report $(DESTDIR)$(BIN_DIR)/memprof-report
	install -m 0755 bin/memprof $(DESTDIR)$(BIN_DIR)/memprof

uninstall:
	rm -f $(DESTDIR)$(LUA_CMOD_DIR)/memprof.so $(DESTDIR)$(BIN_DIR)/memprof-report \
	  $(DESTDIR)$(BIN_DIR)/memprof
	rm -rf $(DESTDIR)$(LUA_LMOD_DIR)/memprof

format:
	clang-format -i $(SRCS) $(HDRS) spec/support/*.c

check-format:
	clang-format --dry-run --Werror $(SRCS) $(HDRS) spec/support/*.c

# Keeps build/luajit2 (unpacked by .ci/install-deps).
clean:
	rm -rf build/obj build/*.so build/threads_host build/threads_host_luajit2 \
	  build/leb128_check \
	  build/demo.bin

# Profiles a small program and prints its report.
demo: all
	LUA_CPATH='./build/?.so;;' LUA_PATH='./lua/?.lua;;' \
	  $(LUAJIT) bench/demo.lua build/demo.bin
	bin/memprof-report --human-readable build/demo.bin
