-- Specs for memprof.version: the one place of memprof's version, and the
-- places that must agree with it (the rockspec, CHANGELOG.md).  What
-- --version prints is specified in spec/reporter/cli/report_spec.lua and spec/hosts/run_spec.lua.

local version = require('memprof.version')
local C = require('helpers.command')

local rockspec = C.rockspec

-- The versions of the level-2 headings of CHANGELOG.md, in order.
local function changelog_sections()
  local sections = {}
  for name in C.read_file('CHANGELOG.md'):gmatch('\n## %[([^%]]+)%]') do
    sections[#sections + 1] = name
  end
  return sections
end

describe('the version', function()
  it('is MAJOR.MINOR.PATCH, with -dev while it is in the making', function()
    assert.truthy(version.VERSION:find('^%d+%.%d+%.%d+$') or
      version.VERSION:find('^%d+%.%d+%.%d+%-dev$'), version.VERSION)
  end)

  it('agrees with the rockspec and CHANGELOG.md', function()
    local release = version.VERSION:match('^(.-)%-dev$')
    local sections = changelog_sections()
    assert.are.equal('Unreleased', sections[1])
    if release then
      -- In the making: the rockspec builds the repository's head, and
      -- CHANGELOG.md has no section for the release yet.
      assert.are.equal('scm-1', rockspec().version)
      for _, name in ipairs(sections) do
        assert.are_not.equal(release, name)
      end
    else
      release = version.VERSION
      assert.truthy(rockspec().version:find('^' .. release:gsub('%.', '%%.')
        .. '%-%d+$'), rockspec().version)
      assert.are.equal(release, sections[2])
    end
  end)
end)
