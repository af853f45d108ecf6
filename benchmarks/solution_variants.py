"""Tuning constants of one of our kernels, swept: every combination of the module constants
given (``--set NAME=V1,V2``), each checked against the reference under the task's tolerance
(the referee's acceptance, ambiguity included) on an eager call and on a replay of the call
captured in a CUDA graph, each on poisoned outputs, then timed in a CUDA graph (Triton's
``do_bench_cudagraph``, median) on each dev workload of its definition, beside the solution
as it is. Prints JSON lines: the sweep, then each workload's variants, fastest first, as
each workload is done.

    PYTHONPATH=src python3 benchmarks/solution_variants.py \\
        triton_qsa_index_topk_decode_qwen38_h4_d128_topk512_c4 \\
        --set BITS=4,8 --set SEGMENT=2048,4096 > qsa-variants.jsonl

``--summarize FILE...`` reads such lines back (files of several sweeps too) and prints, per
sweep, each variant's time over the solution as it was (geometric mean, least and most
over the workloads where both were timed) and on how many workloads it passed: a table,
or JSON with ``--json``.

A tuning aid, not a judged time: one process, no sandbox, no regime, the bundled dataset's
inputs (stand-ins where it has no tensors). With ``--device cpu`` (and TRITON_INTERPRET=1
for Triton kernels) it checks each variant's correctness in the interpreter and reports no
time. A constant that a kernel reads itself (not ``run``) cannot change once compiled:
that variant is reported as failed, with Triton's message. A variant that loses the CUDA
context (an illegal address) stops the sweep, saying so (the workload's line is marked
``stopped`` and names the variant as ``crashed``; exit status 3): nothing after it could
run in that process. ``--resume FILE`` (the file the stopped sweep's lines went to) goes on
in a new process: the same sweep's finished workloads are skipped, the variants that
crashed are left out, and the stopped workload is done again; its lines continue the
sweep's (no new header), and the summary takes a workload's later line over its earlier
one, variant by variant (the crashed variant's failure stays). scripts/gpu_judge.sh
resumes a stopped line while its time lasts.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.selection import select
from inference_kernels.judge.loader import load_package, module_constants, write_package
from inference_kernels.materialize.inputs import materialize
from inference_kernels.materialize.references import rejections, run_reference
from inference_kernels.report.tables import inputs_label

ROOT = Path(__file__).resolve().parents[1]


def _value(text: str):
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def settings(pairs: list[str]) -> dict[str, list]:
    """``["BITS=4,8", "SEGMENT=2048"]`` -> {"BITS": [4, 8], "SEGMENT": [2048]}."""
    found = {}
    for pair in pairs:
        name, sep, values = pair.partition("=")
        if not sep or not name or not values:
            raise SystemExit(f"--set {pair!r}: expected NAME=V1,V2,...")
        found[name] = [_value(v) for v in values.split(",")]
    return found


def variants(grid: dict[str, list]) -> list[dict]:
    """The solution as it is ({}), then every combination of the grid's values."""
    if not grid:
        return [{}]
    names = list(grid)
    return [{}] + [
        dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())
    ]


def loaded(solution, definition) -> tuple:
    """The solution's ``run`` and its module's globals (under any decorator), where the
    tuning constants are."""
    package = write_package(solution, Path(tempfile.mkdtemp()) / "s")
    run = load_package(solution, definition, package).run
    return run, module_constants(run)


def _poison(outputs: list[torch.Tensor]) -> None:
    """Fill the destination buffers with what no reference gives (NaN, the lowest integer),
    so that a variant cannot pass on what the one before it wrote."""
    for output in outputs:
        if output.dtype.is_floating_point:
            output.fill_(float("nan"))
        elif output.dtype == torch.bool:
            output.fill_(True)
        else:
            output.fill_(torch.iinfo(output.dtype).min)


def _listed(produced) -> list[torch.Tensor]:
    return list(produced) if isinstance(produced, (tuple, list)) else [produced]


def _graph_replay_outputs(call, outputs: list[torch.Tensor] | None) -> list[torch.Tensor]:
    """The outputs of one replay of the call captured in a CUDA graph, on poisoned buffers
    (``outputs``: the destination buffers; None: the graph's own outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()  # warm-up off the capture, as torch asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        produced = call()
    replayed = outputs if outputs is not None else _listed(produced)
    _poison(replayed)
    graph.replay()
    torch.cuda.synchronize()
    return replayed


def _time_us(call, device: str, rep_ms: int) -> float | None:
    if device == "cpu":
        return None
    from triton.testing import do_bench_cudagraph

    return 1000.0 * do_bench_cudagraph(call, rep=rep_ms, return_mode="median")


def resumed(path: Path, header: dict) -> tuple[bool, set[str], list[dict]]:
    """What ``path`` holds of the sweep whose header is ``header`` (its solution, grid,
    suite, device and count of workloads), as its last sweep: whether it is there, the
    workloads it finished (uuids) and the variants that lost the CUDA context."""
    lines = _read_lines(path) if path.exists() else []
    starts = [at for at, line in enumerate(lines) if line["type"] == "sweep"]
    if not starts:
        return False, set(), []
    last, after = lines[starts[-1]], lines[starts[-1] + 1 :]
    same = ("solution", "grid", "suite", "device", "workloads")
    if any(last.get(key) != header[key] for key in same):
        return False, set(), []
    done = {line["uuid"] for line in after if "stopped" not in line}
    return True, done, [line["crashed"] for line in after if "crashed" in line]


def _context_broken(device: str) -> bool:
    """Whether the CUDA context is lost (an illegal address kills every later call)."""
    if device == "cpu":
        return False
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001
        return True


def sweep(
    dataset,
    solution_name: str,
    grid: dict[str, list],
    *,
    suite: str,
    device: str,
    limit: int | None,
    rep_ms: int,
    uuids: list[str] | None = None,
    log=sys.stderr,
    resume: Path | None = None,
) -> Iterator[dict]:
    """The sweep's lines: its header, then one per workload as it is done (``resume``: the
    lines a stopped run of this sweep wrote, to go on from, without a header)."""
    solution = dataset.solutions[solution_name]
    definition = dataset.definitions[solution.definition]
    tolerance = dataset.tasks[solution.definition].tolerance
    run, constants = loaded(solution, definition)
    unknown = [name for name in grid if name not in constants]
    if unknown:
        raise SystemExit(f"{solution_name} has no module constant {', '.join(unknown)}")
    original = {name: constants[name] for name in grid}
    dps = solution.spec.destination_passing_style
    workloads = [w for _, w in select(dataset, [solution.definition], suite)]
    if uuids:  # these workloads alone, in the suite's order
        missing = set(uuids) - {w.uuid for w in workloads}
        if missing:
            raise SystemExit(f"no workload {', '.join(sorted(missing))} in the {suite} suite")
        workloads = [w for w in workloads if w.uuid in uuids]
    workloads = workloads[:limit]
    header = {"type": "sweep", "solution": solution_name, "device": device, "suite": suite}
    header.update(grid={k: v for k, v in grid.items()}, workloads=len(workloads))
    if device != "cpu":
        header["gpu"] = torch.cuda.get_device_name(device)
    going_on, done, crashed = resumed(resume, header) if resume else (False, set(), [])
    tried = [variant for variant in variants(grid) if variant not in crashed]
    if not tried:
        return  # every variant lost the context
    if not going_on:
        yield header
    for index, workload in enumerate(workloads):
        if workload.uuid in done:
            continue
        capture = dataset.captures.get(workload.uuid)
        made = materialize(
            definition, workload, data_root=dataset.root, device=device, capture=capture
        )
        inputs = made.values
        expected = run_reference(definition, inputs)
        outputs = [torch.empty_like(e) for e in expected] if dps else []

        def call(i=inputs, o=outputs):
            with torch.no_grad():
                return run(*i, *o)

        rows, broken = [], False
        for variant in tried:
            constants.update(original)
            constants.update(variant)
            entry = {"set": variant}
            try:
                _poison(outputs)
                produced = outputs if dps else _listed(call())
                if dps:
                    call()
                why = rejections(definition, tolerance, inputs, produced, expected)
                if not any(why) and device != "cpu":  # and on a graph replay's outputs
                    replayed = _graph_replay_outputs(call, outputs if dps else None)
                    why = rejections(definition, tolerance, inputs, replayed, expected)
                    entry["graph_checked"] = True
                entry["passed"] = not any(why)
                if any(why):  # the first rejected output's reason, for whoever reads the sweep
                    entry["error"] = next(w for w in why if w)[:300]
                if entry["passed"]:
                    entry["us"] = _time_us(call, device, rep_ms)
            except Exception as error:  # noqa: BLE001 - a variant that does not run is reported
                entry.update(passed=False, error=f"{type(error).__name__}: {str(error)[:300]}")
                broken = _context_broken(device)
            rows.append(entry)
            if broken:
                break
        constants.update(original)
        rows.sort(key=lambda r: (not r["passed"], r.get("us") or 0.0))
        line = {"type": "workload", "uuid": workload.uuid, "axes": workload.axes}
        line.update(inputs=made.origin, variants=rows)
        if broken:
            line["stopped"] = "the CUDA context was lost: no later variant or workload can run"
            line["crashed"] = variant
        yield line
        print(f"{index + 1}/{len(workloads)} {workload.axes}: {rows[0]}", file=log, flush=True)
        if broken:
            return


def summarized(lines: list[dict]) -> list[dict]:
    """Per sweep in ``lines`` (its header, then its workloads): each variant's time over
    the solution as it was ({}), where both passed (a graph replay too, on a GPU) and were
    timed: geometric mean, least, most; and the workloads it passed of those swept. Fastest
    first, the variants that failed anywhere last. ``inputs``: what the workloads' inputs
    were ("stand-in", "captured", or both joined by " and ")."""
    sweeps: list[tuple[dict, list[dict]]] = []
    for line in lines:
        if line["type"] == "sweep":
            sweeps.append((line, []))
        elif sweeps:
            sweeps[-1][1].append(line)
    found = []
    for header, lines_of_sweep in sweeps:
        latest: dict[str, dict] = {}  # a workload's later line (a resumed sweep's) over its
        for at, line in enumerate(lines_of_sweep):  # earlier one, variant by variant
            key = line.get("uuid", str(at))
            earlier = {json.dumps(v["set"]): v for v in latest.get(key, {}).get("variants", [])}
            earlier.update({json.dumps(v["set"]): v for v in line["variants"]})
            latest[key] = {**line, "variants": list(earlier.values())}
        workloads = list(latest.values())
        table: dict[str, dict] = {}
        for workload in workloads:
            base = next((v for v in workload["variants"] if not v["set"]), None)
            for variant in workload["variants"]:
                row = table.setdefault(
                    json.dumps(variant["set"]), {"set": variant["set"], "passed": 0, "ratios": []}
                )
                row["passed"] += bool(variant["passed"])
                if not variant["passed"] and variant.get("error"):
                    row.setdefault("first_error", variant["error"])
                if variant.get("us") and base is not None and base.get("us"):
                    row["ratios"].append(variant["us"] / base["us"])
        rows = []
        for row in table.values():
            ratios = row.pop("ratios")
            if ratios:
                row["over_as_it_was"] = math.exp(sum(map(math.log, ratios)) / len(ratios))
                row.update(least=min(ratios), most=max(ratios), timed=len(ratios))
            rows.append(row)
        rows.sort(key=lambda r: (r["passed"] < len(workloads), r.get("over_as_it_was", math.inf)))
        found.append(
            {
                "solution": header["solution"],
                "gpu": header.get("gpu", header["device"]),
                "grid": header["grid"],
                "workloads": f"{len(workloads)}/{header['workloads']}",
                "inputs": " and ".join(sorted({w.get("inputs", "unrecorded") for w in workloads})),
                "variants": rows,
            }
        )
    return found


def _read_lines(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def print_summary(paths: list[Path], as_json: bool) -> None:
    found = []
    for path in paths:
        try:
            found += summarized(_read_lines(path))
        except (OSError, ValueError, KeyError) as error:
            why = f"{type(error).__name__}: {error}"
            raise SystemExit(f"{path}: not a sweep's lines ({why})") from None
    if as_json:
        print(json.dumps(found, indent=1))
        return
    for sweep in found:
        inputs = inputs_label(sweep["inputs"])
        print(
            f"{sweep['solution']} ({sweep['gpu']}, {sweep['workloads']} workloads, {inputs} inputs)"
        )
        for row in sweep["variants"]:
            setting = " ".join(f"{k}={v}" for k, v in row["set"].items()) or "(as it was)"
            if "over_as_it_was" in row:
                ratio = f"{row['over_as_it_was']:.3f} ({row['least']:.2f}-{row['most']:.2f})"
                ratio += f" over {row['timed']}"
            else:
                ratio = "-"
            print(f"  {setting:<44} passed {row['passed']:>2}  time / as it was {ratio}")
            if "first_error" in row:
                print(f"  {'':<44} first failure: {row['first_error']}")


def sequential_pdl() -> None:
    """Triton's interpreter has no grid dependency control (its gdc_wait raises), and runs
    each kernel whole before the next: a kernel launched with PDL then waits for nothing,
    and its gdc calls do nothing (tests/solutions/kernel_check.py --pdl is the stricter
    check: what the kernel ahead wrote is poison until the wait)."""
    import triton.language.extra.cuda as cuda

    cuda.gdc_wait = cuda.gdc_launch_dependents = lambda: None


def main() -> None:
    if "--summarize" in sys.argv:
        summary = argparse.ArgumentParser(description="Summarize sweeps' lines")
        summary.add_argument("--summarize", nargs="+", type=Path, required=True, metavar="FILE")
        summary.add_argument("--json", action="store_true", help="one JSON document")
        given = summary.parse_args()
        print_summary(given.summarize, given.json)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("solution")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="a module constant of the solution and the values to try",
    )
    parser.add_argument("--suite", default="dev", help="workload suite (dev, first, all)")
    parser.add_argument("--limit", type=int, help="the first N workloads of the suite")
    parser.add_argument(
        "--uuid",
        action="append",
        metavar="UUID",
        help="this workload of the suite alone (repeatable): e.g. one call to run under "
        "compute-sanitizer",
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rep-ms", type=int, default=100, help="timing per variant and workload")
    parser.add_argument("--dataset", type=Path, default=ROOT / "dataset")
    parser.add_argument(
        "--resume",
        type=Path,
        metavar="FILE",
        help="go on from a stopped run of this sweep whose lines are in FILE",
    )
    given = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        sequential_pdl()
    dataset = load_dataset(given.dataset)
    if given.solution not in dataset.solutions:
        raise SystemExit(f"no solution {given.solution!r} in {given.dataset}")
    lines = sweep(
        dataset,
        given.solution,
        settings(given.set),
        suite=given.suite,
        device=given.device,
        limit=given.limit,
        rep_ms=given.rep_ms,
        uuids=given.uuid,
        resume=given.resume,
    )
    for line in lines:  # one at a time: a sweep cut short by a timeout keeps what it did
        print(json.dumps(line), flush=True)
        if "stopped" in line:  # (no teardown in a lost context: it might abort instead)
            sys.stderr.flush()
            os._exit(3)


if __name__ == "__main__":
    main()
