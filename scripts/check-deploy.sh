#!/usr/bin/env bash
# Checks the deployment files without a container engine or a cluster:
# - the Dockerfile's build stages copy everything the crate needs
#   (scripts/check-docker-context.py, with its self-test);
# - the systemd unit passes `systemd-analyze verify` with no warning, and
#   its exposure stays low (`systemd-analyze security --offline`);
# - the Kubernetes manifests validate against the Kubernetes schemas
#   (kubernetes-validate, offline, --strict);
# - the compose file validates against the Compose specification's schema;
# - every config file shipped in the repo passes `hookgate check-config`;
# - the Prometheus alerting rules pass `promtool check rules` and their unit
#   tests `promtool test rules`; the Grafana dashboard is valid JSON.
# Installs kubernetes-validate (PyPI) when missing; takes promtool from
# Debian's `prometheus` package when missing (unpacked, not installed:
# installing it would start a Prometheus server).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== Dockerfile context"
python3 scripts/check-docker-context.py --self-test >/tmp/hg-docker-context.$$.log 2>&1 || {
  cat /tmp/hg-docker-context.$$.log; rm -f /tmp/hg-docker-context.$$.log; exit 1; }
grep -E '^(without|FAILED|SELF-TEST|docker)' /tmp/hg-docker-context.$$.log || true
rm -f /tmp/hg-docker-context.$$.log
echo "docker context: ok, and each COPY is needed"

cargo build --locked --quiet --bin hookgate
BIN=$PWD/target/debug/hookgate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== systemd unit"
if command -v systemd-analyze >/dev/null; then
  # verify wants the ExecStart binary to exist: point it at this build.
  sed "s|/usr/local/bin/hookgate|$BIN|" deploy/systemd/hookgate.service >"$work/hookgate.service"
  out=$(systemd-analyze verify "$work/hookgate.service" 2>&1) || { echo "$out"; exit 1; }
  if [ -n "$out" ]; then echo "$out"; echo "systemd-analyze verify printed warnings"; exit 1; fi
  # The threshold is on systemd's internal 0–100 scale (printed as 0–10).
  systemd-analyze security --offline=yes --threshold=30 "$work/hookgate.service" | tail -1
else
  echo "systemd-analyze not found: installing systemd"
  if [ "$(id -u)" = 0 ]; then apt-get install -y -qq systemd >/dev/null; else sudo apt-get install -y -qq systemd >/dev/null; fi
  exec "$0"
fi

echo "== Kubernetes manifests"
command -v kubernetes-validate >/dev/null || python3 -m pip install --quiet kubernetes-validate
kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml
echo "kubernetes: ok"

echo "== compose file"
# The Compose specification's JSON schema, as docker-compose 1.29.2 ships
# it (no container engine needed; only the wheel is downloaded).
python3 -m pip download --quiet --no-deps --dest "$work/dc" docker-compose==1.29.2
python3 - "$work/dc" deploy/compose/compose.yaml <<'EOF'
import glob, json, sys, zipfile
import jsonschema, yaml
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
schema = json.loads(zipfile.ZipFile(wheel).read("compose/config/compose_spec.json"))
jsonschema.validate(yaml.safe_load(open(sys.argv[2])), schema)
print("compose: ok")
EOF

echo "== shipped configs"
python3 - "$work/configmap.toml" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open("deploy/kubernetes/configmap.yaml"))
open(sys.argv[1], "w").write(doc["data"]["hookgate.toml"])
EOF
export HOOKGATE_ADMIN_TOKEN=check-deploy-admin-token-0123456789abcdef
export STRIPE_WEBHOOK_SECRET=whsec_check_deploy
export DATABASE_URL=postgres://check@127.0.0.1:1/check REDIS_URL=redis://127.0.0.1:1
for cfg in hookgate.toml deploy/docker.toml deploy/compose/hookgate.toml "$work/configmap.toml"; do
  "$BIN" --config "$cfg" check-config >/dev/null || { echo "check-config failed: $cfg"; exit 1; }
  echo "check-config: ok ($cfg)"
done

echo "== Prometheus rules"
PROMTOOL=$(command -v promtool || true)
if [ -z "$PROMTOOL" ]; then
  echo "promtool not found: unpacking it from Debian's prometheus package"
  ( cd "$work" && apt-get download prometheus >/dev/null 2>&1 || {
      if [ "$(id -u)" = 0 ]; then apt-get update -qq; else sudo apt-get update -qq; fi
      apt-get download prometheus >/dev/null; }
    dpkg-deb -x prometheus_*.deb prom )
  PROMTOOL=$work/prom/usr/bin/promtool
fi
"$PROMTOOL" check rules deploy/prometheus/alerts.yml
"$PROMTOOL" test rules deploy/prometheus/alerts_test.yml
python3 -m json.tool deploy/grafana/hookgate.json >/dev/null
echo "grafana dashboard: valid JSON"
