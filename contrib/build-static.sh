#!/usr/bin/env bash
# Builds the static release binary for x86-64 (the default) or aarch64, checks that it links
# nothing, and writes it with its SHA-256 into one folder:
#
#   contrib/build-static.sh [x86_64|aarch64] [OUT]   # OUT defaults to dist/
#   → OUT/redlock-run-VERSION-ARCH-linux-musl
#     OUT/redlock-run-VERSION-ARCH-linux-musl.sha256   (check with `sha256sum -c`)
#
# Needs the musl target and a C compiler for it (ring, the TLS library's crypto, has C code):
#   x86_64:  rustup target add x86_64-unknown-linux-musl && apt-get install musl-tools
#   aarch64: rustup target add aarch64-unknown-linux-musl && cargo install cargo-zigbuild &&
#            pip install ziglang   (and qemu-user-static to check that it runs)
#
# Reproducible: the same commit and toolchain give the same bytes wherever the checkout and
# the cargo home are (their paths are remapped), on any day (nothing records the build time).
#
# It refuses a checkout with uncommitted changes (the binary's --version names the commit, which
# would not be what was built): commit them, or set ALLOW_DIRTY=1 for a build of your own.
set -euo pipefail
# OUT is taken from where the script is run; the build, from the checkout.
arch=x86_64
case "${1:-}" in x86_64 | aarch64) arch=$1; shift ;; esac
out=$(realpath -m "${1:-dist}")
cd "$(dirname "$0")/.."
target=$arch-unknown-linux-musl
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
name=redlock-run-$version-$arch-linux-musl

fail() { echo "build-static: $*" >&2; exit 1; }
rustup target list --installed 2>/dev/null | grep -qx "$target" ||
  fail "the $target target is missing: rustup target add $target"
if [ "$arch" = x86_64 ]; then
  command -v musl-gcc >/dev/null || fail "musl-gcc is missing: apt-get install musl-tools"
  build=(cargo build)
  run=()
else
  command -v cargo-zigbuild >/dev/null || fail "cargo-zigbuild is missing: cargo install cargo-zigbuild"
  command -v qemu-aarch64-static >/dev/null || fail "qemu-aarch64-static is missing: apt-get install qemu-user-static"
  build=(cargo zigbuild)
  run=(qemu-aarch64-static)
fi
command -v readelf >/dev/null || fail "readelf is missing: apt-get install binutils"
if [ -e .git ] && [ "${ALLOW_DIRTY:-}" != 1 ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  fail "uncommitted changes (git status): commit them, or set ALLOW_DIRTY=1"
fi

cargo_home=${CARGO_HOME:-$HOME/.cargo}
remap="--remap-path-prefix=$PWD=/build/redlock-run --remap-path-prefix=$cargo_home=/cargo"
# RUSTFLAGS, when set (even empty), overrides the per-target flags: add the remapping to
# whichever counts.
if [ -n "${RUSTFLAGS+set}" ]; then
  export RUSTFLAGS="$RUSTFLAGS $remap"
else
  var=CARGO_TARGET_${target^^}_RUSTFLAGS
  var=${var//-/_}
  export "$var=$remap ${!var:-}"
fi
"${build[@]}" --release --locked --target "$target"
# Wherever cargo puts it (CARGO_TARGET_DIR, build.target-dir).
target_dir=$(cargo metadata --locked --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin=${target_dir:-target}/$target/release/redlock-run

# Statically linked: no program interpreter, no shared library needed.
headers=$(readelf -lW "$bin") || fail "readelf -l $bin failed"
dynamic=$(readelf -dW "$bin") || fail "readelf -d $bin failed"
if grep -q 'INTERP' <<< "$headers" || grep -q '(NEEDED)' <<< "$dynamic"; then
  fail "$bin is not statically linked"
fi
# Linked at a fixed address: a position-independent one relocates itself at every start.
readelf -hW "$bin" | grep -q 'Type: *EXEC' ||
  fail "$bin is position-independent (.cargo/config.toml's relocation-model=static was not applied)"
"${run[@]}" "$bin" --version >/dev/null || fail "$bin does not run"

mkdir -p "$out"
cp "$bin" "$out/$name"
(cd "$out" && sha256sum "$name" > "$name.sha256")
echo "$out/$name ($(stat -c %s "$out/$name") bytes, statically linked)"
cat "$out/$name.sha256"
