#!/usr/bin/env bash
# Install bubblewrap (bwrap), the sandbox every solution runs in, when it is missing.
# Debian/Ubuntu: apt-get (as root, or through sudo). Elsewhere: install it by hand.
set -euo pipefail
command -v bwrap >/dev/null && exit 0
as_root=""
[ "$(id -u)" = 0 ] || as_root="sudo"
$as_root apt-get install -y -q bubblewrap >/dev/null 2>&1 \
  || { $as_root apt-get update -q >/dev/null && $as_root apt-get install -y -q bubblewrap >/dev/null; }
command -v bwrap >/dev/null
