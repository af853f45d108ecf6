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

The configurations follow ``scripts/library_candidates.py`` (BF16 everywhere: FA3 ragged
prefill, not causal, at the head dims the candidates run at; FA3 MLA with ckv 512 and no
rope part; FA2 paged decode on tensor cores at head dim 256); each is checked against its
math by hand on its small problem. A module name that differs there from here would be
compiled in the worker's scratch instead, slowly, and the run's first call says so by
its time.
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


def _mla() -> None:
    """One MLA attention (FA3), ckv 512 without a rope part, page size 1, as the sparse MLA
    candidates call it, against its definition by hand."""
    import flashinfer
    import torch

    heads, dim, device = 64, 512, torch.device("cuda")
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device=device)
    wrapper = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="fa3")
    counts = torch.tensor([5, 0, 3], dtype=torch.int32)
    starts = torch.tensor([0, 5, 5, 8], dtype=torch.int32)
    rows = torch.tensor([0, 2, 4, 6, 8, 1, 3, 5], dtype=torch.int32, device=device)
    wrapper.plan(
        qo_indptr=torch.arange(4, dtype=torch.int32),
        kv_indptr=starts,
        kv_indices=rows,
        kv_len_arr=counts,
        num_heads=heads,
        head_dim_ckv=dim,
        head_dim_kpe=0,
        page_size=1,
        causal=False,
        sm_scale=dim**-0.5,
        q_data_type=torch.bfloat16,
        kv_data_type=torch.bfloat16,
    )
    q = torch.randn(3, heads, dim, device=device).bfloat16()
    kv = torch.randn(9, 1, dim, device=device).bfloat16()
    out, lse = wrapper.run(
        q, q.new_empty(3, heads, 0), kv, kv.new_empty(9, 1, 0),
        return_lse=True, return_lse_base_on_e=True,
    )  # fmt: skip
    pairs = zip(starts[:-1].tolist(), counts.tolist(), strict=True)
    for request, (start, count) in enumerate(pairs):
        keys = kv[rows[start : start + count].long(), 0].float()
        scores = q[request].float() @ keys.T * dim**-0.5
        if count == 0:
            error = out[request].float().abs().max().item()
        else:
            error = (out[request].float() - scores.softmax(-1) @ keys).abs().max().item()
            error = max(error, (lse[request] - scores.logsumexp(-1)).abs().max().item())
        if error > 0.05:
            raise SystemExit(f"MLA request {request}: off by {error}")


def _decode() -> None:
    """One paged decode on tensor cores (FA2), 24 query heads over 2 KV heads of 256, pages
    of one token, as the QSA candidate calls it."""
    import flashinfer
    import torch

    heads, kv_heads, dim, device = 24, 2, 256, torch.device("cuda")
    workspace = torch.zeros(128 << 20, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=True)
    rows = torch.tensor([3, 1, 4, 0, 5, 9, 2], dtype=torch.int32, device=device)
    wrapper.plan(
        torch.tensor([0, 4, 7], dtype=torch.int32),
        rows,
        torch.ones(2, dtype=torch.int32),
        heads,
        kv_heads,
        dim,
        1,
        q_data_type=torch.bfloat16,
        kv_data_type=torch.bfloat16,
        sm_scale=dim**-0.5,
    )
    q = torch.randn(2, heads, dim, device=device).bfloat16()
    k, v = (torch.randn(10, 1, kv_heads, dim, device=device).bfloat16() for _ in range(2))
    out = wrapper.run(q, (k, v))
    for request, (start, stop) in enumerate(((0, 4), (4, 7))):
        picked = rows[start:stop].long()
        keys = k[picked, 0].float().repeat_interleave(heads // kv_heads, dim=1)
        values = v[picked, 0].float().repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[request].float(), keys) * dim**-0.5
        wanted = torch.einsum("hn,nhd->hd", scores.softmax(-1), values)
        error = (out[request].float() - wanted).abs().max().item()
        if error > 0.05:
            raise SystemExit(f"tensor-core decode request {request}: off by {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object at the end")
    options = parser.parse_args()
    _tools()
    workspace = Path(tempfile.mkdtemp(prefix="flashinfer-build-"))
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(workspace)  # read when flashinfer loads
    from flashinfer.jit import env

    builds = [(f"fa3 ragged prefill d{d}", lambda d=d: _prefill(d)) for d in HEAD_DIMS]
    builds += [("fa3 MLA ckv 512", _mla), ("fa2 tensor-core decode d256", _decode)]
    seconds = {}
    for what, build in builds:
        began = time.perf_counter()
        build()
        seconds[what] = round(time.perf_counter() - began, 1)
        print(f"{what}: {seconds[what]} s (built, and checked against its math)", flush=True)
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
