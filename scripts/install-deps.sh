#!/usr/bin/env bash
# Installs every Debian package caf-collective needs. Idempotent: when all
# packages are present it only runs dpkg-query and returns in well under a
# second. Must run as root (or through sudo) on Debian bookworm.
set -euo pipefail

packages=(
  build-essential cmake g++ # toolchain
  libcaf-dev                # C++ Actor Framework 0.17.6
  libgloo-dev               # Gloo collectives, TCP transport
  libspdlog-dev             # logging
  doctest-dev               # unit tests
  libdlpack-dev             # DLPack tensor exchange
  gnuplot-nox               # benchmark plots
  openmpi-bin               # mpirun: the test that runs ranks under Open MPI
)

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
