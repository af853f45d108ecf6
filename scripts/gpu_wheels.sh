#!/usr/bin/env bash
# Fills .whl/ (git-ignored) with what the lent CUDA machine lacks and cannot download:
# the Python packages scripts/gpu_setup.sh installs there (pydantic, pytest, ninja, plotly
# and their dependencies, for CPython 3.12 on x86_64 Linux; fla-core and NATTEN, library
# paths of dataset/solutions) and bubblewrap as a .deb.
# Run it here once per fresh checkout, then name ".whl" in the device tool's `carry`.
#   bash scripts/gpu_wheels.sh            # about 37 MB (FlashInfer 21 of them)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .whl \
  pydantic pydantic-core annotated-types typing-inspection typing-extensions \
  pytest iniconfig pluggy packaging ninja plotly narwhals \
  fla-core==0.6.0 einops `# the library path of the GDN definitions (dataset/solutions/gdn/fla_*)` \
  flashinfer-python==0.6.18.post1 apache-tvm-ffi==0.1.12 `# the flashinfer_* candidates` \
  requests urllib3 idna certifi charset-normalizer tqdm  # (what importing flashinfer needs)
# NATTEN (the neighborhood attentions' library path, dataset/solutions/neighborhood_attention/
# natten_*) is a source package on PyPI: built here without CUDA it is its Python code, the
# Flex Attention backend (a 0.14 MB wheel). Its build imports torch: .venv's, without isolation.
if ! ls .whl/natten-0.21.7-*.whl >/dev/null 2>&1; then
  python=python3
  [[ -x .venv/bin/python ]] && python=.venv/bin/python
  "$python" -m pip wheel -q --no-deps --no-build-isolation natten==0.21.7 -w .whl
fi
if ! ls .whl/bubblewrap_*.deb >/dev/null 2>&1; then
  (cd .whl && apt-get download bubblewrap)
fi
du -sh .whl
