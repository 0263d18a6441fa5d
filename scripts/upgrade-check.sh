#!/usr/bin/env bash
# A rolling upgrade for real: the binary of the schema before this tree's
# newest migration ("old") and this tree's binary ("new") share one
# PostgreSQL ledger, as two replicas do while a deployment rolls.
#
#   scripts/upgrade-check.sh [OLD_REF]
#
# OLD_REF defaults to the parent of the last commit that changed
# migrations/, i.e. the code the newest schema change upgrades from. The
# old binary is built from a git worktree into this tree's target dir
# (dependencies are reused; the hookgate crate is compiled once more).
#
# What it checks, in order (docs/upgrade.md explains why):
#  1. old migrates an empty database and serves;
#  2. new migrates it further while old serves (the newest migrations
#     apply under a running old replica), then serves beside it;
#  3. events sent to either replica are new once and duplicates on the
#     other; every one reaches the target; both replicas deliver;
#  4. old restarts with --no-migrate on the newer schema and serves;
#  5. old's `replay` and new's `events list` work on the shared ledger;
#  6. reported, not required: whether old starts with migrations on (a
#     binary that predates `ignore_missing` refuses a newer ledger).
# Needs PostgreSQL at HOOKGATE_TEST_PG (default postgres://postgres@127.0.0.1:5432,
# as the tests), psql, python3 and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CARGO_INCREMENTAL=0
PG=${HOOKGATE_TEST_PG:-postgres://postgres@127.0.0.1:5432}
OLD_REF=${1:-$(git log -1 --format=%H HEAD -- migrations/)^}
OLD_SHA=$(git rev-parse --short "$OLD_REF")
work=$(mktemp -d)
db="hg_upgrade_$$"
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  git worktree remove --force "$work/old" 2>/dev/null || true
  psql -q "$PG/postgres" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() { # wait_up PORT: the replica started last answers /healthz (false if it exited)
  for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$1/healthz" >/dev/null && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || return 1
    sleep 0.2
  done
  echo "nothing on :$1" >&2; return 1
}

echo "== build: new ($(git rev-parse --short HEAD)), old ($OLD_SHA)"
cargo build --locked --quiet --bin hookgate
cp target/debug/hookgate "$work/new"
git worktree add --quiet --detach "$work/old" "$OLD_REF"
(cd "$work/old" && CARGO_TARGET_DIR="$ROOT/target" cargo build --locked --quiet --bin hookgate)
cp target/debug/hookgate "$work/old-hookgate"
# Put this tree's binary back where other scripts expect it.
cargo build --locked --quiet --bin hookgate

psql -q "$PG/postgres" -c "CREATE DATABASE $db" >/dev/null
sink_port=$(free_port)
: >"$work/sink.log"
python3 - "$sink_port" "$work/sink.log" <<'EOF' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
log = open(sys.argv[2], "a", buffering=1)
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        log.write(self.headers.get("hookgate-event-id", "?") + "\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
pids+=($!)

cat >"$work/hookgate.toml" <<EOF
[server]
admin_token = "upgrade-check-admin-token"
[storage]
database_url = "$PG/$db"
[delivery]
poll_interval = "200ms"
[sources.stripe]
provider = "stripe"
secrets = ["whsec_upgrade_check"]
targets = ["sink"]
[targets.sink]
url = "http://127.0.0.1:$sink_port/hook"
EOF

start() { # start BIN PORT [ARGS…]: a replica on PORT, its log in $work/BIN-PORT.log
  local bin=$1 port=$2; shift 2
  HOOKGATE_SERVER__LISTEN="127.0.0.1:$port" RUST_LOG=warn \
    "$work/$bin" --config "$work/hookgate.toml" serve "$@" >"$work/$bin-$port.log" 2>&1 &
  pids+=($!)
}
send() { # send PORT ID: prints the Hookgate-Dedup answer
  python3 - "$1" "$2" <<'EOF'
import hashlib, hmac, sys, time, urllib.request
port, eid = sys.argv[1], sys.argv[2]
body = ('{"id":"%s","object":"event","type":"charge.succeeded"}' % eid).encode()
t = str(int(time.time()))
sig = hmac.new(b"whsec_upgrade_check", t.encode() + b"." + body, hashlib.sha256).hexdigest()
req = urllib.request.Request("http://127.0.0.1:%s/webhooks/stripe" % port, data=body, method="POST",
    headers={"content-type": "application/json", "stripe-signature": "t=%s,v1=%s" % (t, sig)})
print(urllib.request.urlopen(req).headers.get("hookgate-dedup"))
EOF
}
expect() { # expect WANT PORT ID
  local got; got=$(send "$2" "$3")
  [ "$got" = "$1" ] || { echo "FAILED: $3 on :$2 answered '$got', expected '$1'"; exit 1; }
}

echo "== 1. old migrates and serves"
"$work/old-hookgate" --config "$work/hookgate.toml" migrate >/dev/null
a=$(free_port); start old-hookgate "$a" --no-migrate
wait_up "$a" || { cat "$work/old-hookgate-$a.log"; exit 1; }
for i in $(seq 1 20); do expect new "$a" "evt_up_a_$i"; done

echo "== 2. new migrates while old serves, then serves beside it"
"$work/new" --config "$work/hookgate.toml" migrate
b=$(free_port); start new "$b" --no-migrate
wait_up "$b" || { cat "$work/new-$b.log"; exit 1; }

echo "== 3. both replicas: dedup across them, every event delivered"
for i in $(seq 1 20); do expect new "$b" "evt_up_b_$i"; done
for i in $(seq 21 40); do expect new "$a" "evt_up_a_$i"; done
for i in $(seq 1 10); do expect duplicate "$b" "evt_up_a_$i"; expect duplicate "$a" "evt_up_b_$i"; done
for _ in $(seq 1 100); do
  [ "$(sort -u "$work/sink.log" | wc -l)" -ge 60 ] && break; sleep 0.2
done
delivered=$(sort -u "$work/sink.log" | wc -l)
[ "$delivered" -eq 60 ] || { echo "FAILED: $delivered of 60 events delivered"; exit 1; }
echo "60 events, each new once and a duplicate on the other replica, all delivered"

echo "== 4. old restarts on the newer schema (--no-migrate)"
kill "${pids[-2]}"; wait "${pids[-2]}" 2>/dev/null || true
a=$(free_port); start old-hookgate "$a" --no-migrate
wait_up "$a" || { cat "$work/old-hookgate-$a.log"; exit 1; }
expect new "$a" "evt_up_after_restart"
expect duplicate "$b" "evt_up_after_restart"

echo "== 5. operator commands of both versions on the shared ledger"
HOOKGATE_SERVER__LISTEN=127.0.0.1:1 "$work/old-hookgate" --config "$work/hookgate.toml" replay
"$work/new" --config "$work/hookgate.toml" events list --limit 3 >/dev/null
echo "old replay, new events list: ok"

echo "== 6. old with migrations on (reported)"
c=$(free_port); start old-hookgate "$c"
if wait_up "$c"; then
  echo "old ($OLD_SHA) starts with migrate = true on the newer ledger"
else
  echo "old ($OLD_SHA) refuses to start with migrate = true on the newer ledger:"
  grep -m1 -i "migrat" "$work/old-hookgate-$c.log" || tail -2 "$work/old-hookgate-$c.log"
  echo "(run old replicas with --no-migrate / storage.migrate = false during the upgrade; docs/upgrade.md)"
fi
echo "upgrade-check: ok ($OLD_SHA -> $(git rev-parse --short HEAD))"
