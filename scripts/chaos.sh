#!/usr/bin/env bash
# The chaos harness (docs/reliability.md): hookgate replicas on their own
# throwaway PostgreSQL cluster and Redis, under a steady mixed load, with a
# seeded random fault schedule, then an independent audit of every
# acknowledged event. Loopback only; bounded in time.
#
#   scripts/chaos.sh --profile short|long [--seed N] [--minutes M]
#                    [--replicas 2|3] [--resume-max S] [--out DIR]
#                    [--faults K,K] [--pg-standby none|async|sync]
#                    [--redis single|sentinel] [--backend production|embedded]
#                    [--partition]
#
#   --profile short   ~2 minutes of load, 5 faults (one of each main kind; 6 with
#                     --redis sentinel); CI runs it with --redis sentinel
#   --profile long    --minutes of load (default 30), ~4 faults a minute, overlapping
#   --seed N          the fault schedule and the load's choices (printed; replay with it)
#   --minutes M       minutes of load (short: 1.5)
#   --replicas R      hookgate replicas (default 3)
#   --resume-max S    longest allowed kill -9 → resumed delivery (default 15: a dead
#                     process's leases run out after delivery.lease, 10 s)
#   --rate R          requests per second of load (default 40)
#   --out DIR         where the verdict, the fault log and the logs are kept
#                     (default target/chaos/<seed>)
#   --faults K,K      the fault kinds drawn (short: the plan, in this order);
#                     default: the profile's
#   --pg-standby M    async|sync: a streaming standby made with pg_basebackup,
#                     reached through HAProxy; enables the pg-failover fault
#   --redis sentinel  storage Redis as master + replica + redis-sentinel;
#                     enables the sentinel-failover fault
#   --backend embedded  one replica on SQLite on a small tmpfs (no Redis);
#                     enables the disk-full fault (e.g. --faults disk-full)
#   --partition       replica r1 runs in its own network namespace, reaching
#                     PostgreSQL, Redis and the targets over one veth link
#                     each (and the load over a fourth); enables the
#                     partition fault (a link taken down)
#
# Installs what is missing from Debian packages (PostgreSQL, Redis, NATS,
# libfaketime, jq, curl, iproute2; redis-sentinel, haproxy, socat when the
# options need them). Builds hookgate and the bench crate's
# `chaos` and `queue` binaries (debug profile, the CI's build). Starts, and at
# the end (also on failure or Ctrl-C) stops by PID, only what it started: a
# PostgreSQL cluster under a temp dir (never the shared :5432 one), two
# redis-servers (storage; the stream target), a nats-server with JetStream,
# two HTTP targets, the replicas, the load. Exit 0 only when every audit
# check passes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

PROFILE=short SEED="" MINUTES="" REPLICAS=3 RESUME_MAX=15 RATE=40 OUT=""
FAULTS="" PG_STANDBY=none REDIS_MODE=single BACKEND=production PARTITION=0
while (($#)); do
  case $1 in
    --profile) PROFILE=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --minutes) MINUTES=$2; shift 2 ;;
    --replicas) REPLICAS=$2; shift 2 ;;
    --resume-max) RESUME_MAX=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --faults) FAULTS=$2; shift 2 ;;
    --pg-standby) PG_STANDBY=$2; shift 2 ;;
    --redis) REDIS_MODE=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --partition) PARTITION=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $PROFILE in
  short) MINUTES=${MINUTES:-1.5} ;;
  long) MINUTES=${MINUTES:-30} ;;
  *) echo "chaos: --profile short|long" >&2; exit 2 ;;
esac
[[ $PG_STANDBY =~ ^(none|async|sync)$ ]] || { echo "chaos: --pg-standby none|async|sync" >&2; exit 2; }
[[ $REDIS_MODE =~ ^(single|sentinel)$ ]] || { echo "chaos: --redis single|sentinel" >&2; exit 2; }
[[ $BACKEND =~ ^(production|embedded)$ ]] || { echo "chaos: --backend production|embedded" >&2; exit 2; }
if [[ $BACKEND == embedded ]]; then
  REPLICAS=1 # one process owns a SQLite file
  [[ $PG_STANDBY == none && $REDIS_MODE == single ]] ||
    { echo "chaos: --backend embedded has no PostgreSQL standby or Redis" >&2; exit 2; }
else
  [[ $REPLICAS =~ ^[23]$ ]] || { echo "chaos: --replicas 2 or 3" >&2; exit 2; }
fi
if ((PARTITION)); then
  # The sentinel names its master by a loopback address, which the
  # namespace cannot reach; SQLite has no network.
  [[ $BACKEND == production && $REDIS_MODE == single ]] ||
    { echo "chaos: --partition needs --backend production and --redis single" >&2; exit 2; }
fi
SEED=${SEED:-$(( (RANDOM << 15) | RANDOM ))}
LOAD_SECS=$(awk -v m="$MINUTES" 'BEGIN {printf "%d", m * 60}')
OUT=${OUT:-$root/target/chaos/$SEED}

log() { echo "chaos: $(date -u +%T) $*" >&2; }
die() { log "$*"; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# PostgreSQL refuses to run as root: its cluster runs as user postgres then.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
now_ms() { date +%s%3N; }

# ---- what it needs --------------------------------------------------------
export PATH="$PATH:/usr/sbin"
missing=()
ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v redis-cli >/dev/null || missing+=(redis-tools)
command -v nats-server >/dev/null || missing+=(nats-server)
command -v jq >/dev/null || missing+=(jq)
command -v curl >/dev/null || missing+=(curl)
command -v ss >/dev/null || missing+=(iproute2)
command -v flock >/dev/null || missing+=(util-linux)
[[ $REDIS_MODE == sentinel ]] && ! command -v redis-sentinel >/dev/null && missing+=(redis-sentinel)
[[ $PG_STANDBY != none ]] && ! command -v haproxy >/dev/null && missing+=(haproxy)
[[ $PG_STANDBY != none || $PARTITION == 1 ]] && ! command -v socat >/dev/null && missing+=(socat)
FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1 || true)
[[ -n $FAKETIME_LIB ]] || missing+=(libfaketime)
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1 || true)
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
SKIP=""
[[ $PG_STANDBY == none ]] && SKIP+="pg-failover,"
((PARTITION)) || SKIP+="partition,"
[[ $REDIS_MODE == single ]] && SKIP+="sentinel-failover,"
if [[ $BACKEND == embedded ]]; then
  # No PostgreSQL, no Redis, a single process: only the faults that apply.
  SKIP+="redis-restart,pg-restart,rolling,"
else
  SKIP+="disk-full,"
fi
[[ -n $FAKETIME_LIB ]] || { SKIP+="clock-step,"; log "libfaketime missing: no clock steps"; }

log "building (cargo build --locked: hookgate, bench chaos + queue; debug profile)"
cargo build --locked -q -p hookgate --bin hookgate
cargo build --locked -q -p hookgate-bench --bin chaos --bin queue

# ---- state and cleanup ----------------------------------------------------
work=$(mktemp -d /tmp/hg-chaos.XXXXXX)
chmod 755 "$work"
# The run uses its own copy of the binaries: a rebuild during a long run
# must not mix versions when a replica is restarted.
mkdir -p "$work/bin"
cp "$root/target/debug/hookgate" "$root/target/debug/chaos" "$root/target/debug/queue" "$work/bin/"
bin=$work/bin
PIDS=()         # long-lived helpers (targets, nats, load, sampler)
FAULT_PIDS=()   # fault subshells
PGDATA=$work/pg
PG_STARTED=0
DISK_MOUNTED=0
NETNS_MADE=0
NETNS=""
DONE=0

kill_pid() { # pid: TERM, up to 5 s, then KILL
  local p=$1
  [[ -n $p ]] || return 0
  kill -TERM "$p" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null || true
}
cleanup() {
  local st=$?
  trap - EXIT INT TERM
  ((DONE)) || log "stopping everything this run started (exit $st)"
  for p in "${FAULT_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for f in "$work"/r*.pid "$work"/redis*.pid; do
    [[ -f $f ]] && kill_pid "$(cat "$f")"
  done
  for p in "${PIDS[@]}"; do kill_pid "$p"; done
  if ((PG_STARTED)); then
    for d in "$work"/pg "$work"/pg-a "$work"/pg-b; do
      [[ -f $d/postmaster.pid ]] && { as_pg "$PGBIN/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1 || true; }
    done
  fi
  [[ -f $work/haproxy.pid ]] && kill_pid "$(cat "$work/haproxy.pid")"
  # Deleting the namespace deletes its veth ends, and with them their peers.
  ((NETNS_MADE)) && { as_root ip netns del "$NETNS" 2>/dev/null || true; }
  if ((DISK_MOUNTED)); then
    as_root umount "$work/disk" 2>/dev/null || as_root umount -l "$work/disk" 2>/dev/null || true
  fi
  mkdir -p "$OUT"
  cp "$work"/*.jsonl "$work"/*.log "$work"/schedule "$work"/verdict.md "$OUT"/ 2>/dev/null || true
  rm -rf "$work"
  if ((st != 0)); then
    log "FAILED: seed $SEED; replay: scripts/chaos.sh --profile $PROFILE --seed $SEED --minutes $MINUTES --rate $RATE --replicas $REPLICAS${FAULTS:+ --faults $FAULTS} --pg-standby $PG_STANDBY --redis $REDIS_MODE --backend $BACKEND$( ((PARTITION)) && echo " --partition"); logs in $OUT"
  fi
  exit "$st"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 20000))
    [[ -z $(ss -Htln "sport = :$p") && " ${USED_PORTS:-} " != *" $p "* ]] && { USED_PORTS+=" $p"; echo "$p"; return; }
  done
  die "no free port"
}
USED_PORTS=""
PGPORT=$(free_port); USED_PORTS+=" $PGPORT"
RPORT=$(free_port); USED_PORTS+=" $RPORT"
PGPORT_a=$(free_port); USED_PORTS+=" $PGPORT_a"
PGPORT_b=$(free_port); USED_PORTS+=" $PGPORT_b"
RPORT_b=$(free_port); USED_PORTS+=" $RPORT_b"
SPORT=$(free_port); USED_PORTS+=" $SPORT"
RTPORT=$(free_port); USED_PORTS+=" $RTPORT"
NPORT=$(free_port); USED_PORTS+=" $NPORT"
TPORT_plain=$(free_port); USED_PORTS+=" $TPORT_plain"
TPORT_ordered=$(free_port); USED_PORTS+=" $TPORT_ordered"
declare -a RP
for i in $(seq 1 "$REPLICAS"); do RP[i]=$(free_port); USED_PORTS+=" ${RP[i]}"; done
SECRET="whsec_chaos_$SEED"
ADMIN="chaos-admin-token-$SEED-0000"
DB=hookgate
PREFIX="chaos$SEED"

wait_tcp() { # port seconds name
  for _ in $(seq 1 $(($2 * 10))); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  die "$3 not listening on $1 after $2 s"
}

# ---- PostgreSQL: its own cluster (and its standby) ------------------------
# Without a standby the cluster is $work/pg on $PGPORT. With one, the two
# clusters are $work/pg-a and $work/pg-b on their own ports, $work/pg.primary
# names the primary (a or b), and HAProxy on $PGPORT forwards to it: the
# replicas only ever know $PGPORT, as behind a production proxy.
pg_dir() { if [[ $PG_STANDBY == none ]]; then echo "$work/pg"; else echo "$work/pg-$(cat "$work/pg.primary")"; fi; }
pg_port() { if [[ $PG_STANDBY == none ]]; then echo "$PGPORT"; else local v=PGPORT_$(cat "$work/pg.primary"); echo "${!v}"; fi; }
pg_start_dir() { # dir port
  local lg; lg=$work/$(basename "$1").log
  [[ $(id -u) == 0 ]] && touch "$lg" && chown postgres: "$lg"
  as_pg "$PGBIN/pg_ctl" -D "$1" -l "$lg" -w -t 60 \
    -o "-p $2 -c listen_addresses=127.0.0.1 -c unix_socket_directories=$work/pgsock -c max_connections=200" \
    start >/dev/null 9>&-
}
pg_start() { pg_start_dir "$(pg_dir)" "$(pg_port)"; }
pg_sql() { psql -h 127.0.0.1 -p "$1" -U postgres -XAtqc "$2"; }
pg_make_standby() { # new from: $work/pg-<new> becomes a streaming standby of <from>
  local d=$work/pg-$1 fp=PGPORT_$2 np=PGPORT_$1
  rm -rf "$d"
  mkdir -m 700 "$d"
  [[ $(id -u) == 0 ]] && chown postgres: "$d"
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "${!fp}" -U postgres -D "$d" -R -X stream -c fast
  # The standby's name is what synchronous_standby_names waits for.
  echo "primary_conninfo = 'host=127.0.0.1 port=${!fp} user=postgres application_name=hgstandby'" \
    >>"$d/postgresql.auto.conf"
  pg_start_dir "$d" "${!np}"
  if [[ $PG_STANDBY == sync ]]; then
    pg_sql "${!fp}" "ALTER SYSTEM SET synchronous_standby_names = 'hgstandby'" >/dev/null
    pg_sql "${!fp}" "SELECT pg_reload_conf()" >/dev/null
  fi
  for _ in $(seq 1 300); do
    [[ $(pg_sql "${!fp}" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null) == 1 ]] && return 0
    sleep 0.2
  done
  die "standby pg-$1 is not streaming from pg-$2 after 60 s"
}
haproxy_cmd() { echo "$1" | socat stdio "unix-connect:$work/haproxy.sock" >/dev/null; }
mkdir -p "$work/pgsock"
[[ $(id -u) == 0 ]] && chown postgres: "$work/pgsock"
if [[ $BACKEND == embedded ]]; then
  log "embedded backend: no PostgreSQL"
elif [[ $PG_STANDBY == none ]]; then
  mkdir -p "$PGDATA"
  [[ $(id -u) == 0 ]] && chown postgres: "$PGDATA"
  as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 >/dev/null
  PG_STARTED=1
  pg_start
  pg_sql "$PGPORT" "CREATE DATABASE $DB" >/dev/null
  log "PostgreSQL cluster on 127.0.0.1:$PGPORT ($PGBIN)"
else
  echo a >"$work/pg.primary"
  mkdir -p "$work/pg-a"
  [[ $(id -u) == 0 ]] && chown postgres: "$work/pg-a"
  as_pg "$PGBIN/initdb" -D "$work/pg-a" -U postgres --auth=trust -E UTF8 >/dev/null
  PG_STARTED=1
  pg_start
  pg_sql "$PGPORT_a" "CREATE DATABASE $DB" >/dev/null
  pg_make_standby b a
  cat >"$work/haproxy.cfg" <<CFG
global
  stats socket $work/haproxy.sock mode 600 level admin
defaults
  mode tcp
  timeout connect 2s
  timeout client 10m
  timeout server 10m
frontend pg
  bind 127.0.0.1:$PGPORT
  default_backend pg
backend pg
  server a 127.0.0.1:$PGPORT_a
  server b 127.0.0.1:$PGPORT_b disabled
CFG
  haproxy -db -f "$work/haproxy.cfg" >>"$work/haproxy.log" 2>&1 9>&- &
  echo $! >"$work/haproxy.pid"
  disown $!
  wait_tcp "$PGPORT" 20 haproxy
  log "PostgreSQL primary :$PGPORT_a, $PG_STANDBY standby :$PGPORT_b (pg_basebackup), HAProxy on :$PGPORT"
fi

# ---- Redis (storage), Redis (stream target), NATS --------------------------
redis_start() { # name port [redis-server args]: starts it empty
  local name=$1 port=$2; shift 2
  # Its own directory, emptied: a replica's full sync writes dump.rdb there
  # (even with --save ""), and a redis-server loads a dump.rdb it finds at
  # start, so a node restarted "empty" would come back with old keys (and a
  # later run in the same directory with this one's).
  rm -rf "$work/$name.d"
  mkdir -p "$work/$name.d"
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --daemonize no \
    --dir "$work/$name.d" "$@" \
    >>"$work/$name.log" 2>&1 9>&- &
  echo $! >"$work/$name.pid"
  disown $!
  wait_tcp "$port" 20 "$name"
}
# With --redis sentinel: redis-a ($RPORT) and redis-b ($RPORT_b), one the
# master and the other its replica, watched by one redis-sentinel (quorum 1).
sentinel_master() { redis-cli -p "$SPORT" SENTINEL GET-MASTER-ADDR-BY-NAME hg 2>/dev/null | tail -n 1; }
redis_node() { if [[ $1 == "$RPORT" ]]; then echo redis-a; else echo redis-b; fi; }
REDIS_URL="redis://127.0.0.1:$RPORT"
if [[ $BACKEND == embedded ]]; then
  :
elif [[ $REDIS_MODE == single ]]; then
  redis_start redis "$RPORT"
else
  redis_start redis-a "$RPORT"
  redis_start redis-b "$RPORT_b" --replicaof 127.0.0.1 "$RPORT"
  cat >"$work/sentinel.conf" <<CFG
bind 127.0.0.1
port $SPORT
sentinel monitor hg 127.0.0.1 $RPORT 1
sentinel down-after-milliseconds hg 1000
sentinel failover-timeout hg 3000
sentinel parallel-syncs hg 1
CFG
  redis-sentinel "$work/sentinel.conf" >>"$work/redis-sentinel.log" 2>&1 9>&- &
  echo $! >"$work/redis-sentinel.pid"
  disown $!
  wait_tcp "$SPORT" 20 redis-sentinel
  for _ in $(seq 1 200); do
    redis-cli -p "$SPORT" SENTINEL REPLICAS hg 2>/dev/null | grep -qx "$RPORT_b" && break
    sleep 0.1
  done
  redis-cli -p "$SPORT" SENTINEL REPLICAS hg | grep -qx "$RPORT_b" || die "the sentinel does not see the replica"
  REDIS_URL="redis+sentinel://127.0.0.1:$SPORT/hg"
  log "Redis master :$RPORT, replica :$RPORT_b, sentinel :$SPORT"
fi
redis_start redis-target "$RTPORT"
mkdir -p "$work/nats"
nats-server -a 127.0.0.1 -p "$NPORT" -js -sd "$work/nats" >>"$work/nats.log" 2>&1 &
PIDS+=($!)
wait_tcp "$NPORT" 20 nats-server
NATS_URL="nats://127.0.0.1:$NPORT"
JS_STREAM="CHAOS_$SEED"
for _ in $(seq 1 50); do
  "$bin/queue" create --url "$NATS_URL" --stream "$JS_STREAM" --subject "chaos.>" 2>/dev/null && break
  sleep 0.2
done

# ---- HTTP targets -----------------------------------------------------------
for t in plain ordered; do
  port_var=TPORT_$t
  "$bin/chaos" target --listen "127.0.0.1:${!port_var}" --log "$work/t-$t.jsonl" >>"$work/target-$t.log" 2>&1 &
  PIDS+=($!)
  wait_tcp "${!port_var}" 20 "target $t"
done
target_mode() { curl -sf -X POST "http://127.0.0.1:$1/mode/$2" >/dev/null || true; }

# ---- the partitioned replica's network (--partition) ----------------------
# r1 lives in network namespace hgc<pid>. Link j (0: PostgreSQL, 1: Redis,
# 2: the targets, 3: the load) is a veth pair, host end 10.213.(N+j).1, r1's
# end .2; on the host a socat per service forwards the host end's address to
# the loopback service. Taking a host end down partitions r1 from that
# dependency alone (packets dropped, as in a real partition; no RST).
declare -a RH VETH
for i in $(seq 1 "$REPLICAS"); do RH[i]=127.0.0.1; done
if ((PARTITION)); then
  NETNS=hgc$$
  N=$((($$ % 60) * 4))
  as_root ip netns add "$NETNS"
  NETNS_MADE=1
  as_root ip netns exec "$NETNS" ip link set lo up
  for j in 0 1 2 3; do
    VETH[j]=hgc$$h$j
    as_root ip link add "${VETH[j]}" type veth peer name "hgc$$n$j"
    as_root ip link set "hgc$$n$j" netns "$NETNS"
    as_root ip addr add "10.213.$((N + j)).1/30" dev "${VETH[j]}"
    as_root ip link set "${VETH[j]}" up
    as_root ip netns exec "$NETNS" ip addr add "10.213.$((N + j)).2/30" dev "hgc$$n$j"
    as_root ip netns exec "$NETNS" ip link set "hgc$$n$j" up
  done
  fwd() { # link port: host end of link j, port → 127.0.0.1:port
    socat "TCP-LISTEN:$2,bind=10.213.$((N + $1)).1,fork,reuseaddr" "TCP:127.0.0.1:$2" 9>&- &
    PIDS+=($!)
  }
  fwd 0 "$PGPORT"
  fwd 1 "$RPORT"
  for p in "$TPORT_plain" "$TPORT_ordered" "$RTPORT" "$NPORT"; do fwd 2 "$p"; done
  RH[1]=10.213.$((N + 3)).2
  log "r1 in network namespace $NETNS (links ${VETH[*]}: PostgreSQL, Redis, targets, load)"
fi

# ---- replicas ---------------------------------------------------------------
if [[ $BACKEND == embedded ]]; then
  # A small tmpfs of its own under the SQLite file, so disk-full fills
  # it and nothing else.
  mkdir -p "$work/disk"
  as_root mount -t tmpfs -o size=64m,mode=755 tmpfs "$work/disk"
  DISK_MOUNTED=1
  STORAGE_LINES="database_url = \"sqlite://$work/disk/hookgate.db\""
else
  STORAGE_LINES="database_url = \"postgres://postgres@127.0.0.1:$PGPORT/$DB\"
redis_url = \"$REDIS_URL\""
fi
for i in $(seq 1 "$REPLICAS"); do
  echo "+0" >"$work/r$i.faketime"
  cat >"$work/r$i.toml" <<TOML
[server]
listen = "${RH[i]}:${RP[i]}"
admin_token = "$ADMIN"
log_level = "warn"
shutdown_grace = "5s"

[storage]
$STORAGE_LINES
key_prefix = "$PREFIX"

[delivery]
backoff_base = "200ms"
backoff_max = "2s"

[sources.stripe]
provider = "stripe"
secrets = ["$SECRET"]
tolerance = "5m"
targets = ["plain", "ordered", "stream", "bus"]

[targets.plain]
url = "http://127.0.0.1:$TPORT_plain/hook"
timeout = "3s"

[targets.ordered]
url = "http://127.0.0.1:$TPORT_ordered/hook"
timeout = "3s"
order_by = "json:/data/object/key"

[targets.stream]
kind = "redis-stream"
url = "redis://127.0.0.1:$RTPORT"
stream = "chaos:{source}"

[targets.bus]
kind = "nats"
url = "$NATS_URL"
subject = "chaos.{source}"
TOML
done
if ((PARTITION)); then
  sed -i -e "s/127\.0\.0\.1:$PGPORT\b/10.213.$N.1:$PGPORT/" \
    -e "s/127\.0\.0\.1:$RPORT\b/10.213.$((N + 1)).1:$RPORT/" \
    -e "s/127\.0\.0\.1:\($TPORT_plain\|$TPORT_ordered\|$RTPORT\|$NPORT\)\b/10.213.$((N + 2)).1:\1/" \
    "$work/r1.toml"
fi
start_replica() { # i: starts it; a start that fails (its database is down
  # in another fault) is tried again, for up to 2 minutes
  local i=$1 pre=() try ns=()
  # (ip netns exec execs the command: $! stays the replica's PID)
  if ((PARTITION && i == 1)); then
    ns=(ip netns exec "$NETNS")
    [[ $(id -u) == 0 ]] || ns=(sudo "${ns[@]}")
  fi
  # libfaketime on this process only; its offset file is re-read every
  # second, so a clock step needs no restart. Monotonic time is left alone.
  [[ -n $FAKETIME_LIB ]] && pre=(LD_PRELOAD="$FAKETIME_LIB" FAKETIME_TIMESTAMP_FILE="$work/r$i.faketime"
    FAKETIME_CACHE_DURATION=1 FAKETIME_DONT_FAKE_MONOTONIC=1)
  for try in $(seq 1 40); do
    "${ns[@]}" env -u DATABASE_URL -u REDIS_URL -u RUST_LOG "${pre[@]}" \
      "$bin/hookgate" -c "$work/r$i.toml" serve >>"$work/r$i.log" 2>&1 9>&- &
    echo $! >"$work/r$i.pid"
    disown $!
    for _ in $(seq 1 600); do
      curl -sf "http://${RH[i]}:${RP[i]}/healthz" >/dev/null 2>&1 && return 0
      kill -0 "$(cat "$work/r$i.pid")" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$(cat "$work/r$i.pid")" 2>/dev/null && die "replica r$i not healthy after 60 s"
    log "replica r$i exited during start (try $try): $(tail -n 1 "$work/r$i.log")"
    sleep 3
  done
  die "replica r$i did not start in 40 tries"
}
for i in $(seq 1 "$REPLICAS"); do start_replica "$i"; done
log "$REPLICAS replicas up (debug build): ports ${RP[*]}"

# ---- faults -------------------------------------------------------------------
# fault_log kind arg start_ms: one line per fault when it ends.
fault_log() { echo "{\"kind\":\"$1\",\"arg\":\"$2\",\"start\":$3,\"end\":$(now_ms)}" >>"$work/faults.jsonl"; }
# (What a fault starts closes fd 9, or it would hold the lock for its life.)
locked() { # name cmd...: one fault at a time per resource (faults on others overlap)
  local name=$1; shift
  (flock 9; "$@") 9>"$work/lock.$name"
}
stop_wait() { # pid secs: true when it exited in time
  for _ in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}
f_kill9() { # rN dur_ms
  local i=${1#r} t; t=$(now_ms)
  kill -KILL "$(cat "$work/r$i.pid")" 2>/dev/null || true
  log "fault: kill -9 r$i (back in $(($2 / 1000)) s)"
  sleep "$(($2 / 1000))"
  start_replica "$i"
  fault_log kill9 "r$i" "$t"
}
f_rolling() {
  local t; t=$(now_ms)
  log "fault: rolling SIGTERM restart of all replicas"
  for i in $(seq 1 "$REPLICAS"); do
    (
      flock 9
      local p; p=$(cat "$work/r$i.pid")
      kill -TERM "$p" 2>/dev/null || true
      stop_wait "$p" 20 || { log "r$i did not stop within 20 s of SIGTERM: killed"; kill -KILL "$p" 2>/dev/null || true; }
      start_replica "$i"
    ) 9>"$work/lock.r$i"
  done
  fault_log rolling - "$t"
}
f_redis_restart() { # dur_ms
  local t m o; t=$(now_ms)
  if [[ $REDIS_MODE == single ]]; then
    kill -KILL "$(cat "$work/redis.pid")" 2>/dev/null || true
    log "fault: Redis killed, back empty in $(($1 / 1000)) s"
    sleep "$(($1 / 1000))"
    redis_start redis "$RPORT"
  else
    # Both nodes at once: nothing to fail over to; back empty as they were.
    m=$(sentinel_master)
    o=$RPORT; [[ $m == "$RPORT" ]] && o=$RPORT_b
    kill -KILL "$(cat "$work/redis-a.pid")" "$(cat "$work/redis-b.pid")" 2>/dev/null || true
    log "fault: Redis master :$m and replica :$o killed, back empty in $(($1 / 1000)) s"
    sleep "$(($1 / 1000))"
    redis_start "$(redis_node "$m")" "$m"
    redis_start "$(redis_node "$o")" "$o" --replicaof 127.0.0.1 "$m"
  fi
  fault_log redis-restart - "$t"
}
f_sentinel_failover() { # dur_ms: the master is killed, the sentinel promotes the replica
  local t m n; t=$(now_ms)
  m=$(sentinel_master)
  kill -KILL "$(cat "$work/$(redis_node "$m").pid")" 2>/dev/null || true
  log "fault: Redis master :$m killed; sentinel failover"
  for _ in $(seq 1 300); do
    n=$(sentinel_master)
    [[ -n $n && $n != "$m" ]] && break
    sleep 0.1
  done
  [[ -n $n && $n != "$m" ]] || die "the sentinel did not promote the replica within 30 s"
  log "sentinel: :$n is master; the old master returns empty as its replica in $(($1 / 1000)) s"
  sleep "$(($1 / 1000))"
  redis_start "$(redis_node "$m")" "$m" --replicaof 127.0.0.1 "$n"
  fault_log sentinel-failover ":$m>:$n" "$t"
}
f_pg_failover() { # dur_ms: the primary crashes, the standby is promoted, HAProxy switched
  local t old new ws op np; t=$(now_ms)
  old=$(cat "$work/pg.primary")
  new=b; [[ $old == b ]] && new=a
  op=PGPORT_$old np=PGPORT_$new
  # A lagging standby: the primary's WAL sender is stopped for 3 s before
  # the crash, so the primary commits WAL the standby never receives. An
  # asynchronous primary acknowledges those commits; a synchronous one
  # waits for the standby and does not. Meanwhile the ordered target hangs,
  # so deliveries are behind, as under real load: an acknowledged event the
  # promoted ledger lacks and no target had yet is lost.
  ws=$(pg_sql "${!op}" "SELECT pid FROM pg_stat_replication LIMIT 1" 2>/dev/null || true)
  log "fault: PostgreSQL failover pg-$old → pg-$new ($PG_STANDBY standby; WAL shipping stopped and target ordered hung 3 s before the crash)"
  target_mode "$TPORT_ordered" hang
  [[ -n $ws ]] && kill -STOP "$ws" 2>/dev/null
  sleep 3
  # The WAL sender dies with what it did not send; the primary crashes.
  [[ -n $ws ]] && kill -KILL "$ws" 2>/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$work/pg-$old" -m immediate -w stop >/dev/null 2>&1 || true
  as_pg "$PGBIN/pg_ctl" -D "$work/pg-$new" -w -t 60 promote >/dev/null
  echo "$new" >"$work/pg.primary"
  haproxy_cmd "enable server pg/$new"
  haproxy_cmd "disable server pg/$old"
  haproxy_cmd "shutdown sessions server pg/$old"
  target_mode "$TPORT_ordered" ok
  log "pg-$new promoted, HAProxy switched; pg-$old rebuilt as its standby in $(($1 / 1000)) s"
  sleep "$(($1 / 1000))"
  pg_make_standby "$old" "$new"
  fault_log pg-failover "$old>$new" "$t"
}
f_partition() { # pg|redis|target dur_ms: r1's link to it goes down
  local t j; t=$(now_ms)
  case $1 in pg) j=0 ;; redis) j=1 ;; target) j=2 ;; *) die "partition from $1?" ;; esac
  log "fault: r1 partitioned from $1 for $(($2 / 1000)) s (link ${VETH[j]} down)"
  as_root ip link set "${VETH[j]}" down
  sleep "$(($2 / 1000))"
  as_root ip link set "${VETH[j]}" up
  fault_log partition "$1" "$t"
}
f_disk_full() { # dur_ms: the tmpfs under the SQLite file fills up
  local t; t=$(now_ms)
  log "fault: the SQLite file's disk is full for $(($1 / 1000)) s"
  dd if=/dev/zero of="$work/disk/filler" bs=64k 2>/dev/null || true
  sleep "$(($1 / 1000))"
  rm -f "$work/disk/filler"
  fault_log disk-full - "$t"
}
f_pg_restart() { # dur_ms
  local t; t=$(now_ms) mode=fast
  (($1 % 2)) && mode=immediate
  log "fault: PostgreSQL stopped ($mode), back in $(($1 / 1000)) s"
  as_pg "$PGBIN/pg_ctl" -D "$(pg_dir)" -m "$mode" -w stop >/dev/null 2>&1 || true
  sleep "$(($1 / 1000))"
  pg_start
  fault_log pg-restart "$mode" "$t"
}
f_target() { # mode name dur_ms
  local t port_var=TPORT_$2; t=$(now_ms)
  log "fault: target $2 $1 for $(($3 / 1000)) s"
  target_mode "${!port_var}" "$1"
  sleep "$(($3 / 1000))"
  target_mode "${!port_var}" ok
  fault_log "target-$1" "$2" "$t"
}
f_clock() { # rN dur_ms
  local i=${1#r} t step; t=$(now_ms)
  step=$(((RANDOM % 2) ? 90 : -90))
  log "fault: clock of r$i stepped ${step} s for $(($2 / 1000)) s"
  printf '%+ds\n' "$step" >"$work/r$i.faketime"
  sleep "$(($2 / 1000))"
  echo "+0" >"$work/r$i.faketime"
  sleep 1.2 # the cache duration: the step is undone
  fault_log clock-step "r$i" "$t"
}
run_fault() { # kind arg dur_ms
  case $1 in
    kill9) locked "$2" f_kill9 "$2" "$3" ;;
    rolling) f_rolling ;;
    redis-restart) locked redis f_redis_restart "$3" ;;
    pg-restart) locked pg f_pg_restart "$3" ;;
    target-flap) locked "t$2" f_target flap "$2" "$3" ;;
    target-slow) locked "t$2" f_target slow "$2" "$3" ;;
    target-hang) locked "t$2" f_target hang "$2" "$3" ;;
    clock-step) locked "clock$2" f_clock "$2" "$3" ;;
    sentinel-failover) locked redis f_sentinel_failover "$3" ;;
    pg-failover) locked pg f_pg_failover "$3" ;;
    disk-full) locked disk f_disk_full "$3" ;;
    partition) locked "net$2" f_partition "$2" "$3" ;;
    *) die "unknown fault $1" ;;
  esac
}

# ---- resource samples ---------------------------------------------------------
sampler() {
  while :; do
    local t; t=$(now_ms)
    for i in $(seq 1 "$REPLICAS"); do
      local p; p=$(cat "$work/r$i.pid" 2>/dev/null) || continue
      local rss; rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
      [[ -n $rss ]] || continue
      local fds; fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
      echo "{\"t\":$t,\"what\":\"r$i\",\"pid\":$p,\"rss_kb\":$rss,\"fds\":$fds}"
    done
    local c
    c=$(psql -h 127.0.0.1 -p "$PGPORT" -U postgres -XAtqc \
      "SELECT count(*) FROM pg_stat_activity WHERE datname = '$DB'" 2>/dev/null) &&
      echo "{\"t\":$t,\"what\":\"db\",\"conns\":$c}"
    sleep 2
  done >>"$work/samples.jsonl"
}
sampler &
PIDS+=($!)

# ---- the run --------------------------------------------------------------------
"$bin/chaos" schedule --seed "$SEED" --profile "$PROFILE" --secs "$LOAD_SECS" \
  --replicas "$REPLICAS" --skip "$SKIP" --only "$FAULTS" >"$work/schedule"
log "seed $SEED, profile $PROFILE, $LOAD_SECS s of load at $RATE/s, $(wc -l <"$work/schedule") faults (schedule in $OUT/schedule)"
urls=$(for i in $(seq 1 "$REPLICAS"); do printf 'http://%s:%s,' "${RH[i]}" "${RP[i]}"; done)
"$bin/chaos" load --urls "${urls%,}" --out "$work/load.jsonl" --secs "$LOAD_SECS" --rate "$RATE" \
  --secret "$SECRET" --seed "$SEED" --prefix "$PREFIX" --settle-secs 90 >>"$work/load.log" 2>&1 &
LOAD_PID=$!
PIDS+=("$LOAD_PID")
t0=$(now_ms)
while read -r at kind arg dur; do
  wait_ms=$((t0 + at - $(now_ms)))
  ((wait_ms > 0)) && sleep "$(awk -v w="$wait_ms" 'BEGIN {printf "%.3f", w / 1000}')"
  run_fault "$kind" "$arg" "$dur" &
  FAULT_PIDS+=($!)
done <"$work/schedule"
for p in "${FAULT_PIDS[@]}"; do wait "$p" || die "a fault failed (log above)"; done
FAULT_PIDS=()
log "faults done; load finishing (unacknowledged events are retried for up to 90 s)"
wait "$LOAD_PID" || die "the load failed: $(tail -n 5 "$work/load.log")"
log "load done; auditing (waiting up to $((RESUME_MAX + 30)) s for the last deliveries)"

set +e
"$bin/chaos" audit --dir "$work" --redis-url "redis://127.0.0.1:$RTPORT" --redis-stream "chaos:stripe" \
  --nats-url "$NATS_URL" --nats-stream "$JS_STREAM" --http plain,ordered --ordered ordered \
  --wait "$((RESUME_MAX + 30))" --resume-max-s "$RESUME_MAX" --verdict "$work/verdict.md" \
  $([[ $PG_STANDBY == async ]] && echo --async-failover)
st=$?
set -e
DONE=1
if ((st == 0)); then
  log "PASS (seed $SEED); verdict and logs in $OUT"
else
  die "AUDIT FAILED (seed $SEED)"
fi
