#!/usr/bin/env bash
# Install the Debian packages given (default: bubblewrap, the sandbox every solution runs
# in) when they are missing. The tests also need chromium (the HTML report is rendered in
# it) and g++ (cpp/cuda solutions are compiled with it):
#   bash scripts/install_system.sh bubblewrap chromium g++
# Debian/Ubuntu: apt-get (as root, or through sudo). Elsewhere: install them by hand.
set -euo pipefail
packages=("${@:-bubblewrap}")
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
as_root=""
[ "$(id -u)" = 0 ] || as_root="sudo"
$as_root apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
  || { $as_root apt-get update -q >/dev/null && $as_root apt-get install -y -q "${missing[@]}" >/dev/null; }
for package in "${missing[@]}"; do dpkg -s "$package" >/dev/null; done
