"""Build FlashInfer's kernels for the dataset's FlashInfer candidates, before a run.

FlashInfer (0.6.18) compiles each kernel module with nvcc and ninja the first time it is
used, into a cache under ``$FLASHINFER_WORKSPACE_BASE``. A sandboxed worker could only do
that in its own scratch ``/tmp``, which goes with the worker: every worker of every run
would compile again (minutes each). FlashInfer also loads prebuilt modules from its
package's ``data/aot/<module>/<module>.so`` (what the flashinfer-jit-cache package
provides), and the sandbox shows the installed packages read-only. So this script, run
once on the GPU machine outside the judge, makes FlashInfer compile the modules the
candidates use (each configuration's plan and run on a small problem: FlashInfer's own
code, never a candidate's) and copies them there.

    python scripts/flashinfer_cache.py            # build and install; prints seconds a module
    python scripts/flashinfer_cache.py --json     # the same, one JSON object at the end

The configurations follow ``scripts/library_candidates.py`` (FA3 ragged prefill, BF16,
not causal, no window or soft cap, the head dims the candidates run at): a module name
that differs there from here would be compiled in the worker's scratch instead, slowly,
and the run's first call says so by its time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HEAD_DIMS = (64, 128)  # FA3 runs the d32 definition at 64 (library_candidates.py pads it)


def _tools() -> None:
    """ninja from its Python package, nvcc from the CUDA toolkit, for FlashInfer's build."""
    import ninja

    os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
    if "CUDA_HOME" not in os.environ and Path("/usr/local/cuda/bin/nvcc").exists():
        os.environ["CUDA_HOME"] = "/usr/local/cuda"


def _prefill(head_dim: int) -> None:
    """One FA3 ragged prefill of two short rows, as the candidates call it."""
    import flashinfer
    import torch

    heads, device = 4, torch.device("cuda")
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend="fa3")
    rows = torch.arange(3, dtype=torch.int32) * 16
    wrapper.plan(
        rows,
        rows,
        heads,
        heads,
        head_dim,
        causal=False,
        sm_scale=head_dim**-0.5,
        q_data_type=torch.bfloat16,
        kv_data_type=torch.bfloat16,
        o_data_type=torch.bfloat16,
    )
    q, k, v = (torch.randn(32, heads, head_dim, device=device).bfloat16() for _ in range(3))
    out = wrapper.run(q, k, v)
    expected = torch.nn.functional.scaled_dot_product_attention(
        *(x.view(2, 16, heads, head_dim).transpose(1, 2).float() for x in (q, k, v))
    ).transpose(1, 2)
    error = (out.view(2, 16, heads, head_dim).float() - expected).abs().max().item()
    if error > 0.05:
        raise SystemExit(f"FA3 head dim {head_dim}: off by {error} from SDPA")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object at the end")
    options = parser.parse_args()
    _tools()
    workspace = Path(tempfile.mkdtemp(prefix="flashinfer-build-"))
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(workspace)  # read when flashinfer loads
    from flashinfer.jit import env

    seconds = {}
    for head_dim in HEAD_DIMS:
        began = time.perf_counter()
        _prefill(head_dim)
        seconds[f"fa3 ragged prefill d{head_dim}"] = round(time.perf_counter() - began, 1)
        print(f"fa3 ragged prefill d{head_dim}: {seconds[f'fa3 ragged prefill d{head_dim}']} s")
    installed = []
    for built in sorted(env.FLASHINFER_JIT_DIR.glob("*/*.so")):
        name = built.parent.name
        if built.name != f"{name}.so":
            continue
        target = env.FLASHINFER_AOT_DIR / name / built.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)
        installed.append(str(target))
        print(f"installed {target}")
    if not installed:
        sys.exit(f"nothing was built under {env.FLASHINFER_JIT_DIR}")
    if options.json:
        print(json.dumps({"seconds": seconds, "installed": installed}))


if __name__ == "__main__":
    main()
