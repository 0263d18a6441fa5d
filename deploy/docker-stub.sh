#!/bin/sh
# Stand-in sources for every workspace member, so the Dockerfile's
# dependency layer can build from the manifests alone (Cargo.toml,
# Cargo.lock, bench/Cargo.toml) and stay cached until they change.
# scripts/check-docker-context.sh runs this same file.
set -eu
mkdir -p src bench/src
echo 'fn main() {}' > src/main.rs
: > src/lib.rs
: > bench/src/lib.rs
