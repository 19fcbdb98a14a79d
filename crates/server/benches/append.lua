-- wrk load for `convlog serve` (docs/performance.md, "CPU per durable append"):
-- every request appends one 200-byte conversation_recorded event to one of
-- the 256 contexts the server_load bench creates (SERVER_LOAD_SERVE_SECONDS=N).
-- wrk -t2 -c256 -d10s --latency -s crates/server/benches/append.lua URL
--
-- wrk runs on the server's cores, so the requests cost it as little as
-- they can: each thread builds the text of every context's request once
-- (headers and body around the event's sequence number) and a request only
-- puts its sequence number between the two halves. Sequence numbers have a
-- fixed width (13 digits), so every request's Content-Length is the same.
-- No `response` callback: with one, wrk parses every response's headers and
-- body into Lua (client CPU on the server's cores); wrk counts the answers
-- that are not 2xx itself ("Non-2xx or 3xx responses" in its summary).
local counter = 0
local thread_id = 0
local threads = {}
local heads = {}
local tail = ""
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
function init(args)
  thread_id = tonumber(tid) or 0
  local content = string.rep("x", 200)
  -- The sequence numbers of thread t are (t + 1) * 10^12 + 1, + 2, ...:
  -- 13 digits each, unique per thread.
  local width = 13
  for ctx = 0, 255 do
    local id = "ctx_" .. ctx
    local body_head = '{"events":[{"type":"conversation_recorded","conversation_id":"' .. id ..
      '","entry":{"evaluation_id":"eval-load","sequence":'
    local body_tail = ',"role":"user","content":"' .. content .. '"}}]}'
    heads[ctx] = "POST /contexts/" .. id .. "/events HTTP/1.1\r\n" ..
      "Host: " .. wrk.headers["Host"] .. "\r\n" ..
      "Authorization: Bearer load-token\r\n" ..
      "Content-Type: application/json\r\n" ..
      "Content-Length: " .. (#body_head + width + #body_tail) .. "\r\n\r\n" .. body_head
    tail = body_tail
  end
end
request = function()
  counter = counter + 1
  local ctx = (counter * 2 + thread_id) % 256
  return heads[ctx] .. ((thread_id + 1) * 1000000000000 + counter) .. tail
end
