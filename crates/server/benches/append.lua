-- wrk load for `convlog serve` (docs/performance.md, "CPU per durable append"):
-- every request appends one 200-byte conversation_recorded event to one of
-- the 256 contexts the server_load bench creates (SERVER_LOAD_SERVE_SECONDS=N).
-- wrk -t2 -c256 -d10s --latency -s crates/server/benches/append.lua URL
-- No `response` callback: with one, wrk parses every response's headers and
-- body into Lua (client CPU on the server's cores); wrk counts the answers
-- that are not 2xx itself ("Non-2xx or 3xx responses" in its summary).
local counter = 0
local thread_id = 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  thread_id = tonumber(tid) or 0
end
local content = string.rep("x", 200)
request = function()
  counter = counter + 1
  local ctx = "ctx_" .. ((counter * 2 + thread_id) % 256)
  local seq = thread_id * 1000000000 + counter
  local body = '{"events":[{"type":"conversation_recorded","conversation_id":"' .. ctx ..
    '","entry":{"evaluation_id":"eval-load","sequence":' .. seq .. ',"role":"user","content":"' .. content .. '"}}]}'
  return wrk.format("POST", "/contexts/" .. ctx .. "/events",
    {["Authorization"] = "Bearer load-token", ["Content-Type"] = "application/json"}, body)
end
