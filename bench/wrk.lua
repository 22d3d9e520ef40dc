-- wrk workload for bench/run.ts (same approach as ../shared/bench/lua/token.lua).
-- usage: wrk -t2 -c32 -d10s -s bench/wrk.lua http://127.0.0.1:PORT -- <file|path> <mode> <nthreads> [count]
--   mode "refresh": file lines "<refresh_token>"   -> POST /token grant_type=refresh_token
--   mode "code":    file lines "<code> <verifier>" -> POST /token grant_type=authorization_code
--   mode "chain":   as "refresh", and every refresh token a 200 answer returns is queued to be
--                   used once later, so a small set of sessions can be refreshed for any duration
--   mode "poll":    file lines "<flow_state>"      -> GET /oauth/poll?flow_state=... (cycles)
--   mode "get":     first argument is a path        -> GET <path>
--   mode "mcp":     file line "<path> <token|->"    -> POST <path>, a JSON-RPC tools/call of the
--                   tool "echo" as MCP 2026-07-28 sends it (MCP-Protocol-Version, Mcp-Method and
--                   Mcp-Name headers agreeing with the body, the revision in params._meta), with
--                   "Authorization: Bearer <token>" unless the token is "-"
--   mode "mcp2025": as "mcp", as MCP 2025-11-25 sends it: no request metadata headers
--   mode "mcpcold": as "mcp", file lines "<path> <token>", each request the thread's next line
--                   (cycling): every call carries another session's token
--   count "1" (default) counts responses per status (needs wrk's response() hook); "0" does not.
-- Thread k (1-based) uses lines k, k+n, k+2n, ... so no token is sent twice. A thread that runs
-- out of tokens wraps around (re-sends used ones, which a rotating server refuses); done()
-- reports the wraps, and for the token modes such a run is invalid.
local threads = {}
local nsetup = 0

function setup(thread)
  nsetup = nsetup + 1
  thread:set("tid", nsetup)
  table.insert(threads, thread)
end

-- globals (not local) so that done() can read them with thread:get()
toks, n, i, mode, wrapped, statuses, path = {}, 0, 0, "refresh", 0, {}, "/"
local mcp_headers = { ["Content-Type"] = "application/json", ["Accept"] = "application/json, text/event-stream" }
local mcp_modern_headers = {
  ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = "echo",
}
local mcp_modern_body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",' ..
  '"arguments":{"text":"hello from wrk"},' ..
  '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}'
local mcp_2025_body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",' ..
  '"arguments":{"text":"hello from wrk"}}}'
local mcp_body = mcp_modern_body
local form = { ["Content-Type"] = "application/x-www-form-urlencoded" }
local client_id = os.getenv("BENCH_CLIENT_ID") or "bench-client"
local redirect_uri = "http%3A%2F%2F127.0.0.1%3A9%2Fcb"

function init(args)
  local source, nthreads = args[1], tonumber(args[3] or "1")
  mode = args[2] or "refresh"
  if args[4] == "0" and mode ~= "chain" then response = nil end
  if mode == "get" then
    path = source
    return
  end
  if mode == "mcpcold" then
    for name, value in pairs(mcp_modern_headers) do mcp_headers[name] = value end
  end
  if mode == "mcp" or mode == "mcp2025" then
    if mode == "mcp" then
      for name, value in pairs(mcp_modern_headers) do mcp_headers[name] = value end
    else
      mcp_body = mcp_2025_body
    end
    local line = io.lines(source)()
    local token
    path, token = line:match("^(%S+) (%S+)$")
    if token ~= "-" then mcp_headers["Authorization"] = "Bearer " .. token end
    return
  end
  local k, ln = tid - 1, 0
  for line in io.lines(source) do
    if ln % nthreads == k and #line > 0 then n = n + 1; toks[n] = line end
    ln = ln + 1
  end
end

function request()
  if mode == "get" then return wrk.format("GET", path) end
  if mode == "mcp" or mode == "mcp2025" then
    return wrk.format("POST", path, mcp_headers, mcp_body)
  end
  i = i + 1
  if i > n then i = 1; wrapped = wrapped + 1 end
  local t = toks[i]
  if mode == "mcpcold" then
    local p, token = t:match("^(%S+) (%S+)$")
    mcp_headers["Authorization"] = "Bearer " .. token
    return wrk.format("POST", p, mcp_headers, mcp_body)
  end
  if mode == "poll" then return wrk.format("GET", "/oauth/poll?flow_state=" .. t) end
  if mode == "chain" then toks[i] = nil end -- used once; frees the queue as it grows
  if mode == "code" then
    local code, verifier = t:match("^(%S+) (%S+)$")
    return wrk.format("POST", "/token", form, "grant_type=authorization_code&code=" .. code ..
      "&code_verifier=" .. verifier .. "&redirect_uri=" .. redirect_uri .. "&client_id=" .. client_id)
  end
  return wrk.format("POST", "/token", form,
    "grant_type=refresh_token&refresh_token=" .. (t or "used") .. "&client_id=" .. client_id)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if mode == "chain" and status == 200 then
    local rt = body:match('"refresh_token":"([^"]+)"')
    if rt then n = n + 1; toks[n] = rt end
  end
end

function done(summary, latency, requests)
  local wraps, avail, counts = 0, 0, {}
  for _, t in ipairs(threads) do
    wraps = wraps + (t:get("wrapped") or 0)
    avail = avail + (t:get("n") or 0)
    for status, count in pairs(t:get("statuses") or {}) do
      counts[status] = (counts[status] or 0) + count
    end
  end
  local parts = {}
  for status, count in pairs(counts) do table.insert(parts, status .. ":" .. count) end
  table.sort(parts)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d rps=%.1f p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
    "non2xx=%d sock_err=%d wraps=%d tokens_avail=%d statuses=%s\n",
    summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.status, e.connect + e.read + e.write + e.timeout, wraps, avail, table.concat(parts, ",")))
end
