# Shared by the bench helper scripts (sourced, not run).
# bench_config PORT: a gateway config listening on 127.0.0.1:PORT with the
# one `stripe` source the load generator signs for (no targets; a script
# appends its own).
bench_config() {
  cat <<T
[server]
listen = "127.0.0.1:$1"
admin_token = "bench-admin-token"
log_level = "warn"
shutdown_grace = "2s"
[sources.stripe]
provider = "stripe"
secrets = ["whsec_bench_secret"]
tolerance = "5m"
T
}
