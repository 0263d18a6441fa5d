#!/usr/bin/env bash
# Instruction counts of the gateway (not part of run.sh): runs hookgate under
# valgrind --tool=callgrind with PostgreSQL + Redis, delivery off, sends N Stripe
# requests with the bench loadgen (99 % retries for `dup`, none for `unique`),
# stops it and prints callgrind totals. Loopback only, bounded by N.
#   bench/callgrind.sh dup|unique N     env: BIN=<dir with hookgate, loadgen> OUT=<callgrind file>
#   REF=1: the bench's minimal reference server instead of hookgate (same load, same
#   database and Redis), for instructions per request side by side.
# Build with line tables for readable reports:
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release --workspace
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
MODE=${1:-dup}; N=${2:-3000}; BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}; OUT=${OUT:-callgrind.$MODE${REF:+.ref}.out}
PG=postgres://postgres@127.0.0.1:5432
w=$(mktemp -d); db=hgcg_$$; pre=hgcg_$$
GW=$((21000 + RANDOM % 5000))
bench_config "$GW" >$w/c.toml
psql $PG/postgres -XAtqc "CREATE DATABASE $db" >/dev/null
cleanup(){ kill $g 2>/dev/null||true; sleep 1; psql $PG/postgres -XAtqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1||true; redis-cli --scan --pattern "$pre:*" | xargs -r -n 1000 redis-cli unlink >/dev/null 2>&1 || true; rm -rf $w; }
trap cleanup EXIT
ENVS=(HOOKGATE_STORAGE__DATABASE_URL=$PG/$db HOOKGATE_STORAGE__REDIS_URL=redis://127.0.0.1:6379 HOOKGATE_STORAGE__KEY_PREFIX=$pre HOOKGATE_DELIVERY__ENABLED=false)
if [[ ${REF:-} == 1 ]]; then
  valgrind --tool=callgrind --callgrind-out-file=$OUT $BIN/reference --listen 127.0.0.1:$GW --secret whsec_bench_secret \
    --database-url $PG/$db --redis-url redis://127.0.0.1:6379 --key-prefix $pre >$w/g.log 2>&1 & g=$!
else
  env -u DATABASE_URL -u REDIS_URL -u RUST_LOG "${ENVS[@]}" valgrind --tool=callgrind --callgrind-out-file=$OUT $BIN/hookgate -c $w/c.toml serve >$w/g.log 2>&1 & g=$!
fi
for i in $(seq 600); do curl -sf http://127.0.0.1:$GW/healthz >/dev/null && break; sleep 0.2; done
if [[ $MODE == dup ]]; then DS=0.99; else DS=0; fi
$BIN/loadgen --url http://127.0.0.1:$GW/webhooks/stripe --secret whsec_bench_secret --conns 8 --count $N --duration 0 --dup-share $DS --id-prefix cg$$ > $w/l.json
cat $w/l.json | head -c 600; echo
kill -TERM $g; wait $g || true
callgrind_annotate $OUT 2>/dev/null | head -5
