rockspec_format = "3.0"
package = "memprof"
version = "scm-1"
source = {
  url = "git+https://example.invalid/memprof.git",
}
description = {
  summary = "Memory profiler for LuaJIT, loadable as a C module",
  detailed = [[
Records every allocation, reallocation and free of a running LuaJIT VM
from a C module (no patched VM), attributed to Lua lines, C functions,
built-ins, JIT traces and the garbage collector, in Tarantool's memprof
format. memprof-report prints where memory was allocated and what is
still live.]],
  license = "MIT",
}
dependencies = {
  "lua >= 5.1",
}
build = {
  type = "builtin",
  modules = {
    memprof = {
      sources = {
        "src/binding.c", "src/cnames.c", "src/hook.c", "src/lifecycle.c",
        "src/live.c", "src/places.c", "src/pprof.c", "src/sample.c",
        "src/snapshot.c", "src/stacks.c", "src/symbols.c",
        "src/trace_lines.c", "src/vm_discover.c", "src/vm_layout.c",
        "src/vm_learn.c", "src/vm_trace_calib.c", "src/writer.c",
      },
      libraries = { "dl", "pthread", "m" },
    },
    ["memprof.reader"] = "lua/memprof/reader.lua",
    ["memprof.sites"] = "lua/memprof/sites.lua",
    ["memprof.heap"] = "lua/memprof/heap.lua",
    ["memprof.analyze"] = "lua/memprof/analyze.lua",
    ["memprof.cli"] = "lua/memprof/cli.lua",
    ["memprof.groups"] = "lua/memprof/groups.lua",
    ["memprof.record"] = "lua/memprof/record.lua",
    ["memprof.leaks"] = "lua/memprof/leaks.lua",
    ["memprof.peak"] = "lua/memprof/peak.lua",
    ["memprof.temporary"] = "lua/memprof/temporary.lua",
    ["memprof.timeline"] = "lua/memprof/timeline.lua",
    ["memprof.cumulative"] = "lua/memprof/cumulative.lua",
    ["memprof.trace_stacks"] = "lua/memprof/trace_stacks.lua",
    ["memprof.sampling"] = "lua/memprof/sampling.lua",
    ["memprof.report.text"] = "lua/memprof/report/text.lua",
    ["memprof.report.layout"] = "lua/memprof/report/layout.lua",
    ["memprof.report.views"] = "lua/memprof/report/views.lua",
    ["memprof.report.rows"] = "lua/memprof/report/rows.lua",
    ["memprof.report.json"] = "lua/memprof/report/json.lua",
    ["memprof.report.folded"] = "lua/memprof/report/folded.lua",
    ["memprof.report.pprof"] = "lua/memprof/report/pprof.lua",
    ["memprof.report.chrome"] = "lua/memprof/report/chrome.lua",
    ["memprof.report.html"] = "lua/memprof/report/html.lua",
    ["memprof.report.flame"] = "lua/memprof/report/flame.lua",
    ["memprof.report.diff"] = "lua/memprof/report/diff.lua",
    ["memprof.protobuf"] = "lua/memprof/protobuf.lua",
    ["memprof.gzip"] = "lua/memprof/gzip.lua",
    ["memprof.diff"] = "lua/memprof/diff.lua",
    ["memprof.progress"] = "lua/memprof/progress.lua",
    ["memprof.run"] = "lua/memprof/run.lua",
    ["memprof.launch"] = "lua/memprof/launch.lua",
    ["memprof.utf8"] = "lua/memprof/utf8.lua",
    ["memprof.json_text"] = "lua/memprof/json_text.lua",
    ["memprof.columns"] = "lua/memprof/columns.lua",
    ["memprof.version"] = "lua/memprof/version.lua",
  },
  install = {
    -- The HTML page's style and script, beside report/html.lua (LuaRocks
    -- puts a file of key a.b.c into the directory a/b under its own name).
    lua = {
      ["memprof.report.html.page_css"] = "lua/memprof/report/html/page.css",
      ["memprof.report.html.page_js"] = "lua/memprof/report/html/page.js",
    },
    bin = {
      ["memprof-report"] = "bin/memprof-report",
      ["memprof"] = "bin/memprof",
    },
  },
}
