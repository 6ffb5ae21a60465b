#!/usr/bin/env bash
# Runs the aarch64 static binary under qemu-user against a local (x86-64) redis-server and
# checks the parts of the stop path that are per-architecture (raw system calls, clone flags,
# the vfork spawn): --version, a locked command's status, a lost lease's stop, a forwarded
# signal, a wrapper stopped alone, the guardian killing the group after the wrapper's
# SIGKILL, and a script's lock (the holder's fork, and the script watched without a child's
# exit).
#
#   contrib/test-arm64.sh dist/redlock-run-VERSION-aarch64-linux-musl
#
# Needs qemu-user-static, redis-server and redis-cli.
set -euo pipefail
bin=$(realpath "$1")
qemu=(qemu-aarch64-static "$bin")
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --save '' --appendonly no --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" >/dev/null
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
url=redis://127.0.0.1:$port
fail() { echo "test-arm64: $*" >&2; exit 1; }
run() { "${qemu[@]}" --redis-url "$url" "$@"; }
# In the background, $! the wrapper itself (a backgrounded function would be a subshell).
start() { "${qemu[@]}" --redis-url "$url" "$@" & }
# Waits (bounded) until KEY is held.
held() { for _ in $(seq 200); do [ "$(redis-cli -p "$port" exists "$1")" = 1 ] && return; sleep 0.05; done; fail "$1 never held"; }

"${qemu[@]}" --version | grep -q aarch64-unknown-linux-musl || fail "--version does not name aarch64"

set +e
run -k arm:status -- sh -c 'test -n "$REDLOCK_FENCE"; exit 3'
[ $? = 3 ] || fail "the command's status was not passed on"
[ "$(redis-cli -p "$port" exists arm:status)" = 0 ] || fail "not released"

start -q -k arm:lost --ttl 3s -- sleep 30; w=$!
held arm:lost; sleep 0.5; redis-cli -p "$port" del arm:lost >/dev/null; wait $w
[ $? = 125 ] || fail "a lost lease did not stop the command with 125"

start -q -k arm:term -- sh -c 'trap "exit 7" TERM; sleep 30 & wait'; w=$!
held arm:term; sleep 0.5; kill -TERM $w; wait $w
[ $? = 7 ] || fail "SIGTERM was not passed on"

# Stopped alone: the guardian stops the command before the lease could expire.
start -q -k arm:stopped --ttl 2s -- sh -c "while :; do date +%s%N >> '$dir/ticks'; sleep 0.02; done"; w=$!
held arm:stopped; sleep 0.5; kill -STOP $w
run -q -k arm:stopped --ttl 2s --wait 10s -- sh -c "date +%s%N > '$dir/second'"
kill -CONT $w; wait $w
[ $? = 125 ] || fail "the stopped wrapper did not end with 125"
[ "$(sort -n "$dir/ticks" | tail -n 1)" -lt "$(cat "$dir/second")" ] || fail "the stopped wrapper's command ran beside the next"

start -q -k arm:killed -- sh -c "echo \$\$ > '$dir/pid'; sleep 100 & exec sleep 100" 2>/dev/null; w=$!
for _ in $(seq 100); do [ -s "$dir/pid" ] && break; sleep 0.05; done
sleep 0.5; kill -KILL $w; wait $w 2>/dev/null
pgid=$(cat "$dir/pid")
for _ in $(seq 40); do [ -z "$(ps -o pid= -g "$pgid")" ] && break; sleep 0.05; done
[ -z "$(ps -o pid= -g "$pgid")" ] || fail "the command's group outlived the wrapper's SIGKILL"
# A script's lock: held for the script, released at its exit, and a lost one stops the script.
export QEMU_BIN="$bin" URL="$url" PORT="$port"
lock='eval "$(qemu-aarch64-static "$QEMU_BIN" lock --redis-url "$URL" --key arm:script --ttl 3s)" || exit'
setsid -w bash -c "$lock"'; [ "$(redis-cli -p "$PORT" get arm:script)" = "$REDLOCK_TOKEN" ] || exit 9'
[ $? = 0 ] || fail "a script's lock was not held for the script"
for _ in $(seq 40); do [ "$(redis-cli -p "$port" exists arm:script)" = 0 ] && break; sleep 0.05; done
[ "$(redis-cli -p "$port" exists arm:script)" = 0 ] || fail "a script's lock outlived the script"
setsid -w bash -c 'trap "exit 7" TERM; '"$lock"'; redis-cli -p "$PORT" del arm:script > /dev/null; sleep 30 & wait'
[ $? = 7 ] || fail "a script's lost lock did not stop the script"
echo "test-arm64: all passed ($bin)"
