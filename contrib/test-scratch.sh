#!/usr/bin/env bash
# Runs the static binary the way contrib/Dockerfile's FROM-scratch image holds it: alone in an
# empty root (chroot, as root), with /proc mounted as every container runtime does and a CA
# bundle at /etc/ssl/certs/ca-certificates.crt. It takes a lock on a Redis on a loopback port,
# in plaintext and over TLS verified against that bundle (no --tls-ca-file), and the TLS run
# fails (78) when the bundle does not hold the CA.
#
#   contrib/test-scratch.sh dist/redlock-run-VERSION-x86_64-linux-musl
set -euo pipefail
bin=$(realpath "$1")
fail() { echo "test-scratch: FAILED: $*" >&2; exit 1; }
for tool in redis-server redis-cli openssl chroot; do
  command -v "$tool" >/dev/null || fail "$tool is needed"
done
work=$(mktemp -d)
root=$work/root
redis_pid=
cleanup() {
  if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true; fi
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

cd "$work"
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=test-ca 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=server 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' > san.cnf
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 \
  -extfile san.cnf 2>/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
tls_port=$(free_port)
redis-server --port "$port" --tls-port "$tls_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$work" --logfile "$work/redis.log" --tls-cert-file server.crt --tls-key-file server.key \
  --tls-ca-cert-file ca.crt --tls-auth-clients no &
redis_pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$port" ping >/dev/null || fail "redis-server did not start: $(tail -n 5 "$work/redis.log")"

# The image: the binary, the CA bundle, nothing else (and /proc, which the runtime mounts).
mkdir -p "$root/etc/ssl/certs" "$root/proc"
cp "$bin" "$root/redlock-run"
cp ca.crt "$root/etc/ssl/certs/ca-certificates.crt"
mount -t proc proc "$root/proc"
echo "--- the image's files"
(cd "$root" && find . -path ./proc -prune -o -type f -print)

# An image has none of this host's environment (SSL_CERT_FILE, REDLOCK_*, …).
chroot=$(command -v chroot)
run() { env -i "$chroot" "$root" /redlock-run "$@"; }
echo "--- plaintext"
run --redis-url "redis://127.0.0.1:$port" --key lock:scratch -- /redlock-run --version
echo "--- TLS, verified against the image's CA bundle"
run --redis-url "rediss://127.0.0.1:$tls_port" --key lock:scratch -- /redlock-run --version
echo "--- TLS with a bundle that does not hold the CA: a configuration error"
openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out "$root/etc/ssl/certs/ca-certificates.crt" \
  -days 2 -subj /CN=other-ca 2>/dev/null
status=0
run --redis-url "rediss://127.0.0.1:$tls_port" --key lock:scratch -- /redlock-run --version || status=$?
[ "$status" = 78 ] || fail "exit $status, not 78, with a CA bundle that does not hold the server's CA"
echo "--- the static binary runs alone in an empty root"
