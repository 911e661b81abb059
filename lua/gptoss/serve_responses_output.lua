--- gptoss.serve_responses_output (internal, gptoss.serve's): a response's output items built
-- from its choice's deltas (serve_choice's), in the order the model wrote them: its analysis
-- a reasoning item, its text a message item, a call a function_call item. With emit, each
-- step is also told as the Responses API's stream events (output_item.added, then
-- content_part.added and the deltas, then the done events as the item closes); emit(type,
-- fields) numbers and writes them. The items are the API's JSON objects, and can be given back
-- as input items (serve_responses_input reads them).
--
--   local out = serve_responses_output.new(new_id, emit)   new_id(prefix): a fresh item id
--   out:add(delta) ... out:close(status)                   status: "completed" or "incomplete"
--   out.items
local serve_responses_output = {}

local Output = {}
Output.__index = Output

--- The output of a response (see the header); emit nil: no events.
function serve_responses_output.new(new_id, emit)
  return setmetatable({ items = {}, new_id = new_id, emit = emit or function() end }, Output)
end

-- What each kind of item holds its text in, and the events that tell it.
local KINDS = {
  reasoning = { prefix = "rs", part = "reasoning_text", delta = "response.reasoning_text.delta",
    done = "response.reasoning_text.done" },
  message = { prefix = "msg", part = "output_text", delta = "response.output_text.delta",
    done = "response.output_text.done" },
  function_call = { prefix = "fc", delta = "response.function_call_arguments.delta",
    done = "response.function_call_arguments.done" },
}

-- A content part of kind's with text, as the API shapes it.
local function part(kind, text)
  if kind.part == "output_text" then return { type = "output_text", text = text, annotations = {}, logprobs = {} } end
  return { type = kind.part, text = text }
end

-- Opens an item of kind name (the one open before closed), told by output_item.added and,
-- for text, content_part.added with its part still empty.
function Output:open(name, fields)
  self:close("completed")
  local kind = KINDS[name]
  local item = { id = self.new_id(kind.prefix), type = name, status = "in_progress" }
  for k, v in pairs(fields or {}) do item[k] = v end
  if name == "message" then item.role = "assistant" end
  if name == "reasoning" then item.summary = {} end
  if kind.part then item.content = {} end
  self.items[#self.items + 1] = item
  self.current = { item = item, kind = kind, index = #self.items - 1, parts = {} }
  self.emit("response.output_item.added", { output_index = self.current.index, item = item })
  if kind.part then
    self.emit("response.content_part.added", { item_id = item.id, output_index = self.current.index,
      content_index = 0, part = part(kind, "") })
  end
end

-- Text for the open item of kind name (one opened when another is open).
function Output:text(name, text)
  local current = self.current
  if not current or current.item.type ~= name then
    self:open(name)
    current = self.current
  end
  current.parts[#current.parts + 1] = text
  local event = { item_id = current.item.id, output_index = current.index, delta = text }
  if current.kind.part then event.content_index = 0 end
  if name == "message" then event.logprobs = {} end
  self.emit(current.kind.delta, event)
end

--- Takes a delta of the choice: {reasoning_content =}, {content =} or {tool_call =} (a
-- call's first delta has its id and name).
function Output:add(d)
  if d.reasoning_content then
    self:text("reasoning", d.reasoning_content)
  elseif d.content then
    self:text("message", d.content)
  elseif d.tool_call then
    local call = d.tool_call
    if call.id then self:open("function_call", { call_id = call.id, name = call.name, arguments = "" }) end
    if call.arguments ~= "" then self:text("function_call", call.arguments) end
  end
end

--- Closes the open item, if any, with status: its text joined, told by the done events.
function Output:close(status)
  local current = self.current
  if not current then return end
  self.current = nil
  local item, kind, index = current.item, current.kind, current.index
  local text = table.concat(current.parts)
  item.status = status
  if kind.part then
    item.content = { part(kind, text) }
    local done = { item_id = item.id, output_index = index, content_index = 0, text = text }
    if kind.part == "output_text" then done.logprobs = {} end
    self.emit(kind.done, done)
    self.emit("response.content_part.done", { item_id = item.id, output_index = index, content_index = 0,
      part = item.content[1] })
  else
    item.arguments = text
    self.emit(kind.done, { item_id = item.id, output_index = index, name = item.name, arguments = text })
  end
  self.emit("response.output_item.done", { output_index = index, item = item })
end

return serve_responses_output
