#!/bin/bash
# usage: BENCH_KEPT_DIR=<dir> bench/duel.sh <rounds> <checkoutA> <checkoutB>
# Two checkouts of the service up at once (both on CPU 0), wrk alternating between them 3 s at
# a time, so that a noisy host hits both alike; prints each side's server CPU per request and req/s.
# BENCH_KEPT_DIR: what `BENCH_KEEP=1 BENCH_CASES=gateway-32 deno task bench` kept (its seeded KV
# and an access token, valid for an hour). Both sides get BASE_URL=http://127.0.0.1:18090.
# deno: the one on PATH (e.g. `npx -y deno@2.9.6` puts it there for `deno task`).
N=$1; A=$2; B=$3; BD=${BENCH_KEPT_DIR:?set BENCH_KEPT_DIR to a folder BENCH_KEEP=1 kept after a gateway-32 case}
PORT=18092 taskset -c 1 deno run -A $A/bench/mcp_server.ts >/dev/null 2>&1 & MCP=$!
start() { # repo port kv
  cp $BD/golden.sqlite $3; rm -f $3-*
  (cd $1 && PORT=$2 HOST=127.0.0.1 BASE_URL=http://127.0.0.1:18090 KV_PATH=$3 JWT_SECRET=bench-secret-bench-secret-bench-secret-0123456789 \
    GITLAB_CLIENT_ID=bench-gitlab-app GITLAB_URL=http://127.0.0.1:9 MCP_UPSTREAM_URL=http://127.0.0.1:18092/mcp \
    exec taskset -c 0 deno run --v8-flags=--max-semi-space-size=8 -A main.ts start >/dev/null 2>&1) &
}
start $A 18090 /tmp/duel-a.sqlite; PA=$!
start $B 18190 /tmp/duel-b.sqlite; PB=$!
sleep 4
PA=$(pgrep -f "main.ts start" | while read p; do grep -q "PORT=18090" /proc/$p/environ 2>/dev/null && echo $p; done | head -1)
PB=$(pgrep -f "main.ts start" | while read p; do grep -q "PORT=18190" /proc/$p/environ 2>/dev/null && echo $p; done | head -1)
echo "/mcp $(awk '{print $2}' $BD/gateway-32.txt)" > /tmp/duel-target.txt
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
run() { # port pid -> "ticks reqs non2xx"
  local c0=$(cpu $2)
  local out=$(taskset -c 1 wrk -t2 -c32 -d3s -s $A/bench/wrk.lua http://127.0.0.1:$1 -- /tmp/duel-target.txt mcp 2 0)
  local c1=$(cpu $2)
  echo "$((c1-c0)) $(echo "$out" | grep "requests in" | awk '{print $1}') $(echo "$out" | grep -c Non-2xx)"
}
run 18090 $PA >/dev/null; run 18190 $PB >/dev/null
TA=0; RA=0; TB=0; RB=0; BAD=0
for i in $(seq $N); do
  read t r n <<< "$(run 18090 $PA)"; TA=$((TA+t)); RA=$((RA+r)); BAD=$((BAD+n))
  read t r n <<< "$(run 18190 $PB)"; TB=$((TB+t)); RB=$((RB+r)); BAD=$((BAD+n))
done
echo "A $(basename $A): $((TA*10000/RA)) us/req $((RA/(3*N))) req/s | B $(basename $B): $((TB*10000/RB)) us/req $((RB/(3*N))) req/s | non-2xx runs: $BAD"
kill $PA $PB $MCP 2>/dev/null; wait 2>/dev/null
rm -f /tmp/duel-a.sqlite* /tmp/duel-b.sqlite* /tmp/duel-target.txt
