#!/usr/bin/env bash
# hookgate benchmark: every figure next to a minimal reference's figure from the
# SAME run, the ratio, CPU time per event (gateway, PostgreSQL, Redis) and the
# gateway's peak RSS. Everything talks to 127.0.0.1 only; every load is bounded.
#
#   bench/run.sh                 default run (3 repetitions, ~10 min on 2 cores)
#   QUICK=1 bench/run.sh         smoke test: 1 repetition, short loads, small counts
#   SCALE=1 bench/run.sh         also figure 6: seeds 10 M ledger rows inside
#                                PostgreSQL first (adds several minutes)
#
# Figures
#   1 unique events acked after durable commit, no targets: hookgate vs the
#     reference's micro-batched durable path (events/s, p50/p99, ratio), and
#     the share of the load hookgate's one ledger writer spent writing
#   2 99 % provider retries (same body, new timestamp + signature): hookgate vs
#     the reference's Redis duplicate path
#   3 unique events with one loopback target: ingest events/s and p99, events/s
#     delivered (counted by the target), backlog at the end of the load, and an
#     exactly-once check after a bounded drain wait; beside it, in the same run,
#     the stateless verify-and-forward server (bench/src/bin/forwarder.rs: no
#     dedup, no storage, answers after the target's answer) under the same load:
#     the ceiling of forwarding without durability
#   4 backlog drain: DRAIN_N pending deliveries (ingested with delivery off),
#     then a gateway with delivery on: deliveries/s until the target has all
#   5 embedded default (SQLite + in-process cache): unique, duplicates, drain,
#     and end to end: one target, the most ingest it takes, delivered/s
#     (counted by the target during the load) against acked/s
#   6 (SCALE=1) unique events/s with SCALE_ROWS stored event ids vs an empty ledger
#   7 queue targets, in the style of 4: QUEUE_N events ingested with delivery off
#     into a gateway whose source targets a `redis-stream` target (a stream under
#     the bench's Redis prefix), then a `nats` target (a bench-only subject and a
#     JetStream stream made for it); a gateway with delivery on until the stream
#     holds them all: events/s (first to last stored message), gateway CPU per
#     event, and exactly-once (messages == distinct event ids == acked). The
#     table puts figure 4's HTTP drain next to it. The NATS half is skipped, with
#     a message, when NATS or JetStream is not reachable at $NATS.
#   8 a target outage under a steady load: OUTAGE_RATE unique events/s to a
#     gateway with one target; after OUTAGE_LEAD s the target answers 503 for
#     OUTAGE_S s, then 200 again: the backlog when it returns, the seconds until
#     the pending deliveries are back to the load's own level (at most a tenth
#     of a second of traffic) and exactly-once after the load
#
# Knobs (environment)
#   DURATION=8        seconds of load per measured run        (QUICK: 3)
#   CONNS=64          load generator connections
#   RUNS=3            repetitions per figure; the table shows medians (QUICK: 1)
#   QUICK=0           1 = smoke test
#   FIGURES="1 2 3 4 5 6 7 8"  the figures to run, e.g. FIGURES=7 or FIGURES="4 7"
#                     (6 still needs SCALE=1)
#   SCALE=0           1 = run figure 6
#   SCALE_ROWS=10000000  ledger rows seeded for figure 6
#   DRAIN_N=100000    pending deliveries for figure 4          (QUICK: 5000)
#   EMBED_DRAIN_N=20000  pending deliveries for figure 5's drain (QUICK: 2000)
#   QUEUE_N=20000     events per queue target for figure 7       (QUICK: 3000)
#   OUTAGE_RATE=500 OUTAGE_LEAD=5 OUTAGE_S=10  figure 8's load (events/s),
#                     seconds before the outage, its length (QUICK: 3 s, 5 s)
#   DRAIN_WAIT=120    most seconds to wait for the target (or stream) to receive everything
#   TARGET_CONC=      the bench target's `concurrency`; empty (the default) =
#                     the target's default settings, as an operator runs it
#   BODY_SIZE=1536    bytes per event
#   PGURL=postgres://postgres@127.0.0.1:5432   server for the bench database
#   REDIS=redis://127.0.0.1:6379
#   NATS=nats://127.0.0.1:4222    NATS server with JetStream, for figure 7
#   BIN=<dir>         use the binaries in <dir> (hookgate, loadgen, target,
#                     reference, forwarder, queue) instead of building: A/B of two builds
#
# The "quiet" column: the share of the whole machine's CPU (all cores) used
# during the measured window by processes outside the bench (everything but the
# server under test, the target, this script and its children such as loadgen,
# PostgreSQL, Redis and nats-server), from /proc/stat and /proc/<pid>/stat. A run with a
# high figure there shared the machine and is not comparable.
#
# Needs: cargo, psql, redis-cli, curl, jq, a running PostgreSQL and Redis
# (and, for figure 7's NATS half, nats-server with JetStream).
# Creates database hg_bench_<pid>, Redis keys hg_bench_<pid>:* and JetStream
# stream hg_bench_<pid>_q (subjects hg_bench_<pid>.q.>); drops all three at
# the end, also on failure. Kills only the processes it started.
# PostgreSQL CPU is summed over every process named `postgres` on this machine:
# other clients of the same server show up in it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
  DURATION=${DURATION:-3}; RUNS=${RUNS:-1}
  DRAIN_N=${DRAIN_N:-5000}; EMBED_DRAIN_N=${EMBED_DRAIN_N:-2000}
  DRAIN_WAIT=${DRAIN_WAIT:-60}; SCALE_ROWS=${SCALE_ROWS:-200000}
  QUEUE_N=${QUEUE_N:-3000}
  OUTAGE_LEAD=${OUTAGE_LEAD:-3}; OUTAGE_S=${OUTAGE_S:-5}
fi
DURATION=${DURATION:-8}
CONNS=${CONNS:-64}
RUNS=${RUNS:-3}
SCALE=${SCALE:-0}
SCALE_ROWS=${SCALE_ROWS:-10000000}
DRAIN_N=${DRAIN_N:-100000}
EMBED_DRAIN_N=${EMBED_DRAIN_N:-20000}
QUEUE_N=${QUEUE_N:-20000}
DRAIN_WAIT=${DRAIN_WAIT:-120}
FIGURES=${FIGURES:-1 2 3 4 5 6 7 8}
OUTAGE_RATE=${OUTAGE_RATE:-500}
OUTAGE_LEAD=${OUTAGE_LEAD:-5}
OUTAGE_S=${OUTAGE_S:-10}
TARGET_CONC=${TARGET_CONC:-}
BODY_SIZE=${BODY_SIZE:-1536}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
REDIS=${REDIS:-redis://127.0.0.1:6379}
NATS=${NATS:-nats://127.0.0.1:4222}
SECRET=whsec_bench_secret
# want N: figure N is in FIGURES
want() { [[ " ${FIGURES//,/ } " == *" $1 "* ]]; }

die() { echo "bench: $*" >&2; exit 1; }
log() { echo "bench: $*" >&2; }

for tool in cargo psql redis-cli curl jq ss; do
  command -v "$tool" >/dev/null || die "'$tool' is missing (apt-get install postgresql-client redis-tools curl jq iproute2)"
done
psql "$PGURL/postgres" -XAtqc 'select 1' >/dev/null 2>&1 ||
  die "PostgreSQL is not reachable at $PGURL (user with CREATE DATABASE needed)"
[[ $(redis-cli -u "$REDIS" ping 2>/dev/null) == PONG ]] || die "Redis is not reachable at $REDIS"

if [[ -n ${BIN:-} ]]; then # A/B runs: binaries built elsewhere, no build here
  bin=$(cd "$BIN" && pwd)
else
  log "building (cargo build --release --locked --workspace)"
  cargo build --release --locked --workspace -q || die "build failed"
  bin=$root/target/release
fi
for b in hookgate loadgen target reference forwarder queue; do [[ -x $bin/$b ]] || die "missing $bin/$b"; done

work=$(mktemp -d)
db="hg_bench_$$"
prefix="hg_bench_$$"
DBURL="$PGURL/$db"
SCALE_DB="${db}_scale"
JS_STREAM="${prefix}_q"       # JetStream stream of figure 7
JS_SUBJECT="${prefix}.q"      # its subjects: $JS_SUBJECT.>
JS_MADE=0
RS_STREAM="$prefix:q"         # Redis stream of figure 7 (markers: $RS_STREAM:hookgate-sent:*)
CLK_TCK=$(getconf CLK_TCK)
PIDS=()
results=$work/results
: >"$results"

cleanup() {
  local st=$?
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  psql "$PGURL/postgres" -XAtqc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  psql "$PGURL/postgres" -XAtqc "DROP DATABASE IF EXISTS $SCALE_DB WITH (FORCE)" >/dev/null 2>&1 || true
  redis_purge
  [[ $JS_MADE == 1 ]] && { "$bin/queue" delete --url "$NATS" --stream "$JS_STREAM" >/dev/null 2>&1 || true; }
  if [[ $st != 0 && -f $work/gateway.log ]]; then
    echo "bench: last gateway log lines:" >&2; tail -n 20 "$work/gateway.log" >&2 || true
  fi
  rm -rf "$work"
  exit "$st"
}
redis_purge() {
  redis-cli -u "$REDIS" --scan --pattern "$prefix:*" 2>/dev/null |
    xargs -r -n 1000 redis-cli -u "$REDIS" unlink >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Below Linux's default ephemeral range (32768-60999), so no outgoing
# connection of the bench holds the port between the check and the bind.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    [[ -z $(ss -Htln "sport = :$p") ]] && { echo "$p"; return; }
  done
  die "no free port found"
}
GW_PORT=$(free_port); REF_PORT=$(free_port); T_PORT=$(free_port); FW_PORT=$(free_port)
while [[ $REF_PORT == "$GW_PORT" ]]; do REF_PORT=$(free_port); done
while [[ $T_PORT == "$GW_PORT" || $T_PORT == "$REF_PORT" ]]; do T_PORT=$(free_port); done
while [[ $FW_PORT == "$GW_PORT" || $FW_PORT == "$REF_PORT" || $FW_PORT == "$T_PORT" ]]; do
  FW_PORT=$(free_port)
done

psql "$PGURL/postgres" -XAtqc "CREATE DATABASE $db" >/dev/null || die "cannot create database $db"
q() { psql "$DBURL" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }

# Redis server pid, for its CPU time (empty when it is not visible here).
REDIS_PID=$(redis-cli -u "$REDIS" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
[[ -n $REDIS_PID && -r /proc/$REDIS_PID/stat ]] || { log "Redis process not visible: its CPU is not counted"; REDIS_PID=; }

write_config() { # file, with_target (0|1)
  {
    cat <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"
admin_token = "bench-admin-token"
log_level = "warn"
shutdown_grace = "2s"

[sources.stripe]
provider = "stripe"
secrets = ["$SECRET"]
tolerance = "5m"
TOML
    if [[ $2 == 1 ]]; then
      cat <<TOML
targets = ["sink"]

[targets.sink]
url = "http://127.0.0.1:$T_PORT/hook"
TOML
      if [[ -n $TARGET_CONC ]]; then echo "concurrency = $TARGET_CONC"; fi
    fi
  } >"$1"
}
write_config "$work/plain.toml" 0
write_config "$work/target.toml" 1
# Figure 7: the `stripe` source with one queue target, kind redis or nats.
write_queue_config() { # file kind
  write_config "$1" 0
  {
    echo 'targets = ["q"]'
    echo
    echo '[targets.q]'
    if [[ $2 == redis ]]; then
      printf 'kind = "redis-stream"\nurl = "%s"\nstream = "%s"\n' "$REDIS" "$RS_STREAM"
    else
      printf 'kind = "nats"\nurl = "%s"\nsubject = "%s.{source}"\n' "$NATS" "$JS_SUBJECT"
    fi
    if [[ -n $TARGET_CONC ]]; then echo "concurrency = $TARGET_CONC"; fi
  } >>"$1"
}
write_queue_config "$work/q-redis.toml" redis
write_queue_config "$work/q-nats.toml" nats

# ---- processes -------------------------------------------------------------
wait_health() { # port pid name log
  for _ in $(seq 1 300); do
    kill -0 "$2" 2>/dev/null || { tail -n 20 "$4" >&2; die "$3 exited during start (log above)"; }
    curl -sf "http://127.0.0.1:$1/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$3 not healthy on port $1 after 30 s"
}
stop() { # pid
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  local keep=() p
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}
# start_gateway MODE(pg|embedded) CONFIG DELIVERY(true|false) [DATABASE]; sets GW
start_gateway() {
  local envs=(HOOKGATE_DELIVERY__ENABLED="$3")
  if [[ $1 == pg ]]; then
    envs+=(HOOKGATE_STORAGE__DATABASE_URL="$PGURL/${4:-$db}" HOOKGATE_STORAGE__REDIS_URL="$REDIS"
      HOOKGATE_STORAGE__KEY_PREFIX="$prefix")
  else
    envs+=(HOOKGATE_STORAGE__DATABASE_URL="sqlite://embedded.db")
  fi
  (cd "$work" && exec env -u DATABASE_URL -u REDIS_URL -u RUST_LOG "${envs[@]}" \
    "$bin/hookgate" -c "$2" serve) >>"$work/gateway.log" 2>&1 &
  GW=$!
  PIDS+=("$GW")
  wait_health "$GW_PORT" "$GW" gateway "$work/gateway.log"
}
start_reference() { # sets REF
  "$bin/reference" --listen "127.0.0.1:$REF_PORT" --secret "$SECRET" --database-url "$DBURL" \
    --redis-url "$REDIS" --key-prefix "$prefix:ref" >>"$work/reference.log" 2>&1 &
  REF=$!
  PIDS+=("$REF")
  wait_health "$REF_PORT" "$REF" reference "$work/reference.log"
}
start_forwarder() { # sets FW
  "$bin/forwarder" --listen "127.0.0.1:$FW_PORT" --secret "$SECRET" \
    --target "http://127.0.0.1:$T_PORT/hook" >>"$work/forwarder.log" 2>&1 &
  FW=$!
  PIDS+=("$FW")
  wait_health "$FW_PORT" "$FW" forwarder "$work/forwarder.log"
}
"$bin/target" --listen "127.0.0.1:$T_PORT" >>"$work/target.log" 2>&1 &
TGT=$!
PIDS+=("$TGT")
wait_health "$T_PORT" "$TGT" target "$work/target.log"

# ---- measurement helpers ---------------------------------------------------
ticks() { # pid -> utime+stime in clock ticks (empty if gone)
  [[ -r /proc/$1/stat ]] || return 0
  local s; s=$(<"/proc/$1/stat") || return 0
  s=${s##*) }
  awk '{print $12 + $13}' <<<"$s"
}
selfticks() { # this script: own CPU + that of every child it waited for (loadgen, curl, ...)
  local s; s=$(<"/proc/$$/stat"); s=${s##*) }
  awk '{print $12 + $13 + $14 + $15}' <<<"$s"
}
snap() { # file server_pid
  {
    local p
    awk '/^cpu / {print "all 0", $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat
    awk -v hz="$CLK_TCK" '{printf "up 0 %.0f\n", $1 * hz}' /proc/uptime
    echo "tgt $TGT $(ticks "$TGT")"
    echo "sh $$ $(selfticks)"
    for p in $(pgrep -x postgres || true); do echo "pg $p $(ticks "$p")"; done
    [[ -n $REDIS_PID ]] && echo "redis $REDIS_PID $(ticks "$REDIS_PID")"
    # figure 7's broker: the bench's work, not the machine's other load
    for p in $(pgrep -x nats-server || true); do echo "nats $p $(ticks "$p")"; done
    echo "srv $2 $(ticks "$2")"
  } >"$1"
}
# cpu KEY BEFORE AFTER EVENTS: records KEY.cpu_{srv,pg,redis} in µs per event
# and KEY.quiet, the % of the machine's CPU used outside the bench meanwhile
cpu() {
  local vals
  vals=$(awk -v n="$4" -v hz="$CLK_TCK" -v cores="$(nproc)" '
    NR == FNR { if ($3 != "") before[$1 " " $2] = $3; next }
    $3 != "" { d[$1] += $3 - ((($1 " " $2) in before) ? before[$1 " " $2] : 0) }
    END {
      for (k in d) if (n > 0 && (k == "srv" || k == "pg" || k == "redis"))
        printf "cpu_%s %.1f\n", k, d[k] * 1e6 / hz / n
      if (d["up"] > 0) {
        o = d["all"] - d["srv"] - d["pg"] - d["redis"] - d["nats"] - d["tgt"] - d["sh"]
        printf "quiet %.0f\n", (o > 0 ? o : 0) * 100 / (d["up"] * cores)
      }
    }' "$2" "$3")
  local k v
  while read -r k v; do [[ -n $k ]] && rec "$1.$k" "$v"; done <<<"$vals"
}
rss_mb() { awk '/^VmHWM:/ {printf "%.0f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || true; }
rec() { echo "$1 $2" >>"$results"; }
# load OUT URL [loadgen args...]
load() {
  local out=$1 url=$2; shift 2
  timeout $((${DURATION%.*} + 600)) "$bin/loadgen" --url "$url" --secret "$SECRET" --conns "$CONNS" \
    --body-size "$BODY_SIZE" "$@" >"$out" || die "loadgen failed: $(cat "$out")"
  local bad; bad=$(jq -r '[.non_2xx[]] | add // 0' "$out")
  [[ $bad == 0 && $(jq -r .errors "$out") == 0 ]] || log "note: $(jq -c '{non_2xx, errors}' "$out") in $out"
}
# record_load KEY FILE: rps, p50, p99, ok
record_load() {
  rec "$1.rps" "$(jq -r .rps "$2")"; rec "$1.p50" "$(jq -r .p50_ms "$2")"
  rec "$1.p99" "$(jq -r .p99_ms "$2")"; rec "$1.non2xx" "$(jq -r '([.non_2xx[]] | add // 0) + .errors' "$2")"
}
report() { curl -sf "http://127.0.0.1:$T_PORT/report${1:+?acked=$1}" || die "target report failed"; }
# wait_delivered N: until the target has N distinct ids or DRAIN_WAIT passes
wait_delivered() {
  local end=$((SECONDS + DRAIN_WAIT)) got
  while :; do
    got=$(report | jq -r .distinct)
    ((got >= $1)) && return 0
    ((SECONDS >= end)) && { log "drain wait over: $got of $1 delivered"; return 1; }
    sleep 0.2
  done
}
truncate_all() {
  q "TRUNCATE hookgate_events, hookgate_deliveries, hookgate_attempts CASCADE" >/dev/null 2>&1 || true
  q "TRUNCATE hgref_events" >/dev/null 2>&1 || true
  redis_purge
}
exactly_once() { # label report-json
  local line
  line=$(jq -r '"acked \(.acked), delivered \(.distinct) distinct / \(.total) total, missing \(.missing), delivered twice \(.duplicates), unknown \(.unexpected)"' <<<"$2")
  echo "$1: $line" >>"$work/exactly_once"
  jq -e '.missing == 0 and .duplicates == 0 and .unexpected == 0' <<<"$2" >/dev/null || EXACT_FAIL=1
}
EXACT_FAIL=0
: >"$work/exactly_once"
declare -A WALL
# reset_deliveries: the same backlog again, every delivery pending and due
reset_deliveries() {
  q "DELETE FROM hookgate_attempts" >/dev/null
  q "UPDATE hookgate_deliveries SET state = 'pending', attempts = 0, next_attempt_at = 0,
     lease_until = NULL, lease_token = NULL, last_status = NULL, last_error = NULL" >/dev/null
  q "VACUUM ANALYZE hookgate_deliveries" >/dev/null
}

# Ensure the schema exists before anything truncates it.
start_gateway pg "$work/plain.toml" false; stop "$GW"

# ---- 1 + 2: hookgate vs reference ------------------------------------------
hg_run() { # KEY dup_share run
  truncate_all
  start_gateway pg "$work/plain.toml" true
  snap "$work/b" "$GW"
  load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --duration "$DURATION" \
    --dup-share "$2" --id-prefix "$1_$3"
  snap "$work/a" "$GW"
  rec "$1.rss" "$(rss_mb "$GW")"
  writer_busy "$1"
  stop "$GW"
  record_load "$1" "$work/l.json"
  cpu "$1" "$work/b" "$work/a" "$(jq -r .ok "$work/l.json")"
}
# writer_busy KEY: the share of the load's duration the ledger's one writer
# spent in writes (statement + COMMIT), from the gateway's /metrics
writer_busy() {
  local s
  s=$(curl -sf -H "authorization: Bearer bench-admin-token" "http://127.0.0.1:$GW_PORT/metrics" |
    awk '$1 == "hookgate_ledger_write_seconds_sum" {print $2}') || true
  [[ -n $s ]] && rec "$1.busy" "$(awk -v s="$s" -v d="$DURATION" 'BEGIN {printf "%.2f", s / d}')"
  return 0
}
ref_run() { # KEY dup_share run
  truncate_all
  start_reference
  snap "$work/b" "$REF"
  load "$work/l.json" "http://127.0.0.1:$REF_PORT/webhooks/stripe" --duration "$DURATION" \
    --dup-share "$2" --id-prefix "$1_$3"
  snap "$work/a" "$REF"
  rec "$1.rss" "$(rss_mb "$REF")"
  stop "$REF"
  record_load "$1" "$work/l.json"
  cpu "$1" "$work/b" "$work/a" "$(jq -r .ok "$work/l.json")"
}
for fig in 1 2; do
  want "$fig" || continue
  t0=$SECONDS
  share=0; [[ $fig == 2 ]] && share=0.99
  for r in $(seq 1 "$RUNS"); do
    log "figure $fig run $r/$RUNS"
    if ((r % 2)); then hg_run "f${fig}hg" "$share" "$r"; ref_run "f${fig}ref" "$share" "$r"
    else ref_run "f${fig}ref" "$share" "$r"; hg_run "f${fig}hg" "$share" "$r"; fi
    hg=$(awk -v k="f${fig}hg.rps" '$1 == k {v = $2} END {print v}' "$results")
    ref=$(awk -v k="f${fig}ref.rps" '$1 == k {v = $2} END {print v}' "$results")
    rec "f${fig}.ratio" "$(awk -v a="$hg" -v b="$ref" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')"
  done
  WALL[$fig]=$((SECONDS - t0))
done

# ---- 3: unique events with one loopback target -----------------------------
if want 3; then
  t0=$SECONDS
  for r in $(seq 1 "$RUNS"); do
    log "figure 3 run $r/$RUNS"
    truncate_all
    curl -sf -X POST "http://127.0.0.1:$T_PORT/reset" >/dev/null
    start_gateway pg "$work/target.toml" true
    snap "$work/b" "$GW"
    load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --duration "$DURATION" \
      --id-prefix "f3_$r" --acked-ids "$work/acked3"
    snap "$work/a" "$GW"
    at_end=$(report)
    acked=$(jq -r .acked_unique "$work/l.json")
    elapsed=$(jq -r .elapsed_s "$work/l.json")
    delivered=$(jq -r .distinct <<<"$at_end")
    record_load f3 "$work/l.json"
    rec f3.delivered_rps "$(awk -v d="$delivered" -v e="$elapsed" 'BEGIN {printf "%.1f", d / e}')"
    rec f3.pending_end "$((acked - delivered))"
    rec f3.deliv_ratio "$(awk -v d="$delivered" -v a="$acked" 'BEGIN {printf "%.3f", (a > 0 ? d / a : 0)}')"
    cpu f3 "$work/b" "$work/a" "$acked"
    td=$SECONDS
    wait_delivered "$acked" || true
    sleep 1 # let a late second copy show up
    rec f3.drain_tail_s "$((SECONDS - td))"
    rec f3.rss "$(rss_mb "$GW")"
    exactly_once "figure 3 run $r" "$(report "$work/acked3")"
    stop "$GW"
    # The stateless forwarder under the same load: delivered/s as the target counts it.
    curl -sf -X POST "http://127.0.0.1:$T_PORT/reset" >/dev/null
    start_forwarder
    snap "$work/b" "$FW"
    load "$work/l.json" "http://127.0.0.1:$FW_PORT/webhooks/stripe" --duration "$DURATION" \
      --id-prefix "f3fw_$r"
    snap "$work/a" "$FW"
    delivered=$(report | jq -r .distinct)
    record_load f3fw "$work/l.json"
    rec f3fw.delivered_rps "$(awk -v d="$delivered" -v e="$(jq -r .elapsed_s "$work/l.json")" \
      'BEGIN {printf "%.1f", d / e}')"
    cpu f3fw "$work/b" "$work/a" "$(jq -r .ok "$work/l.json")"
    rec f3fw.rss "$(rss_mb "$FW")"
    stop "$FW"
    hg=$(awk '$1 == "f3.delivered_rps" {v = $2} END {print v}' "$results")
    fw=$(awk '$1 == "f3fw.delivered_rps" {v = $2} END {print v}' "$results")
    rec f3.fw_ratio "$(awk -v a="$hg" -v b="$fw" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')"
  done
  WALL[3]=$((SECONDS - t0))
fi

# ---- 4: backlog drain -------------------------------------------------------
if want 4; then
  t0=$SECONDS
  log "figure 4: ingesting $DRAIN_N events with delivery off"
  truncate_all
  start_gateway pg "$work/target.toml" false
  load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --count "$DRAIN_N" --duration 0 \
    --id-prefix f4 --acked-ids "$work/acked4"
  stop "$GW"
  n4=$(jq -r .acked_unique "$work/l.json")
  pending=$(q "SELECT count(*) FROM hookgate_deliveries WHERE state = 'pending'")
  [[ $pending == "$n4" ]] || log "note: $pending pending deliveries for $n4 acked events"
  for r in $(seq 1 "$RUNS"); do
    log "figure 4 run $r/$RUNS: draining $n4"
    if ((r > 1)); then # the same backlog again: every delivery pending and due
      reset_deliveries
    fi
    curl -sf -X POST "http://127.0.0.1:$T_PORT/reset" >/dev/null
    snap "$work/b" ""
    start_gateway pg "$work/target.toml" true
    sed -i "s/^srv  *\$/srv $GW 0/" "$work/b"
    wait_delivered "$n4" || true
    snap "$work/a" "$GW"
    rep=$(report "$work/acked4")
    rec f4.rps "$(jq -r 'if .last_ms > .first_ms then .distinct * 1000 / (.last_ms - .first_ms) else 0 end' <<<"$rep")"
    rec f4.rss "$(rss_mb "$GW")"
    cpu f4 "$work/b" "$work/a" "$n4"
    sleep 1
    exactly_once "figure 4 run $r" "$(report "$work/acked4")"
    stop "$GW"
  done
  WALL[4]=$((SECONDS - t0))
fi

# ---- 5: embedded default ----------------------------------------------------
if want 5; then
  t0=$SECONDS
  emb_run() { # KEY dup_share run
    rm -f "$work"/embedded.db*
    start_gateway embedded "$work/plain.toml" true
    snap "$work/b" "$GW"
    load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --duration "$DURATION" \
      --dup-share "$2" --id-prefix "$1_$3"
    snap "$work/a" "$GW"
    rec "$1.rss" "$(rss_mb "$GW")"
    stop "$GW"
    record_load "$1" "$work/l.json"
    cpu "$1" "$work/b" "$work/a" "$(jq -r .ok "$work/l.json")"
  }
  for r in $(seq 1 "$RUNS"); do
    log "figure 5 run $r/$RUNS"
    emb_run f5u 0 "$r"
    emb_run f5d 0.99 "$r"
    # End to end: one target, delivery on, as much ingest as it takes.
    rm -f "$work"/embedded.db*
    curl -sf -X POST "http://127.0.0.1:$T_PORT/reset" >/dev/null
    start_gateway embedded "$work/target.toml" true
    snap "$work/b" "$GW"
    load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --duration "$DURATION" \
      --id-prefix "f5e_$r" --acked-ids "$work/acked5e"
    snap "$work/a" "$GW"
    delivered=$(report | jq -r .distinct)
    acked=$(jq -r .acked_unique "$work/l.json")
    elapsed=$(jq -r .elapsed_s "$work/l.json")
    record_load f5e "$work/l.json"
    rec f5e.delivered_rps "$(awk -v d="$delivered" -v e="$elapsed" 'BEGIN {printf "%.1f", d / e}')"
    rec f5e.deliv_ratio "$(awk -v d="$delivered" -v a="$acked" 'BEGIN {printf "%.3f", (a > 0 ? d / a : 0)}')"
    cpu f5e "$work/b" "$work/a" "$acked"
    rec f5e.rss "$(rss_mb "$GW")"
    wait_delivered "$acked" || true
    sleep 1
    exactly_once "figure 5 end to end run $r" "$(report "$work/acked5e")"
    stop "$GW"
    rm -f "$work"/embedded.db*
    start_gateway embedded "$work/target.toml" false
    load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --count "$EMBED_DRAIN_N" --duration 0 \
      --id-prefix "f5_$r" --acked-ids "$work/acked5"
    stop "$GW"
    n5=$(jq -r .acked_unique "$work/l.json")
    curl -sf -X POST "http://127.0.0.1:$T_PORT/reset" >/dev/null
    start_gateway embedded "$work/target.toml" true
    wait_delivered "$n5" || true
    rep=$(report "$work/acked5")
    rec f5dr.rps "$(jq -r 'if .last_ms > .first_ms then .distinct * 1000 / (.last_ms - .first_ms) else 0 end' <<<"$rep")"
    sleep 1
    exactly_once "figure 5 drain run $r" "$(report "$work/acked5")"
    stop "$GW"
  done
  WALL[5]=$((SECONDS - t0))
fi

# ---- 6: ledger scale (opt-in) -----------------------------------------------
if [[ $SCALE == 1 ]] && want 6; then
  t0=$SECONDS
  log "figure 6: seeding $SCALE_ROWS ledger rows in $SCALE_DB"
  psql "$PGURL/postgres" -XAtqc "CREATE DATABASE $SCALE_DB" >/dev/null
  (cd "$work" && env -u DATABASE_URL -u REDIS_URL HOOKGATE_STORAGE__DATABASE_URL="$PGURL/$SCALE_DB" \
    "$bin/hookgate" -c plain.toml migrate) >>"$work/gateway.log" 2>&1 || die "hookgate migrate failed"
  ts=$SECONDS
  psql "$PGURL/$SCALE_DB" -XAtq -v ON_ERROR_STOP=1 <<SQL >/dev/null || die "seeding failed"
SET synchronous_commit = off;
SET maintenance_work_mem = '256MB';
INSERT INTO hookgate_events (source, event_id, body, body_sha256, headers, received_at, expires_at)
SELECT 'stripe', 'evt_seed_' || lpad(g::text, 10, '0'),
       convert_to('{"id":"evt_seed_' || g || '","object":"event"}', 'UTF8'),
       decode(lpad(to_hex(g), 64, '0'), 'hex'), '[]',
       (extract(epoch FROM now()) * 1000)::bigint - g,
       (extract(epoch FROM now()) * 1000)::bigint + 7 * 86400000 - g
FROM generate_series(1, $SCALE_ROWS) AS g;
VACUUM ANALYZE hookgate_events;
SQL
  log "seeded in $((SECONDS - ts)) s"
  rec f6.seed_s "$((SECONDS - ts))"
  seeded_max=$(psql "$PGURL/$SCALE_DB" -XAtqc "SELECT max(id) FROM hookgate_events")
  scale_run() { # KEY database run
    redis_purge
    start_gateway pg "$work/plain.toml" true "$2"
    snap "$work/b" "$GW"
    load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --duration "$DURATION" \
      --id-prefix "$1_$3"
    snap "$work/a" "$GW"
    rec "$1.rss" "$(rss_mb "$GW")"
    stop "$GW"
    record_load "$1" "$work/l.json"
    cpu "$1" "$work/b" "$work/a" "$(jq -r .ok "$work/l.json")"
    psql "$PGURL/$SCALE_DB" -XAtqc "DELETE FROM hookgate_events WHERE id > $seeded_max" >/dev/null
    truncate_all
  }
  for r in $(seq 1 "$RUNS"); do
    log "figure 6 run $r/$RUNS"
    if ((r % 2)); then scale_run f6big "$SCALE_DB" "$r"; scale_run f6empty "$db" "$r"
    else scale_run f6empty "$db" "$r"; scale_run f6big "$SCALE_DB" "$r"; fi
    a=$(awk '$1 == "f6big.rps" {v = $2} END {print v}' "$results")
    b=$(awk '$1 == "f6empty.rps" {v = $2} END {print v}' "$results")
    rec f6.ratio "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}')"
  done
  WALL[6]=$((SECONDS - t0))
fi

# ---- 7: queue targets (redis-stream, nats) -----------------------------------
# queue_reset KIND: an empty stream (and no resend markers) for the next run
queue_reset() {
  if [[ $1 == redis ]]; then
    redis-cli -u "$REDIS" --scan --pattern "$RS_STREAM*" 2>/dev/null |
      xargs -r -n 1000 redis-cli -u "$REDIS" unlink >/dev/null 2>&1 || true
  else # a new stream: its duplicate window must not remember the last run's ids
    "$bin/queue" delete --url "$NATS" --stream "$JS_STREAM" >/dev/null 2>&1 || true
    JS_MADE=1
    "$bin/queue" create --url "$NATS" --stream "$JS_STREAM" --subject "$JS_SUBJECT.>" ||
      die "cannot create JetStream stream $JS_STREAM"
  fi
}
# queue_figure KIND(redis|nats) KEY
queue_figure() {
  local kind=$1 key=$2 url stream n r rep
  if [[ $kind == redis ]]; then url=$REDIS stream=$RS_STREAM; else url=$NATS stream=$JS_STREAM; fi
  log "figure 7 $kind: ingesting $QUEUE_N events with delivery off"
  truncate_all
  queue_reset "$kind"
  start_gateway pg "$work/q-$kind.toml" false
  load "$work/l.json" "http://127.0.0.1:$GW_PORT/webhooks/stripe" --count "$QUEUE_N" --duration 0 \
    --id-prefix "$key" --acked-ids "$work/acked7"
  stop "$GW"
  n=$(jq -r .acked_unique "$work/l.json")
  for r in $(seq 1 "$RUNS"); do
    log "figure 7 $kind run $r/$RUNS: draining $n into the stream"
    if ((r > 1)); then reset_deliveries; queue_reset "$kind"; fi
    snap "$work/b" ""
    start_gateway pg "$work/q-$kind.toml" true
    sed -i "s/^srv  *\$/srv $GW 0/" "$work/b"
    "$bin/queue" wait --kind "$kind" --url "$url" --stream "$stream" --n "$n" --timeout "$DRAIN_WAIT" \
      >/dev/null || log "figure 7 $kind: drain wait over before $n messages"
    snap "$work/a" "$GW"
    rec "$key.rss" "$(rss_mb "$GW")"
    cpu "$key" "$work/b" "$work/a" "$n"
    sleep 1 # let a late second copy show up
    rep=$("$bin/queue" check --kind "$kind" --url "$url" --stream "$stream" --acked "$work/acked7") ||
      die "figure 7 $kind: reading the stream failed"
    rec "$key.rps" "$(jq -r 'if .span_ms > 0 then .distinct * 1000 / .span_ms else 0 end' <<<"$rep")"
    echo "figure 7 $kind run $r: $(jq -r '"acked \(.acked), in stream \(.messages) messages, \(.distinct) distinct event ids, missing \(.missing), twice \(.duplicates), unknown \(.unexpected)"' <<<"$rep")" \
      >>"$work/exactly_once"
    jq -e --argjson n "$n" '.messages == $n and .distinct == $n and .missing == 0 and .unexpected == 0' \
      <<<"$rep" >/dev/null || EXACT_FAIL=1
    stop "$GW"
  done
}
F7_NATS_SKIP=
if want 7; then
  t0=$SECONDS
  queue_figure redis f7r
  if ! out=$(RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 "$bin/queue" create --url "$NATS" --stream "$JS_STREAM" \
    --subject "$JS_SUBJECT.>" 2>&1); then
    F7_NATS_SKIP="skipped: NATS/JetStream not usable at $NATS ($(head -n 1 <<<"$out" | sed 's/^Error: //'))"
    log "figure 7 nats $F7_NATS_SKIP"
  else
    JS_MADE=1
    queue_figure nats f7n
    "$bin/queue" delete --url "$NATS" --stream "$JS_STREAM" >/dev/null 2>&1 || true
    JS_MADE=0
  fi
  redis-cli -u "$REDIS" --scan --pattern "$RS_STREAM*" 2>/dev/null |
    xargs -r -n 1000 redis-cli -u "$REDIS" unlink >/dev/null 2>&1 || true
  WALL[7]=$((SECONDS - t0))
fi

# ---- 8: a target outage under a steady load ---------------------------------
# deliveries of the stripe source not delivered yet (pending + retrying), from /stats
pending_now() {
  curl -sf -H "Authorization: Bearer bench-admin-token" "http://127.0.0.1:$GW_PORT/stats" |
    jq -r '.sources.stripe | if . then .pending + .retrying else empty end'
}
if want 8; then
  t0=$SECONDS
  calm=$(awk -v r="$OUTAGE_RATE" 'BEGIN {c = int(r / 10); print (c < 10 ? 10 : c)}')
  for r in $(seq 1 "$RUNS"); do
    log "figure 8 run $r/$RUNS: $OUTAGE_RATE events/s, target down ${OUTAGE_S}s"
    truncate_all
    curl -sf -X POST "http://127.0.0.1:$T_PORT/reset" >/dev/null
    start_gateway pg "$work/target.toml" true
    total=$((OUTAGE_LEAD + OUTAGE_S + 20))
    "$bin/loadgen" --url "http://127.0.0.1:$GW_PORT/webhooks/stripe" --secret "$SECRET" \
      --conns 16 --rate "$OUTAGE_RATE" --duration "$total" --body-size "$BODY_SIZE" \
      --id-prefix "f8_$r" --acked-ids "$work/acked8" >"$work/l8.json" &
    LG=$!
    PIDS+=("$LG")
    sleep "$OUTAGE_LEAD"
    curl -sf -X POST "http://127.0.0.1:$T_PORT/down" >/dev/null
    sleep "$OUTAGE_S"
    backlog=$(pending_now)
    t_up=$(date +%s.%N)
    curl -sf -X POST "http://127.0.0.1:$T_PORT/up" >/dev/null
    caught=""
    while kill -0 "$LG" 2>/dev/null; do
      p=$(pending_now)
      if [[ -n $p ]] && ((p <= calm)); then
        caught=$(awk -v a="$t_up" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'); break
      fi
      sleep 0.1
    done
    wait "$LG" || die "loadgen failed: $(cat "$work/l8.json")"
    keep=(); for p in "${PIDS[@]}"; do [[ $p == "$LG" ]] || keep+=("$p"); done; PIDS=("${keep[@]}")
    rec f8.backlog "${backlog:-0}"
    [[ -n $caught ]] && rec f8.catchup_s "$caught" || log "figure 8 run $r: not caught up before the load ended"
    rec f8.non2xx "$(jq -r '([.non_2xx[]] | add // 0) + .errors' "$work/l8.json")"
    wait_delivered "$(jq -r .acked_unique "$work/l8.json")" || true
    sleep 1
    exactly_once "figure 8 run $r" "$(report "$work/acked8")"
    stop "$GW"
  done
  WALL[8]=$((SECONDS - t0))
fi

# ---- table -----------------------------------------------------------------
med() { # KEY [printf format] -> median of the recorded values, or "-"
  local v
  v=$(awk -v k="$1" '$1 == k {print $2}' "$results" | sort -g |
    awk '{a[NR] = $1} END {if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}')
  if [[ -z $v ]]; then echo "-"; else printf "${2:-%.0f}" "$v"; fi
}
cpus() { echo "$(med "$1.cpu_srv" %.0f)/$(med "$1.cpu_pg" %.0f)/$(med "$1.cpu_redis" %.0f)"; }
# quiet KEY [KEY2]: median % of the machine used outside the bench (hookgate/other run)
quiet() { if [[ -n ${2:-} ]]; then echo "$(med "$1.quiet")/$(med "$2.quiet")"; else med "$1.quiet"; fi; }
# the goals of issue 38, judged on the median of three whole runs
row() { printf '%-40s %-14s %-14s %-6s %-16s %-14s %-14s %-11s %s\n' "$@"; }
{
  echo
  echo "hookgate bench $(date -u +%Y-%m-%d), $(nproc) cores, runs=$RUNS duration=${DURATION}s conns=$CONNS body=${BODY_SIZE}B target concurrency=${TARGET_CONC:-default} (medians)"
  row "figure" "hookgate" "reference" "ratio" "goal" "hg cpu µs/ev" "ref cpu µs/ev" "RSS MB" "quiet %"
  row "" "" "" "" "" "gw/pg/redis" "srv/pg/redis" "hg/ref" "hg/ref"
  if want 1; then
    row "1 unique, no targets: events/s" "$(med f1hg.rps)" "$(med f1ref.rps)" "$(med f1.ratio %.2f)" "ratio ≥ 0.75" \
      "$(cpus f1hg)" "$(cpus f1ref)" "$(med f1hg.rss)/$(med f1ref.rss)" "$(quiet f1hg f1ref)"
    row "  p50 / p99 ms" "$(med f1hg.p50 %.1f) / $(med f1hg.p99 %.1f)" "$(med f1ref.p50 %.1f) / $(med f1ref.p99 %.1f)" "" "p99 < 10"
    row "  ledger writer busy (share of load)" "$(med f1hg.busy %.2f)"
  fi
  if want 2; then
    row "2 99% retries: events/s" "$(med f2hg.rps)" "$(med f2ref.rps)" "$(med f2.ratio %.2f)" "ratio ≥ 0.85" \
      "$(cpus f2hg)" "$(cpus f2ref)" "$(med f2hg.rss)/$(med f2ref.rss)" "$(quiet f2hg f2ref)"
    row "  p99 ms" "$(med f2hg.p99 %.1f)" "$(med f2ref.p99 %.1f)" "" "p99 < 10"
  fi
  if want 3; then
    row "3 unique + 1 target: ingest events/s" "$(med f3.rps)" "-" "-" "≥ 10000" "$(cpus f3)" "-" "$(med f3.rss)/-" "$(quiet f3)"
    row "  ingest p99 ms" "$(med f3.p99 %.1f)"
    row "  delivered events/s (ratio: /acked)" "$(med f3.delivered_rps)" "-" "$(med f3.deliv_ratio %.2f)" "ratio ≥ 0.95"
    row "  backlog at end of load / drain s" "$(med f3.pending_end) / $(med f3.drain_tail_s)" "" "" "no growth"
    row "  vs stateless forwarder: delivered/s" "$(med f3.delivered_rps)" "$(med f3fw.delivered_rps)" "$(med f3.fw_ratio %.2f)" \
      "ratio ≥ 0.6 *" "$(cpus f3)" "$(cpus f3fw)" "$(med f3.rss)/$(med f3fw.rss)" "$(quiet f3 f3fw)"
    row "  forwarder acked/s, p99 ms" "" "$(med f3fw.rps) / $(med f3fw.p99 %.1f)"
  fi
  want 4 && row "4 drain $DRAIN_N backlog: deliveries/s" "$(med f4.rps)" "-" "-" "≥ 15000" "$(cpus f4)" "-" "$(med f4.rss)/-" "$(quiet f4)"
  if want 5; then
    row "5 embedded unique: events/s" "$(med f5u.rps)" "-" "-" "" "$(cpus f5u)" "-" "$(med f5u.rss)/-" "$(quiet f5u)"
    row "  p50 / p99 ms" "$(med f5u.p50 %.1f) / $(med f5u.p99 %.1f)"
    row "  embedded 99% retries: events/s" "$(med f5d.rps)" "-" "-" "" "$(cpus f5d)" "-" "$(med f5d.rss)/-" "$(quiet f5d)"
    row "  p99 ms" "$(med f5d.p99 %.1f)"
    row "  embedded + 1 target: acked/s" "$(med f5e.rps)" "-" "-" "" "$(cpus f5e)" "-" "$(med f5e.rss)/-" "$(quiet f5e)"
    row "    delivered/s (ratio: /acked)" "$(med f5e.delivered_rps)" "-" "$(med f5e.deliv_ratio %.2f)" "ratio ≥ 0.9"
    row "  embedded drain $EMBED_DRAIN_N: deliveries/s" "$(med f5dr.rps)" "-" "-" "≥ 8000"
  fi
  if ! want 6; then
    :
  elif [[ $SCALE == 1 ]]; then
    row "6 unique, $SCALE_ROWS ids vs empty" "$(med f6big.rps)" "$(med f6empty.rps)" "$(med f6.ratio %.2f)" "" \
      "$(cpus f6big)" "$(cpus f6empty)" "$(med f6big.rss)/$(med f6empty.rss)" "$(quiet f6big f6empty)"
    row "  p99 ms (reference column: empty)" "$(med f6big.p99 %.1f)" "$(med f6empty.p99 %.1f)"
  else
    row "6 ledger scale" "(SCALE=1)"
  fi
  if want 7; then
    row "7 queue targets, drain: events/s"
    if want 4; then
      row "  http (figure 4, $DRAIN_N)" "$(med f4.rps)" "-" "-" "" "$(cpus f4)" "-" "$(med f4.rss)/-" "$(quiet f4)"
    else
      row "  http (figure 4)" "(not in FIGURES)"
    fi
    row "  redis-stream ($QUEUE_N)" "$(med f7r.rps)" "-" "-" "" "$(cpus f7r)" "-" "$(med f7r.rss)/-" "$(quiet f7r)"
    if [[ -n $F7_NATS_SKIP ]]; then
      row "  nats JetStream" "$F7_NATS_SKIP"
    else
      row "  nats JetStream ($QUEUE_N)" "$(med f7n.rps)" "-" "-" "" "$(cpus f7n)" "-" "$(med f7n.rss)/-" "$(quiet f7n)"
    fi
  fi
  if want 8; then
    row "8 target down ${OUTAGE_S}s at $OUTAGE_RATE/s: backlog" "$(med f8.backlog)"
    row "  caught up s after it returns" "$(med f8.catchup_s %.1f)"
  fi
  want 3 && echo "* stretch goal. quiet %: share of all cores used outside the bench during the measured window"
  fails=0
  for k in f1hg f1ref f2hg f2ref f3 f3fw f5u f5d f5e f6big f6empty f8; do
    n=$(awk -v k="$k.non2xx" '$1 == k {s += $2} END {print s + 0}' "$results"); fails=$((fails + n))
  done
  echo "non-2xx or failed requests over all loads: $fails"
  echo "exactly-once ($([[ $EXACT_FAIL == 0 ]] && echo PASS || echo FAIL)):"
  sed 's/^/  /' "$work/exactly_once"
  walls="wall s:"
  for k in 1 2 3 4 5 6 7 8; do [[ -n ${WALL[$k]:-} ]] && walls+=" f$k=${WALL[$k]}"; done
  echo "$walls total=$SECONDS"
} | tee "$work/table"
cp "$work/table" "$root/bench/last-run.txt" 2>/dev/null || true
[[ $EXACT_FAIL == 0 ]]
