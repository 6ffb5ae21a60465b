#!/usr/bin/env bash
# Builds the Debian package of the static binary and checks it with lintian:
#
#   contrib/build-deb.sh [x86_64|aarch64] [OUT]   # x86_64 and dist/ by default
#   → OUT/redlock-run_VERSION-1_amd64.deb (or _arm64.deb), beside the static binary and its
#     checksum
#
# Needs what contrib/build-static.sh needs, and cargo-deb (`cargo install cargo-deb --locked`)
# and lintian (`apt-get install lintian`). Every lintian tag that remains is explained in
# contrib/deb/lintian-overrides, which the package carries.
set -euo pipefail
arch=x86_64
case "${1:-}" in x86_64 | aarch64) arch=$1; shift ;; esac
out=$(realpath -m "${1:-dist}")
cd "$(dirname "$0")/.."
command -v cargo-deb >/dev/null || { echo "build-deb: cargo install cargo-deb --locked" >&2; exit 1; }
command -v lintian >/dev/null || { echo "build-deb: apt-get install lintian" >&2; exit 1; }

contrib/build-static.sh "$arch" "$out"
mkdir -p target/deb
gzip -9n < CHANGELOG.md > target/deb/changelog.gz
# The binary build-static.sh made and checked; its version line comes from the changelog too.
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
head -n 1 contrib/deb/changelog | grep -q "^redlock-run ($version-" ||
  { echo "build-deb: contrib/deb/changelog does not start with version $version" >&2; exit 1; }
cargo deb --no-build --target "$arch-unknown-linux-musl" --output "$out"
case $arch in x86_64) deb_arch=amd64 ;; aarch64) deb_arch=arm64 ;; esac
deb=$out/redlock-run_${version}-1_${deb_arch}.deb
echo "--- lintian $deb"
# Every tag, the informational and pedantic ones too, is either absent or overridden.
# spelling-error-in-binary comes and goes with the build: machine code in a static binary
# spells a listed misspelling by chance ("wtH"), on one architecture and not the other (an
# override would then be unused, itself a tag). The text the binary prints is in the source.
lintian --fail-on error,warning,info,pedantic --display-info --pedantic --info \
  --suppress-tags spelling-error-in-binary "$deb"
echo "--- dpkg -c $deb"
dpkg -c "$deb"
