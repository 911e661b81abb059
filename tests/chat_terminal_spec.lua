-- The terminal chat, `gptoss chat` (examples/chat.lua over gptoss.chat, gptoss.line_input and
-- gptoss.chat_commands), as a child process on a synthetic model on CPU: lines from a pipe
-- with the context filling, the slash commands and their errors, Ctrl-C (SIGINT sent to the
-- child) in a reply and at the prompt, and, in a terminal made by tmux, line editing
-- (libedit), history and Ctrl-C there. First the host functions Ctrl-C goes through (gptoss.catch_interrupts,
-- gptoss.interrupted, gptoss.wait_readable).
local gptoss = require "gptoss"
local json = require "dkjson"
local H = require "helpers"

local q = H.shell_quote

-- `gptoss chat 7m --device cpu --seed 1` and args.
local function chat_args(args)
  return table.move(args, 1, #args, 7, { "chat", "7m", "--device", "cpu", "--seed", "1" })
end

-- Runs gptoss chat with args on input in a fresh directory (files: name -> text put there
-- first): exit code, stdout, stderr, the directory.
local function chat(args, input, files)
  local dir = H.tmpdir()
  for name, text in pairs(files or {}) do H.write_file(dir .. "/" .. name, text) end
  local code, out, err = H.gptoss(pending, dir, chat_args(args), nil, input)
  return code, out, err, dir
end

local function count(s, plain)
  local n, at = 0, 1
  while true do
    local _, e = s:find(plain, at, true)
    if not e then return n end
    n, at = n + 1, e + 1
  end
end

local function saved(dir, name)
  return assert(json.decode(H.read_file(dir .. "/" .. name))).messages
end

describe("gptoss.catch_interrupts, gptoss.interrupted and gptoss.wait_readable", function()
  it("turn SIGINT into a flag while caught, end a wait for input, and give SIGINT its action back", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/file", "x")
    H.write_file(dir .. "/child.lua", [[
local gptoss = require "gptoss"
-- SIGINT in 0.3 s, from the background: system() ignores SIGINT until its command ends.
-- $PPID: this process.
local function sigint_soon() os.execute("(sleep 0.3; kill -INT $PPID) &") end
local out = {}
local function note(...) for _, v in ipairs { ... } do out[#out + 1] = tostring(v) end end
note(gptoss.catch_interrupts(true), gptoss.catch_interrupts(true), gptoss.interrupted())
note(gptoss.wait_readable(3), gptoss.wait_readable(0, 0.05)) -- a file: at once; a pipe: the time passes
sigint_soon()
note(gptoss.wait_readable(0), gptoss.interrupted(), gptoss.interrupted()) -- a pipe no one writes to
sigint_soon()
local t = gptoss.clock()
while gptoss.clock() < t + 0.6 do end
note(gptoss.wait_readable(0), gptoss.interrupted()) -- a SIGINT not yet read: no wait
for _, bad in ipairs { function() gptoss.wait_readable(-1) end, function() gptoss.wait_readable(99) end,
  function() gptoss.wait_readable(0, -1) end, function() gptoss.catch_interrupts("yes") end } do
  note((select(2, pcall(bad)):gsub("^child%.lua:%d+: ", "")))
end
note(gptoss.catch_interrupts(false), gptoss.catch_interrupts(false))
io.write(table.concat(out, "|"), "\n")
io.flush()
sigint_soon() -- lua5.4's action again: an "interrupted!" error in this loop
t = gptoss.clock()
while gptoss.clock() < t + 10 do end
print("not reached")
]])
    local line = H.gptoss_line(pending, { "child.lua" })
    local p = assert(io.popen(("cd %s && mkfifo fifo && timeout 20 %s 0<>fifo 3<file 2>&1"):format(q(dir), line)))
    local out = p:read("a")
    p:close()
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.are.equal("false|true|false|true|false|false|true|false|false|true|wait_readable: fd must be in 0..1023 "
      .. "(got -1)|wait_readable: fd 99 is not open|wait_readable: seconds must be in 0..1e9 (got -1.0)"
      .. "|bad argument #1 to 'catch_interrupts' (boolean expected, got string)|true|false", lines[1])
    assert.truthy(out:find("interrupted!", 1, true), out)
    assert.falsy(out:find("not reached", 1, true), out)
  end)
end)

describe("gptoss.core's line editor", function()
  it("is not opened where input is not a terminal, and refuses lines and history until open", function()
    local dir = H.tmpdir()
    H.write_file(dir .. "/child.lua", [[
local core = require "gptoss.core"
local out = { select(2, core.edit_open()) }
for _, bad in ipairs { function() core.edit_line("> ") end, function() core.edit_history("add", "x") end,
  function() core.edit_history("forget", "x") end } do
  out[#out + 1] = (select(2, pcall(bad)):gsub("^child%.lua:%d+: ", ""))
end
core.edit_close() -- nothing to close: no error
io.write(table.concat(out, "|"))
]])
    local code, out, err = H.gptoss(pending, dir, { "child.lua" }, nil, "")
    assert.are.equal(0, code, err)
    local why = out:match("^[^|]*") -- a build without libedit's header says so instead
    assert.truthy(why == "standard input and output are not both terminals"
      or why == "gptoss was built without line editing (Debian: libedit-dev)", why)
    assert.are.equal(why .. "|edit_line: the line editor is not open (edit_open)|edit_history: the line editor is "
      .. "not open (edit_open)|bad argument #1 to 'edit_history' (invalid option 'forget')", out)
  end)
end)

describe("gptoss chat from a pipe", function()
  it("answers each line of stdin on a synthetic model and prints tok/s", function()
    local code, out, err = chat({ "--max-tokens", "4", "--ctx", "256", "--demo-tools", "--temperature", "0",
      "--system", "Be brief." }, "Hello\n\nWhat is 2 + 3?\n")
    assert.are.equal(0, code, err)
    local _, lines = err:gsub("4 tokens, [%d.]+ s, [%d.]+ tok/s %(length%)\n", "")
    assert.are.equal(2, lines, err) -- the empty line is skipped
    assert.truthy(out:find("%S"), "the replies are on stdout")
  end)

  it("samples with --presence-penalty and --frequency-penalty: negative ones repeat a greedy reply's first piece",
    function()
      local args = { "--max-tokens", "6", "--ctx", "256", "--temperature", "0" }
      local code, plain, err = chat(args, "Hello\n")
      assert.are.equal(0, code, err)
      table.move({ "--presence-penalty=-2", "--frequency-penalty=-2" }, 1, 2, #args + 1, args)
      local penalized
      code, penalized, err = chat(args, "Hello\n")
      assert.are.equal(0, code, err)
      assert.are_not.equal(plain, penalized)
      assert.truthy(penalized:find("^(.+)%1%1%1%1%1\n$"), penalized)
      code, _, err = chat({ "--frequency-penalty", "2.5" }, "")
      assert.are.equal(1, code)
      assert.truthy(err:find("--frequency-penalty: '2.5' is not a number in [-2, 2]", 1, true), err)
    end)

  it("drops the oldest turns when the context fills, and ends a reply at its end, turn after turn", function()
    -- the rendering is 57 ids: 8 more fill the context's 64 before 10 are decoded
    local code, out, err = chat({ "--ctx", "64", "--max-tokens", "10" }, ("Hi\n"):rep(5))
    assert.are.equal(0, code, err)
    assert.are.equal(5, count(err, " tok/s ("), err)
    assert.are.equal(4, count(err, "[the context is full: the oldest turn is dropped, the conversation is now "), err)
    assert.truthy(count(err, "[the reply reached the end of the context and stops there]") >= 1, err)
    -- a random model writes no harmony: its text streams all the same
    assert.truthy(err:find("[the model's output is not harmony: shown as it comes]", 1, true), err)
    assert.truthy(out:find("%S"), err)
  end)

  it("saves, resets, loads and instructs with the slash commands", function()
    local input = table.concat({ "Hello", "/save a.json", "/reset", "/save b.json", "/load a.json", "/save c.json",
      "/system Be brief.", "/save d.json", "Again", "/save e.json", "one\\", "two", "//slash", "/save f.json",
      "/help", "/quit", "never asked" }, "\n") .. "\n"
    local code, _, err, dir = chat({ "--ctx", "512", "--max-tokens", "4" }, input)
    assert.are.equal(0, code, err)
    local a = saved(dir, "a.json")
    assert.are.same({ "system", "user", "assistant" }, { a[1].role, a[2].role, a[3].role, a[4] })
    assert.are.equal("Hello", a[2].content)
    assert.are.equal(1, #saved(dir, "b.json"))
    assert.are.same(a, saved(dir, "c.json")) -- the round trip
    local d = saved(dir, "d.json")
    assert.are.same({ 4, "developer", "Be brief." }, { #d, d[2].role, d[2].content.instructions })
    local e = saved(dir, "e.json")
    assert.are.same({ 6, "Again" }, { #e, e[5].content })
    local f = saved(dir, "f.json")
    assert.are.same({ "one\ntwo", "/slash" }, { f[7].content, f[9].content })
    assert.are.equal(4, count(err, " tok/s ("), err) -- Hello, Again, one two, /slash
    for _, said in ipairs { "[3 messages saved to a.json]", "[the conversation starts over]",
      "[3 messages loaded from a.json]", "[instructions set]", "/load FILE" } do
      assert.truthy(err:find(said, 1, true), said)
    end
  end)

  it("ends with status 1 and the message at the first input that fails", function()
    local files = { ["bad.json"] = "{", ["wrong.json"] = '{"messages": [{"role": "wizard", "content": "x"}]}',
      ["empty.json"] = '{"messages": {}}' }
    for _, case in ipairs {
      { "/bogus", "gptoss chat: unknown command /bogus (/help lists them)" },
      { "/save", "gptoss chat: /save: give a file: /save FILE" },
      { "/save .", "gptoss chat: /save: '.' is a directory, not a regular file" },
      { "/load", "gptoss chat: /load: give a file: /load FILE" },
      { "/load nothere.json", "gptoss chat: /load: cannot open 'nothere.json': " },
      { "/load bad.json", "gptoss chat: /load: bad.json is not JSON: " },
      { "/load empty.json", "gptoss chat: /load: empty.json holds no {\"messages\": [...]} list of messages" },
      { "/load wrong.json", "gptoss chat: /load: wrong.json: message 1: role must be one of" },
      { ("word "):rep(60), "gptoss chat: your message is 117 tokens; --ctx is 64" },
    } do
      local code, _, err = chat({ "--ctx", "64", "--max-tokens", "2" }, case[1] .. "\nHello\n", files)
      assert.are.equal(1, code, case[1])
      assert.truthy(err:find(case[2], 1, true), err)
      assert.are.equal(0, count(err, " tok/s ("), err) -- nothing after it is asked
    end
  end)
end)

-- Runs gptoss chat with args in the background, its input the file `input` or, when nil, a
-- named pipe no one writes to (a prompt that waits); sends it SIGINT once the shell test
-- `ready` holds (20 s at most) and waits for it: exit code, stdout, stderr, the directory.
local function interrupted(args, input, ready)
  local dir = H.tmpdir()
  local stdin = "0<>in"
  if input then
    H.write_file(dir .. "/in", input)
    stdin = "<in"
  else
    H.fifo(dir, "in")
  end
  H.write_file(dir .. "/run.sh", table.concat({
    "cd " .. q(dir),
    H.gptoss_line(pending, chat_args(args)) .. " " .. stdin .. " >out 2>err & pid=$!",
    "i=0; until " .. ready .. " || [ $i -ge 400 ]; do sleep 0.05; i=$((i + 1)); done",
    "kill -INT $pid; wait $pid; echo $? >code",
  }, "\n"))
  assert(os.execute("sh " .. q(dir .. "/run.sh")))
  return tonumber(H.read_file(dir .. "/code")), H.read_file(dir .. "/out"), H.read_file(dir .. "/err"), dir
end

describe("Ctrl-C in gptoss chat", function()
  it("stops a reply, which stays in the conversation, and the chat goes on", function()
    -- without --max-tokens a reply runs to the end of the context: some 2000 ids, seconds
    local code, out, err, dir = interrupted({ "--ctx", "2048" }, "Tell me a story\n/save conv.json\n", "[ -s out ]")
    assert.are.equal(0, code, err)
    assert.truthy(err:find("[stopped by Ctrl-C: the reply so far stays in the conversation]", 1, true), err)
    local tokens = tonumber(err:match("(%d+) tokens, [%d.]+ s, [%d.]+ tok/s %(cancelled%)"))
    assert.truthy(tokens and tokens < 1500, err)
    local messages = saved(dir, "conv.json") -- /save ran after the stopped reply
    assert.are.equal(3, #messages)
    assert.are.equal(out, messages[3].content .. "\n") -- what was shown is what is kept
  end)

  it("at a prompt where nothing was typed, ends the chat with status 0", function()
    -- the replica's line is on stderr and the process sleeps: it waits at the prompt
    local code, out, err = interrupted({ "--ctx", "256" }, nil,
      "{ grep -q positions err && [ \"$(cut -d ' ' -f 3 /proc/$pid/stat)\" = S ]; }")
    assert.are.same({ 0, "" }, { code, out })
    assert.falsy(err:find("interrupted", 1, true), err)
  end)
end)

describe("gptoss chat on a terminal (tmux)", function()
  it("edits and recalls lines, keeps them in ~/.gptoss_history, joins a paste's, reads Ctrl-C at the prompt, "
    .. "leaves on Ctrl-D with the shell's next line a line of its own", function()
    if not os.execute("command -v tmux >/dev/null 2>&1") then pending("needs tmux") end
    local dir = H.tmpdir()
    local tmux = "tmux -L " .. q("gptoss-spec-" .. dir:match("[^/]*$"))
    local line = ("cd %s && HOME=%s %s; echo EXIT=$?; sleep 30"):format(q(dir), q(dir),
      H.gptoss_line(pending, chat_args { "--ctx", "256", "--max-tokens", "4" }))
    assert(os.execute(("%s new-session -d -x 100 -y 40 %s"):format(tmux, q(line))))
    local function screen()
      local p = assert(io.popen(tmux .. " capture-pane -p"))
      local s = p:read("a")
      p:close()
      return s
    end
    -- waits (20 s at most) until what the screen shows makes done(screen) true
    local function until_shown(what, done)
      local deadline = gptoss.clock() + 20
      while not done(screen()) do
        if gptoss.clock() > deadline then
          local shown = screen()
          os.execute(tmux .. " kill-server")
          error(("the screen never showed %s:\n%s"):format(what, shown))
        end
        os.execute("sleep 0.05")
      end
    end
    -- lines that start with the prompt (tmux leaves out the space after an empty one)
    local function prompts(n) return function(s) return count("\n" .. s, "\n>") >= n end end
    local function keys(...)
      local words = {}
      for i, k in ipairs { ... } do words[i] = q(k) end
      assert(os.execute(tmux .. " send-keys " .. table.concat(words, " ")))
    end
    until_shown("the first prompt", prompts(1))
    local plain = screen():match("%[no line editing: ([^%]]*)%]")
    if plain then
      os.execute(tmux .. " kill-server")
      pending("no line editing here: " .. plain)
    end
    keys("Hello", "Enter")
    until_shown("a second prompt", prompts(2))
    keys("Up")
    until_shown("Hello recalled", function(s) return count(s, "> Hello") == 2 end)
    keys("Enter")
    until_shown("a third prompt", prompts(3))
    keys("typo")
    until_shown("typo", function(s) return s:find("> typo", 1, true) end)
    keys("C-c")
    until_shown("a fourth prompt", prompts(4))
    keys("/nope", "Enter")
    until_shown("the error and a prompt", prompts(5))
    keys("pasted one", "Enter", "pasted two", "Enter") -- at once, as a paste comes: one question
    until_shown("a reply and a prompt", function(s) return count(s, " tok/s (") == 3 and prompts(6)(s) end)
    keys("/save pasted.json", "Enter")
    until_shown("the save", function(s) return s:find("saved to pasted.json", 1, true) end)
    keys("C-d")
    until_shown("the chat's end", function(s) return s:find("EXIT=", 1, true) end)
    local shown = screen()
    os.execute(tmux .. " kill-server")
    assert.truthy(shown:find("\nEXIT=0", 1, true), shown)
    assert.are.equal(3, count(shown, " tok/s ("), shown) -- Hello twice, the paste; not typo
    assert.are.equal("pasted one\npasted two", saved(dir, "pasted.json")[6].content)
    assert.truthy(shown:find("> typo^C", 1, true), shown)
    assert.truthy(shown:find("error: unknown command /nope (/help lists them)", 1, true), shown)
    assert.are.equal("_HiStOrY_V2_\nHello\n/nope\npasted\\040one\npasted\\040two\n/save\\040pasted.json\n",
      H.read_file(dir .. "/.gptoss_history")) -- libedit's format: spaces as \040
  end)
end)
