#!/bin/bash
# usage: BENCH_KEPT_DIR=<dir> bench/duel.sh <rounds> <side> <side>...
#   side: a checkout of the service (served as `deno task start` runs it), or floor:<mode>
#   (this checkout's bench/floor.ts, e.g. floor:proxy, floor:proxy-read).
# Every side up at once (all on CPU 0, each on its own port), wrk (2 threads, 32 connections)
# sending the gateway-32 case's tools/call to each in turn, SLICE seconds (default 1) at a time,
# so that a noisy host hits every side alike. Prints each side's server CPU per request (median
# and lower quartile of the rounds) and the median of its per-round ratio to the first side.
# BENCH_KEPT_DIR: what `BENCH_KEEP=1 BENCH_CASES=gateway-32 deno task bench` kept (its seeded KV
# and an access token, valid for an hour). Every side gets BASE_URL=http://127.0.0.1:18090, the
# issuer that token names. deno: the one on PATH (`npx -y deno@2.9.6` puts it there).
# DUEL_KEEP=1 keeps the temporary folder (each side's log, the rounds) and prints its path.
set -u
N=$1
shift
BD=${BENCH_KEPT_DIR:?set BENCH_KEPT_DIR to a folder BENCH_KEEP=1 kept after a gateway-32 case}
SLICE=${SLICE:-1}
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
PORT=18092 taskset -c 1 deno run -A "$HERE/bench/mcp_server.ts" >/dev/null 2>&1 &
MCP=$!
echo "/mcp $(awk '{print $2}' "$BD/gateway-32.txt")" >"$OUT/target.txt"
PIDS=()
PORTS=()
i=0
for side in "$@"; do
  port=$((18300 + i))
  kv="$OUT/kv-$i.sqlite"
  cp "$BD/golden.sqlite" "$kv"
  if [[ $side == floor:* ]]; then
    (cd "$HERE" && FLOOR=${side#floor:} PORT=$port UPSTREAM_URL=http://127.0.0.1:18092/mcp \
      exec taskset -c 0 deno run -A bench/floor.ts >"$OUT/log-$i.txt" 2>&1) &
  else
    (cd "$side" && PORT=$port HOST=127.0.0.1 BASE_URL=http://127.0.0.1:18090 KV_PATH=$kv \
      JWT_SECRET=bench-secret-bench-secret-bench-secret-0123456789 \
      GITLAB_CLIENT_ID=bench-gitlab-app GITLAB_URL=http://127.0.0.1:9 RATE_LIMIT_MCP=off \
      MCP_UPSTREAM_URL=http://127.0.0.1:18092/mcp \
      exec taskset -c 0 deno run --v8-flags=--max-semi-space-size=8,--heap-growing-percent=50 -A main.ts start >"$OUT/log-$i.txt" 2>&1) &
  fi
  PIDS+=($!)
  PORTS+=($port)
  i=$((i + 1))
done
sleep 5
# The subshells exec'd deno: their pids are the servers'.
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
slice() { # index round
  local c0 c1 out
  c0=$(cpu "${PIDS[$1]}")
  out=$(taskset -c 1 wrk -t2 -c32 -d"${SLICE}s" -s "$HERE/bench/wrk.lua" \
    "http://127.0.0.1:${PORTS[$1]}" -- "$OUT/target.txt" mcp 2 0)
  c1=$(cpu "${PIDS[$1]}")
  echo "$2 $1 $((c1 - c0)) $(echo "$out" | awk '/requests in/ {print $1}') $(echo "$out" | grep -c Non-2xx)"
}
for k in "${!PIDS[@]}"; do slice "$k" 0 >/dev/null; done
for r in $(seq "$N"); do
  for k in "${!PIDS[@]}"; do slice "$k" "$r" >>"$OUT/rounds.txt"; done
done
python3 - "$OUT/rounds.txt" "$@" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
sides = sys.argv[2:]
us = {}
bad = 0
for r, k, ticks, requests, non2xx in rows:
    us.setdefault(int(k), {})[int(r)] = int(ticks) * 10000 / int(requests)
    bad += int(non2xx)
for k, side in enumerate(sides):
    values = sorted(us[k].values())
    ratios = [us[k][r] / us[0][r] for r in us[k]]
    print(f"{side}: median {statistics.median(values):.1f} µs/req, lower quartile "
          f"{values[len(values) // 4]:.1f}, ratio to {sides[0]} (median of rounds) "
          f"{statistics.median(ratios):.3f}")
print(f"slices with non-2xx answers: {bad}")
PY
kill "${PIDS[@]}" "$MCP" 2>/dev/null
wait 2>/dev/null
[ -n "${DUEL_KEEP:-}" ] || rm -rf "$OUT"; [ -n "${DUEL_KEEP:-}" ] && echo "kept $OUT"
