#!/usr/bin/env bash
# Fetch the pinned llama.cpp/ggml sources from the npm package node-llama-cpp@3.22.1.
#
#   scripts/fetch-ggml.sh [CACHE_DIR]     (default: ${TOY_CACHE:-$HOME/.cache/toy})
#
# Prints the path of the checked-out llama.cpp tree (which contains ggml/) on
# stdout. The tarball is verified against the sha512 recorded below and kept in
# the cache: once cached, nothing is downloaded again. A failed or tampered
# download stops with a one-line error and leaves no partial checkout behind.
set -euo pipefail
PKG=node-llama-cpp
VERSION=3.22.1
INTEGRITY=sha512-bltIipuWmc123H7tMIgDGKSsSrhmhlQYeVUC48XTjVW7XGJJiJJyCdlTMzQ/LiWoPkGDpcL4FviDpgw7qfTiDw==
CACHE=${1:-${TOY_CACHE:-$HOME/.cache/toy}}
TGZ="$CACHE/npm/$PKG-$VERSION.tgz"
SRC="$CACHE/llama.cpp-$VERSION"

die() { echo "fetch-ggml: $*" >&2; exit 1; }

if [ -f "$SRC/ggml/CMakeLists.txt" ]; then echo "$SRC"; exit 0; fi

mkdir -p "$CACHE/npm"
verify() { [ "sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)" = "$INTEGRITY" ]; }
if [ -f "$TGZ" ] && ! verify "$TGZ"; then
  die "cached $TGZ does not match the pinned sha512; delete it to download again"
fi
if [ ! -f "$TGZ" ]; then
  command -v npm >/dev/null || die "npm is needed to fetch $PKG@$VERSION (apt-get install npm)"
  tmp=$(mktemp -d "$CACHE/npm/pack.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack "$PKG@$VERSION" --silent >/dev/null 2>"$tmp/err") \
    || die "npm pack $PKG@$VERSION failed: $(tail -n1 "$tmp/err")"
  [ -f "$tmp/$PKG-$VERSION.tgz" ] || die "npm pack produced no $PKG-$VERSION.tgz"
  verify "$tmp/$PKG-$VERSION.tgz" || die "integrity mismatch for $PKG@$VERSION: expected $INTEGRITY"
  mv "$tmp/$PKG-$VERSION.tgz" "$TGZ"
fi
work=$(mktemp -d "$CACHE/extract.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xzf "$TGZ" -C "$work" package/llama/gitRelease.bundle || die "$TGZ lacks package/llama/gitRelease.bundle"
git clone -q "$work/package/llama/gitRelease.bundle" "$work/llama.cpp" 2>/dev/null || die "cloning the llama.cpp bundle failed"
[ -f "$work/llama.cpp/ggml/CMakeLists.txt" ] || die "the bundle has no ggml/CMakeLists.txt"
rm -rf "$SRC" && mv "$work/llama.cpp" "$SRC"
echo "$SRC"
