#!/usr/bin/env bash
# Install the Debian packages toy builds with, if any are missing.
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail
PKGS=(build-essential cmake git openssl ca-certificates npm ccache
      libcli11-dev nlohmann-json3-dev libfmt-dev libpcre2-dev libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev curl
      chromium
      libgtest-dev libgmock-dev googletest libbenchmark-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm may come from elsewhere (e.g. nodesource); only its presence matters.
if command -v npm >/dev/null; then
  missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && $cmd -qq >/dev/null
else
  echo "install-deps: missing Debian packages; run as root:" >&2
  echo "  sudo apt-get update && sudo $cmd" >&2
  exit 1
fi
