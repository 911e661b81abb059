--- gptoss.chat_commands: the slash commands of the terminal chat (examples/chat.lua,
-- docs/chat.md#commands) over a gptoss.chat session. They edit session.messages between
-- asks, which the session renders again at the next ask, feeding its slot from the first
-- id that differs.
local harmony = require "gptoss.harmony"
local files = require "gptoss.files"
local gptoss = require "gptoss"
local util = require "gptoss.util"
local json = require "dkjson"

local chat_commands = {}

chat_commands.HELP = table.concat({
  "/reset          start the conversation over (the instructions stay)",
  "/save FILE      write the conversation to FILE as JSON: {\"messages\": [...]}",
  "/load FILE      go on with the conversation FILE holds (as /save writes it)",
  "/system TEXT    the instructions (the developer message) from now on; /system alone: none",
  "/help           this list",
  "/quit           leave (as Ctrl-D or Ctrl-C at an empty prompt do)",
  "A line ending in \\ goes on on the next line; //TEXT asks /TEXT.",
}, "\n")

-- The index of the first message after the system and developer messages.
local function first_turn(messages)
  local i = 1
  while messages[i] and (messages[i].role == "system" or messages[i].role == "developer") do i = i + 1 end
  return i
end

local function reset(session)
  local messages = session.messages
  for i = #messages, first_turn(messages), -1 do messages[i] = nil end
  session:fresh_draws()
  return "[the conversation starts over]"
end

local function save(session, path)
  if path == "" then error("/save: give a file: /save FILE", 0) end
  -- io.open would wait on a named pipe for a reader
  local regular, why = gptoss.regular_file(path)
  if regular == false then error("/save: " .. why, 0) end
  local text = json.encode({ messages = session.messages }, { indent = true })
  files.write("/save", path, text .. "\n")
  return ("[%d messages saved to %s]"):format(#session.messages, path)
end

-- The messages a /save file holds, checked as harmony renders them; raises naming the file.
local function saved_messages(session, path)
  local text = files.read("/load", path)
  local value, _, err = json.decode(text)
  if err then error(("/load: %s is not JSON: %s"):format(path, err), 0) end
  local messages = type(value) == "table" and value.messages
  if type(messages) ~= "table" or #messages == 0 then
    error(("/load: %s holds no {\"messages\": [...]} list of messages"):format(path), 0)
  end
  local ok, why = pcall(harmony.render_ids, messages, session.tokenizer)
  if not ok then error(("/load: %s: %s"):format(path, util.bare(why):gsub("^harmony%.render_ids: ", "")), 0) end
  return messages
end

local function load(session, path)
  if path == "" then error("/load: give a file: /load FILE", 0) end
  local messages, into = saved_messages(session, path), session.messages
  for i = #into, 1, -1 do into[i] = nil end
  table.move(messages, 1, #messages, 1, into)
  return ("[%d messages loaded from %s]"):format(#messages, path)
end

-- The developer message's instructions become text ("": none), its tools kept; one is
-- added after the system messages where there is none.
local function instruct(session, text)
  local messages = session.messages
  local developer
  for i = 1, first_turn(messages) - 1 do
    if messages[i].role == "developer" then developer = messages[i] end
  end
  if not developer then
    if text == "" then return "[no instructions]" end
    developer = harmony.developer {}
    local at = 1
    while messages[at] and messages[at].role == "system" do at = at + 1 end
    table.insert(messages, at, developer)
  end
  local content = {}
  for k, v in pairs(developer.content) do content[k] = v end
  content.instructions = text ~= "" and text or nil
  developer.content = content
  return text ~= "" and "[instructions set]" or "[no instructions]"
end

local COMMANDS = {
  reset = reset, save = save, load = load, system = instruct,
  help = function() return chat_commands.HELP end,
}

--- The question text asks, or nil when it is a command ("/name ..."); "//..." asks "/...".
function chat_commands.question(text)
  if text:sub(1, 2) == "//" then return text:sub(2) end
  if text:sub(1, 1) == "/" then return nil end
  return text
end

--- Runs the command text ("/name argument", the argument trimmed) on session: returns the
-- line to show, and true for /quit. Raises "/name: ..." for a command that fails, and names
-- the commands for one that is not there.
function chat_commands.run(session, text)
  local name, argument = text:match("^/(%S*)%s*(.-)%s*$")
  if name == "quit" then return nil, true end
  local command = COMMANDS[name]
  if not command then
    error(("unknown command /%s (/help lists them)"):format(name), 0)
  end
  return command(session, argument)
end

return chat_commands
