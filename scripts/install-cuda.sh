#!/usr/bin/env bash
# Install Debian's CUDA toolkit (nvidia-cuda-toolkit 11.8 in bookworm, from
# its non-free component) for `make build-cuda`, if /usr/bin/nvcc is missing.
# The system's apt sources are left as they are: the package lists of the
# non-free component are fetched into ~/.cache/toy/apt-non-free and apt
# installs from there. As root it runs apt-get; otherwise it says what to run.
set -euo pipefail
if [ -x /usr/bin/nvcc ] && [ -x /usr/bin/cuda-g++ ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-cuda: Debian's CUDA toolkit is missing; as root, with non-free in the apt sources, run:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends nvidia-cuda-toolkit nvidia-cuda-toolkit-gcc" >&2
  exit 1
fi
. /etc/os-release
dir="${XDG_CACHE_HOME:-$HOME/.cache}/toy/apt-non-free"
mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian ${VERSION_CODENAME} main contrib non-free non-free-firmware" > "$dir/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
echo "install-cuda: installing nvidia-cuda-toolkit from Debian's non-free component (about 1.6 GB)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get "${apt_opts[@]}" update -qq
apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends nvidia-cuda-toolkit nvidia-cuda-toolkit-gcc >/dev/null
apt-get "${apt_opts[@]}" clean
