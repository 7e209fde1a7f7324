-- memprof.analysis.node_index: the node number of each object address of a
-- heap snapshot's graph, for analysis/dominators.lua: the index of
-- memprof.analysis.address_map (one hash table for every address), under
-- the name dominators.lua requires.
--
--   local index = node_index.new()
--   index:put(addrs, v)      -- v's address is addrs[v] (an FFI array)
--   index:get(addrs, addr)   -- the node of addr, or nil

return { new = require('memprof.analysis.address_map').index }
