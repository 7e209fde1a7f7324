-- memprof.analysis.sampling: the estimates of a sampled profile.
--
-- A sampled profile (memprof.start's sample_bytes, docs/sampling.md)
-- records an allocation of s bytes with probability 1 - exp(-s / N),
-- where N is the mean bytes between samples (stream.sample_bytes).  Each
-- recorded block therefore stands for w(s) = 1 / (1 - exp(-s / N))
-- blocks of its size, and the sum of w over the recorded blocks is an
-- unbiased estimate of the number of blocks (that of s * w, of the
-- bytes).
--
-- The passes count in whole blocks, so each block gets a whole weight:
-- floor(w) or floor(w) + 1, the latter with probability w - floor(w),
-- drawn from the block's address (a hash of it), so that the event that
-- releases the block gives it the same weight as the one that produced
-- it.  The expected weight is w: the estimates stay unbiased.
--
--   sampling.weight(size, mean)        -> w (a float, at least 1)
--   sampling.block_weight(addr, size, mean) -> the block's whole weight
--   sampling.scaler(stream)  -> nil for a profile that is not sampled, or
--                               scale(oaddr, osize, naddr, nsize) ->
--                               osize, nsize, oweight, nweight: the sizes
--                               as estimates (size * weight) and the
--                               weights of the old and new blocks
--   sampling.note(mean)      -> the line the reports print

local M = {}

local exp, floor = math.exp, math.floor

-- 1 - exp(-x), exact for small x too, where 1 - exp(-x) loses digits.
local function one_minus_exp(x)
  if x < 1e-5 then
    return x - x * x / 2 + x * x * x / 6
  end
  return 1 - exp(-x)
end

function M.weight(size, mean)
  if size <= 0 then
    return 1
  end
  return 1 / one_minus_exp(size / mean)
end

-- A number in [0, 1) spread evenly over block addresses (Fibonacci
-- hashing of the address modulo a prime, exact in doubles).
local PRIME = 1000003
local GOLDEN = 0.6180339887498949

local function address_fraction(addr)
  return (addr % PRIME * GOLDEN) % 1
end

function M.block_weight(addr, size, mean)
  local w = M.weight(size, mean)
  local whole = floor(w)
  if address_fraction(addr) < w - whole then
    return whole + 1
  end
  return whole
end

function M.scaler(stream)
  local mean = stream.sample_bytes
  if not mean then
    return nil
  end
  local block_weight = M.block_weight
  return function(oaddr, osize, naddr, nsize)
    local oweight, nweight = 1, 1
    if nsize ~= 0 then
      nweight = block_weight(naddr, nsize, mean)
      nsize = nsize * nweight
    end
    if osize ~= 0 then
      oweight = block_weight(oaddr, osize, mean)
      osize = osize * oweight
    end
    return osize, nsize, oweight, nweight
  end
end

function M.note(mean)
  return ('sampled: one sample per %d bytes on average; figures are ' ..
    'estimates'):format(mean)
end

return M
