#!/usr/bin/env bash
# Instruction counts of the gateway (not part of run.sh): runs hookgate under
# valgrind --tool=callgrind with PostgreSQL + Redis, delivery off, sends N Stripe
# requests with the bench loadgen (99 % retries for `dup`, none for `unique`),
# stops it and prints callgrind totals. Loopback only, bounded by N.
#   bench/callgrind.sh dup|unique N     env: BIN=<dir with hookgate, loadgen> OUT=<callgrind file>
#   REF=1: the bench's minimal reference server instead of hookgate (same load, same
#   database and Redis), for instructions per request side by side.
#   TARGET=1: delivery on, to the bench's counting target at its default settings
#   (figure 3's shape); the gateway is stopped once the target has every acked
#   event. `unique N` with TARGET=1 minus the same without gives the instructions
#   a delivery adds to an event.
# Build with line tables for readable reports:
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release --workspace
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
MODE=${1:-dup}; N=${2:-3000}; BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}; OUT=${OUT:-callgrind.$MODE${REF:+.ref}.out}
PG=postgres://postgres@127.0.0.1:5432
w=$(mktemp -d); db=hgcg_$$; pre=hgcg_$$
GW=$((21000 + RANDOM % 5000)); TP=$((26000 + RANDOM % 5000)); t=
bench_config "$GW" >$w/c.toml
DELIVERY=false
if [[ ${TARGET:-} == 1 ]]; then
  [[ -z ${REF:-} ]] || { echo "TARGET=1 is for hookgate, not REF=1" >&2; exit 2; }
  printf 'targets = ["sink"]\n[targets.sink]\nurl = "http://127.0.0.1:%s/hook"\n' "$TP" >>$w/c.toml
  DELIVERY=true
fi
psql $PG/postgres -XAtqc "CREATE DATABASE $db" >/dev/null
cleanup(){ kill $g $t 2>/dev/null||true; sleep 1; psql $PG/postgres -XAtqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1||true; redis-cli --scan --pattern "$pre:*" | xargs -r -n 1000 redis-cli unlink >/dev/null 2>&1 || true; rm -rf $w; }
trap cleanup EXIT
ENVS=(HOOKGATE_STORAGE__DATABASE_URL=$PG/$db HOOKGATE_STORAGE__REDIS_URL=redis://127.0.0.1:6379 HOOKGATE_STORAGE__KEY_PREFIX=$pre HOOKGATE_DELIVERY__ENABLED=$DELIVERY)
if [[ ${REF:-} == 1 ]]; then
  valgrind --tool=callgrind --callgrind-out-file=$OUT $BIN/reference --listen 127.0.0.1:$GW --secret whsec_bench_secret \
    --database-url $PG/$db --redis-url redis://127.0.0.1:6379 --key-prefix $pre >$w/g.log 2>&1 & g=$!
else
  env -u DATABASE_URL -u REDIS_URL -u RUST_LOG "${ENVS[@]}" valgrind --tool=callgrind --callgrind-out-file=$OUT $BIN/hookgate -c $w/c.toml serve >$w/g.log 2>&1 & g=$!
fi
if [[ $DELIVERY == true ]]; then
  $BIN/target --listen 127.0.0.1:$TP >$w/t.log 2>&1 & t=$!
  for i in $(seq 300); do curl -sf http://127.0.0.1:$TP/healthz >/dev/null && break; sleep 0.1; done
fi
for i in $(seq 600); do curl -sf http://127.0.0.1:$GW/healthz >/dev/null && break; sleep 0.2; done
if [[ $MODE == dup ]]; then DS=0.99; else DS=0; fi
$BIN/loadgen --url http://127.0.0.1:$GW/webhooks/stripe --secret whsec_bench_secret --conns 8 --count $N --duration 0 --dup-share $DS --id-prefix cg$$ > $w/l.json
cat $w/l.json | head -c 600; echo
if [[ $DELIVERY == true ]]; then
  ok=$(jq -r .ok $w/l.json)
  for i in $(seq 1500); do d=$(curl -sf http://127.0.0.1:$TP/report | jq -r .distinct); ((d >= ok)) && break; sleep 0.2; done
  echo "delivered $d of $ok acked"
fi
kill -TERM $g; wait $g || true
callgrind_annotate $OUT 2>/dev/null | head -5
