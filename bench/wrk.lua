-- wrk script: POSTs the body in $BENCH_DIR/body to the request targets listed in
-- $BENCH_DIR/$BENCH_PHASE.paths (written by `bench -serve $BENCH_DIR`), each connection going
-- round-robin over them from its own starting point.
--
--   BENCH_DIR=/tmp/wrk BENCH_PHASE=agentbus wrk -t1 -c64 -d10s -s bench/wrk.lua --latency http://127.0.0.1:PORT
local dir = os.getenv("BENCH_DIR") or "/tmp/wrk"
local phase = os.getenv("BENCH_PHASE") or "agentbus"

local function lines(file)
  local t = {}
  for l in io.lines(file) do
    if l ~= "" then t[#t + 1] = l end
  end
  return t
end

local paths = lines(dir .. "/" .. phase .. ".paths")
local f = io.open(dir .. "/body", "rb")
local body = f:read("*a")
f:close()

local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("offset", counter * 97)
end

local i = 0
function init(args)
  i = tonumber(offset) or 0
end

function request()
  i = i + 1
  local p = paths[(i % #paths) + 1]
  return wrk.format("POST", p, {["Content-Type"] = "application/json"}, body)
end

function done(summary, latency, requests)
  io.write(string.format("%s: req/s %.0f  p50 %.2fms  p99 %.2fms  non-2xx/3xx %d  errors %d\n",
    phase, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
