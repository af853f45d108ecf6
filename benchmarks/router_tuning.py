"""Tile sizes for our Triton router (dataset/solutions/moe_router/triton_moe_router_...json).

Loads the solution's source as the judge would, then times its two kernels (``_scores``
with each tile configuration, then ``_select``) in a CUDA graph (triton's
``do_bench_cudagraph``) on stand-in-like inputs for a few token counts, and prints JSON:
per token count the configurations from fastest to slowest with their microseconds, beside
the configuration ``run`` picks today. The decode's GEMV is timed in its first form
(``DECODE_SUM`` "each", any experts a program; the shipped "once" holds one), one program a
tile over all of D (``SPLIT_K`` 1), without PDL. A tuning aid on a CUDA machine, not a
judged time:

    PYTHONPATH=src python3 benchmarks/router_tuning.py > router-tuning.json
"""

import importlib.util
import itertools
import json
import sys
import types
from pathlib import Path

import torch
import triton
from triton.testing import do_bench_cudagraph

ROOT = Path(__file__).resolve().parents[1]
SOLUTION = (
    "dataset/solutions/moe_router/triton_moe_router_gemm_topk_deepseek41_d5120_e384_topk6.json"
)
E, D = 384, 5120
GEMV = {"block_e": (1, 2, 4, 8), "block_k": (256, 512, 1024), "warps": (4, 8)}  # divide D
DOT = {
    "block_m": (64, 128),
    "block_e": (64, 128),
    "block_k": (64,),
    "warps": (4, 8),
    "stages": (3, 4),
}


def module() -> types.ModuleType:
    source = json.loads((ROOT / SOLUTION).read_text())["sources"][0]["content"]
    path = Path("/tmp/router_main.py")
    path.write_text(source)  # triton reads a kernel's source from its file
    spec = importlib.util.spec_from_file_location("router_main", path)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def inputs(m: int) -> list:
    g = torch.Generator(device="cuda").manual_seed(m)
    return [
        torch.randn(m, D, device="cuda", generator=g).bfloat16(),
        (torch.randn(E, D, device="cuda", generator=g) * 0.02).bfloat16(),
        torch.randn(E, device="cuda", generator=g) * 0.1,
        torch.randn(E, device="cuda", generator=g) * 0.1,
        torch.rand(m, device="cuda", generator=g) < 0.25,
    ]


def timed(main, m: int, dot: bool, config: dict) -> float:
    X, W, bias_text, bias_image, image = inputs(m)
    scores = torch.empty((m, E), dtype=torch.float32, device="cuda")
    ids = torch.empty((m, 6), dtype=torch.int64, device="cuda")
    weights = torch.empty((m, 6), dtype=torch.float32, device="cuda")
    block_m = config.get("block_m", triton.next_power_of_2(m))
    grid = (triton.cdiv(m, block_m), triton.cdiv(E, config["block_e"]))

    def call():
        main._scores[grid](
            X, W, scores, m, E,
            D=D, BLOCK_M=block_m, BLOCK_E=config["block_e"], BLOCK_K=config["block_k"],
            USE_DOT=dot, SUM_ONCE=False, SPLIT=1, INTERPRETED=False, PDL=False,
            num_warps=config["warps"], num_stages=config.get("stages", 2),
        )  # fmt: skip
        main._select[(m,)](
            scores, bias_text, bias_image, image, ids, weights, 1.5, E,
            TOP=6, BLOCK_E=triton.next_power_of_2(E), RAW=False, PDL=False,
        )  # fmt: skip

    call()
    return do_bench_cudagraph(call) * 1000


def sweep(main, m: int, dot: bool) -> list[dict]:
    space = DOT if dot else GEMV
    results = []
    for values in itertools.product(*space.values()):
        config = dict(zip(space, values, strict=True))
        try:
            results.append({**config, "us": round(timed(main, m, dot, config), 2)})
        except Exception as error:  # a tile that does not fit the shared memory
            results.append({**config, "error": str(error).splitlines()[0][:100]})
        print(m, results[-1], file=sys.stderr)
    return sorted(results, key=lambda r: r.get("us", float("inf")))


def main() -> None:
    solution = module()
    report = {"device": torch.cuda.get_device_name(), "triton": triton.__version__}
    for m in (1, 8):
        report[f"M{m} gemv"] = sweep(solution, m, dot=False)[:8]
    for m in (256, 4096):
        report[f"M{m} dot"] = sweep(solution, m, dot=True)[:8]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
