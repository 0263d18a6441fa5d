#!/usr/bin/env bash
# The cost of traces (not part of run.sh): figure 1's load (unique events,
# acked after durable commit, no targets; PostgreSQL + Redis) against one
# hookgate build three ways, side by side in one run: tracing off, sampling
# 1 % and sampling 100 %, exporting over OTLP/HTTP to a loopback sink (the
# bench `target` binary, which answers 200 to any POST). The three modes
# alternate, ROUNDS times; prints events/s, p99 and the gateway's CPU per
# request for each run, then the medians. Loopback only, bounded by DUR
# seconds per run; own database and Redis prefix per run, dropped after it.
#   bench/tracing.sh [ROUNDS]    env: DUR=8 CONNS=64 BIN=<dir with hookgate, loadgen, target>
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
ROUNDS=${1:-1}; DUR=${DUR:-8}; CONNS=${CONNS:-64}
PG=postgres://postgres@127.0.0.1:5432
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
for b in hookgate loadgen target; do [[ -x $BIN/$b ]] || { echo "missing $BIN/$b (cargo build --release --workspace)" >&2; exit 1; }; done
HZ=$(getconf CLK_TCK)
ticks() { [[ -r /proc/$1/stat ]] || { echo 0; return; }; local s; s=$(<"/proc/$1/stat"); s=${s##*) }; awk '{print $12 + $13}' <<<"$s"; }
out=$(mktemp -d)
sink=""
cleanup() { [[ -n $sink ]] && kill "$sink" 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT

# The OTLP sink, shared by the traced runs.
SINK=$((26000 + RANDOM % 3000))
"$BIN/target" --listen 127.0.0.1:$SINK >"$out/sink.log" 2>&1 & sink=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:$SINK/healthz >/dev/null && break; sleep 0.1; done

run() { # mode (off|1|100) round
  local mode=$1 w db pre GW g
  w=$(mktemp -d); db=hgtr_$$_$2_$mode; pre=$db; GW=$((21000 + RANDOM % 5000))
  bench_config "$GW" >"$w/c.toml"
  if [[ $mode != off ]]; then
    printf '[telemetry]\notlp_endpoint = "http://127.0.0.1:%s"\nsample_ratio = %s\n' \
      "$SINK" "$(awk -v m="$mode" 'BEGIN {print m / 100}')" >>"$w/c.toml"
  fi
  psql $PG/postgres -XAtqc "CREATE DATABASE $db" >/dev/null
  env -u DATABASE_URL -u REDIS_URL -u RUST_LOG HOOKGATE_STORAGE__DATABASE_URL=$PG/$db \
    HOOKGATE_STORAGE__REDIS_URL=redis://127.0.0.1:6379 HOOKGATE_STORAGE__KEY_PREFIX=$pre \
    HOOKGATE_DELIVERY__ENABLED=false "$BIN/hookgate" -c "$w/c.toml" serve >"$w/g.log" 2>&1 & g=$!
  for _ in $(seq 300); do curl -sf http://127.0.0.1:$GW/healthz >/dev/null && break; sleep 0.1; done
  local g0 g1
  g0=$(ticks $g)
  "$BIN/loadgen" --url http://127.0.0.1:$GW/webhooks/stripe --secret whsec_bench_secret \
    --conns "$CONNS" --duration "$DUR" --dup-share 0 --id-prefix tr$$_$2_$mode >"$w/l.json"
  g1=$(ticks $g)
  local ok rps p99 dropped
  ok=$(jq -r .ok "$w/l.json"); rps=$(jq -r .rps "$w/l.json"); p99=$(jq -r .p99_ms "$w/l.json")
  dropped=$(curl -s http://127.0.0.1:$GW/metrics | awk '/^hookgate_trace_spans_dropped_total/ {print $2}')
  awk -v m="$mode" -v r="$2" -v ok="$ok" -v rps="$rps" -v p99="$p99" -v g=$((g1 - g0)) -v hz="$HZ" -v d="${dropped:-0}" \
    'BEGIN {printf "%-4s round %s: %8.0f events/s  p99 %6.2f ms  gw cpu/event %5.1f µs  spans dropped %s\n", m, r, rps, p99, g*1e6/hz/ok, d}' |
    tee -a "$out/rows"
  kill $g; wait $g 2>/dev/null || true
  psql $PG/postgres -XAtqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  redis-cli --scan --pattern "$pre:*" | xargs -r -n 1000 redis-cli unlink >/dev/null 2>&1 || true
  rm -rf "$w"
}

modes=(off 1 100)
for r in $(seq 1 "$ROUNDS"); do
  # Rotate the order each round, so no mode always runs first.
  for i in 0 1 2; do run "${modes[$(((i + r - 1) % 3))]}" "$r"; done
done
echo "medians over $ROUNDS round(s): tracing off | sampling 1 % | sampling 100 %"
for m in off 1 100; do
  awk -v m="$m" '$1 == m {print $4, $7, $12}' "$out/rows" | sort -n | awk -v m="$m" \
    '{r[NR] = $1} END {printf "  %-4s %8.0f events/s\n", m, r[int((NR + 1) / 2)]}'
done
echo "OTLP export requests received by the sink: $(curl -s http://127.0.0.1:$SINK/report | jq -r '.no_id // .total // "?"')"
