#!/usr/bin/env bash
# Tests the Debian package the way a user gets it: installs it with dpkg, runs everything from
# the installed paths (the binary, the man pages, bash completion loaded from its installed
# file, a README recipe line against a Redis of its own on a loopback port), then purges it and
# checks that none of its files is left. Run as root on a Debian machine where the package is
# not installed; it installs nothing else.
#
#   contrib/test-deb.sh dist/redlock-run_VERSION-1_amd64.deb
set -euo pipefail
deb=$(realpath "$1")
cd "$(dirname "$0")/.."
fail() { echo "test-deb: FAILED: $*" >&2; exit 1; }
for tool in dpkg redis-server man bash; do
  command -v "$tool" >/dev/null || fail "$tool is needed"
done
[ -f /usr/share/bash-completion/bash_completion ] || fail "bash-completion is needed"
if dpkg -s redlock-run >/dev/null 2>&1; then fail "redlock-run is installed already"; fi
[ ! -e /usr/bin/redlock-run ] || fail "/usr/bin/redlock-run exists and is no package's"

work=$(mktemp -d)
redis_pid=
cleanup() {
  if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true; fi
  dpkg --purge redlock-run >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "--- dpkg -i $deb"
dpkg -i "$deb"
dpkg -L redlock-run > "$work/files"

echo "--- the binary, from PATH"
[ "$(command -v redlock-run)" = /usr/bin/redlock-run ] || fail "redlock-run is not /usr/bin/redlock-run"
redlock-run --version

echo "--- the man pages"
for page in redlock-run redlock-run-status redlock-run-release redlock-run-lock redlock-run-unlock; do
  at=$(man -w "$page") || fail "man -w $page"
  [ "$at" = "/usr/share/man/man1/$page.1.gz" ] || fail "man -w $page: $at"
  echo "$page: $at"
done
man -P cat redlock-run 2>/dev/null | grep -q -- '--sentinel-password-file' || fail "man redlock-run reads"

echo "--- bash completion, loaded from its installed file"
# bash-completion loads a command's completion on demand from its completions directory.
completed=$(bash --norc --noprofile -c '
  source /usr/share/bash-completion/bash_completion
  __load_completion redlock-run || exit 1
  COMP_WORDS=(redlock-run --on-lost ""); COMP_CWORD=2; COMP_LINE="redlock-run --on-lost "
  COMP_POINT=${#COMP_LINE}
  $(complete -p redlock-run | sed -n "s/.*-F \([^ ]*\) .*/\1/p") redlock-run "" --on-lost
  echo "${COMPREPLY[*]}"') || fail "bash-completion did not load the installed completion"
echo "redlock-run --on-lost <TAB>: $completed"
[ "$completed" = "terminate ignore" ] || fail "bash completion of --on-lost: '$completed'"
[ -f /usr/share/zsh/vendor-completions/_redlock-run ] || fail "zsh completion"
[ -f /usr/share/fish/vendor_completions.d/redlock-run.fish ] || fail "fish completion"

echo "--- a README recipe against a Redis of its own"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
redis_pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$port" ping >/dev/null || fail "redis-server did not start: $(tail -n 5 "$work/redis.log")"
# The first cron recipe of README § Recipes, as written but for its metrics file, written into
# this test's folder instead of node_exporter's; its job replaced by one that proves it ran
# under the lock.
recipe=$(sed -n '/^## Recipes/,/^## /p' /usr/share/doc/redlock-run/README.md |
  grep -m 1 '^    .* root redlock-run ' | sed 's/^.* root //' |
  sed "s|/var/lib/node_exporter/textfile_collector/|$work/|")
[ -n "$recipe" ] || fail "no cron recipe in the installed README"
options=${recipe%% -- *}
echo "$options -- <job>"
cd "$work"
REDLOCK_REDIS_URL=redis://127.0.0.1:$port eval "$options -- sh -c 'echo \"fence \$REDLOCK_FENCE\" > ran'"
grep -q '^fence [0-9]' ran || fail "the recipe's job did not run under the lock"
cat ran
metrics=$(sed -n 's/.*--metrics-file \([^ ]*\).*/\1/p' <<< "$options")
if [ -n "$metrics" ]; then
  grep -q '^redlock_run_' "$metrics" || fail "no metrics in $metrics"
  echo "metrics: $(grep -c '^redlock_run_' "$metrics") samples in $metrics"
fi
cd - >/dev/null

echo "--- dpkg --purge"
dpkg --purge redlock-run
left=()
while read -r path; do
  if [ -f "$path" ] || [ -L "$path" ]; then left+=("$path"); fi
  # The package's own folder goes too; the others it shares (/usr/share/man/man1, …).
  if [ "$path" = /usr/share/doc/redlock-run ] && [ -d "$path" ]; then left+=("$path"); fi
done < "$work/files"
[ ${#left[@]} -eq 0 ] || fail "left behind: ${left[*]}"
hash -r
! command -v redlock-run >/dev/null || fail "redlock-run is still on PATH"
echo "nothing left: $(wc -l < "$work/files") paths checked"
echo "--- the installed package passed"
