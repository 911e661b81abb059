-- busted output handler: the usual terminal report, then the closing line
-- "N passed, N failed" that CI reads (errors count as failures).
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.utfTerminal"(options)
  busted.subscribe({ "suite", "end" }, function()
    local failed = handler.failuresCount + handler.errorsCount
    io.write(("\n%d passed, %d failed, %d skipped\n"):format(
      handler.successesCount, failed, handler.pendingsCount))
    io.flush()
    return nil, true
  end)
  return handler
end
