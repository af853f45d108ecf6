# Sourced by the scripts/gpu_*.sh scripts on a CUDA machine that has no network: the Python
# packages it lacks (pydantic, pytest, ninja, plotly) come as wheels from .whl/, bubblewrap
# (the sandbox) as a .deb from .whl/ (apt-get download bubblewrap), and src/ goes on the path.
if ! python3 -c "import pydantic, pytest" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
if ! command -v bwrap >/dev/null && ls .whl/bubblewrap_*.deb >/dev/null 2>&1; then
  dpkg -x .whl/bubblewrap_*.deb /tmp/bwrap-deb
  export INFERENCE_KERNELS_BWRAP=/tmp/bwrap-deb/usr/bin/bwrap
fi
