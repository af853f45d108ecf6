"""Where the chunked GDN prefill's _chunk_prepare spends its time, stage by stage (issue 14).

The solution's source is instrumented with a constexpr STOP: the kernel returns after a
stage, having stored a row sum of that stage's result over G's scratch (so the compiler
cannot drop the work before it). The stages: 0 the program's sequence and chunk found; 1
gates, keys and queries loaded, Q K^T and P stored; 2 K K^T; 3 the diagonal blocks'
inverses by substitution (_diagonal_inverse); 4 the tile merged from them (_merged, four
TF32x3 products); 9 the whole kernel (T stored). Each time is the median of 15 CUDA-graph
replays of 20 launches, per launch, on random inputs (unit keys) of the dev workloads'
shapes; a stage's cost is its time less the one before.

    PYTHONPATH=src python3 benchmarks/gdn_prepare_stages.py [--warps 4 8]
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/gdn_prepare_stages.py --cpu
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
from pathlib import Path

from replays import captured, replay_us

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = ROOT / "dataset/solutions/gdn/triton_chunked_gdn_prefill_qk4_v8_d128_k_last.json"
STAGES = (0, 1, 2, 3, 4, 9)
SHAPES = ([57, 57], [80, 80, 79], [761, 761, 762], [241] * 34)  # sequences' lengths
_STOP = (  # a stage's early return, its result's row sums stored over G's scratch
    "    if STOP == {n}:\n        tl.store(g_ptr + {at}, {value}, mask={mask})\n        return\n"
)
INSTRUMENT = (  # (anchor in the shipped source, what replaces it)
    (  # (_chunk_prepare's)
        "    rows = tl.arange(0, C)\n    cols = tl.arange(0, C)\n",
        "    rows = tl.arange(0, C)\n    cols = tl.arange(0, C)\n"
        + _STOP.format(n=0, at="slot * H + head", value="start.to(tl.float32)", mask="True"),
    ),
    (
        "    kk = tl.dot(key, tl.trans(key))\n",
        "    if STOP == 1:\n        return\n    kk = tl.dot(key, tl.trans(key))\n"
        + _STOP.format(n=2, at="token_head", value="tl.sum(kk, axis=1)", mask="valid"),
    ),
    (
        "    T = _merged(_diagonal_inverse(kk, G, beta, C, SUB), kk, G, beta, rows, cols, SUB)\n",
        "    D = _diagonal_inverse(kk, G, beta, C, SUB)\n"
        + _STOP.format(n=3, at="token_head", value="tl.sum(D, axis=1)", mask="valid")
        + "    T = _merged(D, kk, G, beta, rows, cols, SUB)\n"
        + _STOP.format(n=4, at="token_head", value="tl.sum(T, axis=1)", mask="valid"),
    ),
    (  # (the launch here leaves PDL as shipped: False)
        "    PDL: tl.constexpr,\n):\n    if PDL:  # _chunk_recur may launch",
        "    PDL: tl.constexpr = False,\n    STOP: tl.constexpr = 9,\n):\n"
        "    if PDL:  # _chunk_recur may launch",
    ),
)


def instrumented_source() -> str:
    """The solution's source with STOP; an anchor the solution lost is named."""
    source = json.loads(SOLUTION.read_text())["sources"][0]["content"]
    for anchor, replacement in INSTRUMENT:
        if source.count(anchor) != 1:
            raise SystemExit(f"{SOLUTION.name}: anchor not found once: {anchor.strip()!r}")
        source = source.replace(anchor, replacement)
    return source


def load_module(folder: Path):
    path = folder / "gdn_prepare_stages_kernel.py"  # (Triton reads a kernel's source file)
    path.write_text(instrumented_source())
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launcher(module, lengths: list[int], device: str):
    """A function (stop, warps) launching _chunk_prepare once on random inputs."""
    import torch
    import triton

    torch.manual_seed(0)
    tokens, heads, qk_heads, dim = sum(lengths), 8, 4, 128

    def rand(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device=device).to(dtype)

    q = rand(tokens, qk_heads, dim)
    k = torch.nn.functional.normalize(rand(tokens, qk_heads, dim, dtype=torch.float32), dim=-1)
    k = k.to(torch.bfloat16)
    a, b = rand(tokens, heads), rand(tokens, heads)
    a_log, dt_bias = rand(heads, dtype=torch.float32), rand(heads, dtype=torch.float32)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=device)
    t = torch.empty(tokens, heads, 64, device=device)  # T's and P's scratch
    p = torch.empty_like(t)
    g = torch.empty(tokens, heads, device=device)
    slots = triton.cdiv(tokens, 64) + len(lengths)

    def launch(stop: int, warps: int) -> None:
        module._chunk_prepare[(slots, heads)](
            q,
            k,
            a_log,
            a,
            dt_bias,
            b,
            cu,
            t,
            p,
            g,
            len(lengths),
            dim**-0.5,
            H=heads,
            GROUP=heads // qk_heads,
            HQ=qk_heads,
            K=dim,
            C=64,
            SUB=16,
            BLOCK_N=triton.next_power_of_2(len(lengths)),
            INTERPRETED=device == "cpu",
            STOP=stop,
            num_warps=warps,
        )

    return launch


def graph_us(launch, calls: int = 20, replays: int = 15) -> float:
    """Median microseconds a launch over CUDA-graph replays of ``calls`` launches."""
    return statistics.median(replay_us(captured(launch, calls), calls, replays))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warps", type=int, nargs="+", default=[4, 8])
    parser.add_argument(
        "--cpu", action="store_true", help="each stage once in Triton's interpreter"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        module = load_module(Path(folder))
        if args.cpu:
            launch = launcher(module, SHAPES[0], "cpu")
            for stop in STAGES:
                launch(stop, args.warps[0])
                print(f"stage {stop} ran", flush=True)
            return
        for lengths in SHAPES:
            launch = launcher(module, lengths, "cuda")
            for warps in args.warps:
                times = [graph_us(lambda s=stop, w=warps, f=launch: f(s, w)) for stop in STAGES]
                line = "  ".join(f"stop{s} {t:7.2f}" for s, t in zip(STAGES, times, strict=True))
                head = f"tokens {sum(lengths):5d} in {len(lengths):2d}  warps {warps}:"
                print(f"{head} {line}", flush=True)


if __name__ == "__main__":
    main()
