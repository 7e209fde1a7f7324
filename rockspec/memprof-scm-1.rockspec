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
        "src/attach_entry.c", "src/attach_inject.c",
        "src/binding.c", "src/builtin_memprof.c", "src/cnames.c",
        "src/elf_syms.c", "src/fault.c",
        "src/heap_layout.c", "src/heap_objects.c", "src/heap_remote.c",
        "src/heap_remote_exe.c", "src/heap_remote_host.c", "src/heap_traces.c",
        "src/heapwalk.c",
        "src/hook.c",
        "src/lifecycle.c", "src/live.c", "src/places.c", "src/pprof.c",
        "src/remote_proc.c", "src/remote_stop.c",
        "src/safe_read.c", "src/sample.c", "src/snapshot.c",
        "src/source_names.c", "src/stacks.c",
        "src/symbols.c", "src/trace_lines.c", "src/trace_lines_a64.c",
        "src/trace_lines_walk.c", "src/unwind.c",
        "src/vm_discover.c", "src/vm_dump.c",
        "src/vm_layout.c", "src/vm_learn.c", "src/vm_trace_calib.c",
        "src/vm_trace_frames.c", "src/vm_trace_search.c",
        "src/vm_vmdef.c", "src/writer.c",
      },
      libraries = { "dl", "pthread", "m" },
    },
    ["memprof.read.stream"] = "lua/memprof/read/stream.lua",
    ["memprof.read.stream_records"] = "lua/memprof/read/stream_records.lua",
    ["memprof.read.stream_format"] = "lua/memprof/read/stream_format.lua",
    ["memprof.read.buffer"] = "lua/memprof/read/buffer.lua",
    ["memprof.read.names"] = "lua/memprof/read/names.lua",
    ["memprof.read.errors"] = "lua/memprof/read/errors.lua",
    ["memprof.analysis.sites"] = "lua/memprof/analysis/sites.lua",
    ["memprof.analysis.heap"] = "lua/memprof/analysis/heap.lua",
    ["memprof.analysis.blocks"] = "lua/memprof/analysis/blocks.lua",
    ["memprof.analysis.address_map"] = "lua/memprof/analysis/address_map.lua",
    ["memprof.analysis.path_patterns"] = "lua/memprof/analysis/path_patterns.lua",
    ["memprof.analysis.analyze"] = "lua/memprof/analysis/analyze.lua",
    ["memprof.cli.report"] = "lua/memprof/cli/report.lua",
    ["memprof.cli.options"] = "lua/memprof/cli/options.lua",
    ["memprof.analysis.focus"] = "lua/memprof/analysis/focus.lua",
    ["memprof.read.sources"] = "lua/memprof/read/sources.lua",
    ["memprof.report.model.peak"] = "lua/memprof/report/model/peak.lua",
    ["memprof.report.model.leaks"] = "lua/memprof/report/model/leaks.lua",
    ["memprof.report.model.temporary"] = "lua/memprof/report/model/temporary.lua",
    ["memprof.report.model.sections"] = "lua/memprof/report/model/sections.lua",
    ["memprof.report.model.cumulative"] =
      "lua/memprof/report/model/cumulative.lua",
    ["memprof.report.model.timeline"] = "lua/memprof/report/model/timeline.lua",
    ["memprof.report.model.diff"] = "lua/memprof/report/model/diff.lua",
    ["memprof.report.model.grouping"] = "lua/memprof/report/model/grouping.lua",
    ["memprof.report.model.totals"] = "lua/memprof/report/model/totals.lua",
    ["memprof.report.paths"] = "lua/memprof/report/paths.lua",
    ["memprof.analysis.groups"] = "lua/memprof/analysis/groups.lua",
    ["memprof.record"] = "lua/memprof/record.lua",
    ["memprof.words"] = "lua/memprof/words.lua",
    ["memprof.analysis.leaks"] = "lua/memprof/analysis/leaks.lua",
    ["memprof.analysis.live"] = "lua/memprof/analysis/live.lua",
    ["memprof.read.follow"] = "lua/memprof/read/follow.lua",
    ["memprof.report.live"] = "lua/memprof/report/live.lua",
    ["memprof.cli.live"] = "lua/memprof/cli/live.lua",
    ["memprof.analysis.peak"] = "lua/memprof/analysis/peak.lua",
    ["memprof.analysis.temporary"] = "lua/memprof/analysis/temporary.lua",
    ["memprof.analysis.timeline"] = "lua/memprof/analysis/timeline.lua",
    ["memprof.analysis.cumulative"] = "lua/memprof/analysis/cumulative.lua",
    ["memprof.read.trace_stacks"] = "lua/memprof/read/trace_stacks.lua",
    ["memprof.analysis.sampling"] = "lua/memprof/analysis/sampling.lua",
    ["memprof.report.text"] = "lua/memprof/report/text.lua",
    ["memprof.report.layout"] = "lua/memprof/report/layout.lua",
    ["memprof.report.views"] = "lua/memprof/report/views.lua",
    ["memprof.report.json"] = "lua/memprof/report/json.lua",
    ["memprof.report.folded"] = "lua/memprof/report/folded.lua",
    ["memprof.report.pprof"] = "lua/memprof/report/pprof.lua",
    ["memprof.report.chrome"] = "lua/memprof/report/chrome.lua",
    ["memprof.report.html"] = "lua/memprof/report/html.lua",
    ["memprof.report.html.data"] = "lua/memprof/report/html/data.lua",
    ["memprof.report.html.text"] = "lua/memprof/report/html/text.lua",
    ["memprof.report.html.tables"] = "lua/memprof/report/html/tables.lua",
    ["memprof.report.html.chart"] = "lua/memprof/report/html/chart.lua",
    ["memprof.report.flame"] = "lua/memprof/report/flame.lua",
    ["memprof.report.diff"] = "lua/memprof/report/diff.lua",
    ["memprof.encode.protobuf"] = "lua/memprof/encode/protobuf.lua",
    ["memprof.encode.gzip"] = "lua/memprof/encode/gzip.lua",
    ["memprof.analysis.diff"] = "lua/memprof/analysis/diff.lua",
    ["memprof.read.heap_snapshot"] = "lua/memprof/read/heap_snapshot.lua",
    ["memprof.analysis.dominators"] = "lua/memprof/analysis/dominators.lua",
    ["memprof.analysis.heap_graph"] = "lua/memprof/analysis/heap_graph.lua",
    ["memprof.analysis.dominator_tree"] =
      "lua/memprof/analysis/dominator_tree.lua",
    ["memprof.analysis.heap_paths"] = "lua/memprof/analysis/heap_paths.lua",
    ["memprof.analysis.heap_diff"] = "lua/memprof/analysis/heap_diff.lua",
    ["memprof.analysis.heap_join"] = "lua/memprof/analysis/heap_join.lua",
    ["memprof.report.model.holders"] = "lua/memprof/report/model/holders.lua",
    ["memprof.report.model.heap_growth"] =
      "lua/memprof/report/model/heap_growth.lua",
    ["memprof.report.heap_words"] = "lua/memprof/report/heap_words.lua",
    ["memprof.report.holders_text"] = "lua/memprof/report/holders_text.lua",
    ["memprof.report.holders_json"] = "lua/memprof/report/holders_json.lua",
    ["memprof.report.holders_html"] = "lua/memprof/report/holders_html.lua",
    ["memprof.report.heap_growth_text"] =
      "lua/memprof/report/heap_growth_text.lua",
    ["memprof.report.heap_growth_json"] =
      "lua/memprof/report/heap_growth_json.lua",
    ["memprof.report.heap_growth_html"] = "lua/memprof/report/heap_growth_html.lua",
    ["memprof.report.html.heap_page"] = "lua/memprof/report/html/heap_page.lua",
    ["memprof.report.heapsnapshot"] = "lua/memprof/report/heapsnapshot.lua",
    ["memprof.report.html.holders_section"] =
      "lua/memprof/report/html/holders_section.lua",
    ["memprof.cli.heap_report"] = "lua/memprof/cli/heap_report.lua",
    ["memprof.cli.report_options"] = "lua/memprof/cli/report_options.lua",
    ["memprof.cli.progress"] = "lua/memprof/cli/progress.lua",
    ["memprof.cli.run"] = "lua/memprof/cli/run.lua",
    ["memprof.cli.heap_pid"] = "lua/memprof/cli/heap_pid.lua",
    ["memprof.cli.attach"] = "lua/memprof/cli/attach.lua",
    ["memprof.cli.launch"] = "lua/memprof/cli/launch.lua",
    ["memprof.encode.utf8"] = "lua/memprof/encode/utf8.lua",
    ["memprof.encode.json_text"] = "lua/memprof/encode/json_text.lua",
    ["memprof.analysis.rows"] = "lua/memprof/analysis/rows.lua",
    ["memprof.version"] = "lua/memprof/version.lua",
  },
  install = {
    -- The HTML page's template, style and script, beside report/html.lua
    -- (LuaRocks puts a file of key a.b.c into the directory a/b under its
    -- own name).
    lua = {
      ["memprof.report.html.page_html"] = "lua/memprof/report/html/page.html",
      ["memprof.report.html.page_css"] = "lua/memprof/report/html/page.css",
      ["memprof.report.html.page_js"] = "lua/memprof/report/html/page.js",
      ["memprof.report.html.holders_css"] =
        "lua/memprof/report/html/holders.css",
      ["memprof.report.html.heap_page_html"] =
        "lua/memprof/report/html/heap_page.html",
      ["memprof.report.html.page_head_html"] =
        "lua/memprof/report/html/page_head.html",
    },
    bin = {
      ["memprof-report"] = "bin/memprof-report",
      ["memprof"] = "bin/memprof",
    },
  },
}
