#!/usr/bin/env bash
# Fails when a crate is built in two semver-incompatible versions ("majors":
# 0.10 and 0.11, or 2.x and 3.x) and scripts/duplicate-deps.allow does not
# list exactly those versions for it with a reason. Normal and build
# dependencies of every workspace member count: they are what ships and
# what every build compiles. Dev-dependencies do not: they reach only test
# builds, and the tests' own helpers may lag a release behind.
#
# After a dependency update, run it and either fold the new duplicate
# (align the direct dependency with the ecosystem) or add a line saying
# which crate holds the older version back.
set -euo pipefail
cd "$(dirname "$0")/.."

allow=scripts/duplicate-deps.allow

# "name major major…" for each crate present in more than one major.
found=$(cargo tree --locked --workspace --duplicates --edges normal,build \
          --depth 0 --prefix none --format '{p}' |
  awk 'NF >= 2 && $2 ~ /^v[0-9]/ {
         v = substr($2, 2); split(v, p, ".")
         major = (p[1] == "0") ? p[1] "." p[2] : p[1]
         key = $1 " " major
         if (!(key in seen)) { seen[key] = 1; majors[$1] = majors[$1] " " major }
       }
       END { for (n in majors) { k = split(substr(majors[n], 2), m, " "); if (k > 1) print n, majors[n] } }' |
  while read -r name rest; do
    # Majors sorted, so the comparison with the allow-list is exact.
    echo "$name $(tr ' ' '\n' <<<"$rest" | sort -V | tr '\n' ' ' | sed 's/ $//')"
  done | sort)

# The allow-list: "name major major… -- reason", comments and blanks skipped.
entries() { grep -v '^\s*\(#\|$\)' "$allow" || true; }
allowed=$(entries | sed 's/\s\+--\s.*$//; s/\s\+/ /g; s/ $//' | sort)
missing_reason=$(entries | grep -v '\s--\s\+\S' || true)

status=0
# Prints a problem ($1) and its lines ($2), if there are any.
problem() {
  [ -n "$2" ] || return 0
  echo "$1:"
  echo "$2" | sed 's/^/  /'
  status=1
}
problem "entries in $allow without a reason (\"-- why\")" "$missing_reason"
problem "crates built in more than one major version, not in $allow (who pulls each in: cargo tree --locked -e normal,build -i <name>@<version>)" \
  "$(comm -23 <(echo "$found") <(echo "$allowed"))"
problem "entries in $allow that no longer match the tree (remove or update them)" \
  "$(comm -13 <(echo "$found") <(echo "$allowed"))"
if [ "$status" = 0 ]; then
  echo "duplicate major versions: $(echo "$found" | grep -c . || true), all allowed with a reason"
fi
exit "$status"
