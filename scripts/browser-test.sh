#!/usr/bin/env bash
# The admin console in headless Chromium (tests/browser/console.test.mjs).
# Needs node + npm and Debian's chromium (installed here with apt when
# missing); builds the debug binary unless HOOKGATE_BIN names one.
# Screenshots: target/browser-artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ ! -x /usr/bin/chromium ]; then
  echo "installing chromium"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [ -z "${HOOKGATE_BIN:-}" ]; then
  cargo build --locked --bin hookgate
fi
(cd tests/browser && npm ci --no-audit --no-fund --silent)
timeout 180 node tests/browser/console.test.mjs
