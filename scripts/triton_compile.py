"""Compile a Triton solution's kernels for a GPU architecture on a machine without one, and
print what ptxas says of each: registers per thread, spills (local memory), shared memory;
and what the machine code does, counted from cuobjdump's SASS: its instructions, those on
the tensor cores by kind (HMMA is a warp's mma.sync, HGMMA and QGMMA the warpgroup's wgmma
of 16-bit and FP8 operands), the type conversions (F2FP: two floats to a packed pair, as
FP8 operands converted for an FP16 product) and the integer ALU's.

The solution's entry point is called on its definition's smallest workload (``--dev``:
every dev workload; inputs materialized on the CPU) with Triton's launch replaced by a
recorder, so nothing is computed: each launch's
arguments give the kernel's signature (pointer dtypes, integer widths, the constexprs and
num_warps / num_stages), which is then compiled for ``--arch`` (default 90, Hopper) the
way Triton would on that GPU, without launching anything. What Triton's CPU interpreter
(the tests' correctness checks) does not show: that the kernel compiles at all (a
loop-carried value whose type changes, an op the backend lacks), and whether it spills.

    .venv/bin/python scripts/triton_compile.py triton_gdn_decode_qk4_v8_d128_k_last
    .venv/bin/python scripts/triton_compile.py --all --dev --json
    .venv/bin/python scripts/triton_compile.py --candidate my_kernel -d DEFINITION
    .venv/bin/python scripts/triton_compile.py NAME --set BLOCK_N=128 --set DECODE=shift

``--set NAME=VALUE`` (repeatable) gives one of the solution's module constants another value
first, as ``benchmarks/solution_variants.py`` sweeps them on a GPU. Another workload's
shapes may pick other constexprs than those tried. Nothing here measures speed: a count of
instructions is not a time.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.6's default, and quiet
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.selection import select
from inference_kernels.dataset.shapes import declared_shape
from inference_kernels.dtypes import TORCH_DTYPES
from inference_kernels.errors import DatasetError
from inference_kernels.judge.candidates import candidate_solution
from inference_kernels.judge.loader import load_package, set_constants, write_package
from inference_kernels.materialize.inputs import materialize

ROOT = Path(__file__).resolve().parents[1]


def _outputs(definition, workload) -> list[torch.Tensor]:
    """Empty destination tensors of the definition's output shapes at this workload."""
    return [
        torch.empty(declared_shape(definition, workload, name), dtype=TORCH_DTYPES[spec.dtype])
        for name, spec in definition.outputs.items()
    ]


def recorded_launches(
    dataset, solution, suite: str = "first", arch: int = 90, settings: dict | None = None
) -> list[dict]:
    """Every distinct Triton launch of the solution's entry point on its definition's
    smallest workload (``suite`` "dev": on each dev workload), specialized for ``arch``
    by Triton's own binder as a launch there would be (pointer alignment and integer
    divisibility hints, integers equal to 1 made constants, the backend's options): the
    kernel, its signature, constexprs, attributes and options. ``settings``: module
    constants of the solution given other values first (NAME: value, as text or typed)."""
    definition = dataset.definitions[solution.definition]
    workloads = [w for _, w in select(dataset, [solution.definition], suite)]
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    launches: dict[str, dict] = {}
    binders: dict[JITFunction, object] = {}  # one per kernel, as Triton keeps it

    def record(self, *args, grid, warmup, **kwargs):
        if self not in binders:
            binders[self] = create_function_from_signature(self.signature, self.params, backend)
        bound, specialization, options = binders[self](*args, **kwargs)
        options, signature, constexprs, attrs = self._pack_args(
            backend, kwargs, bound, specialization, options
        )
        names = [p.name for p in self.params]
        shown = {names[path[0]]: value for path, value in constexprs.items() if len(path) == 1}
        key = repr(
            [self.fn.__name__, signature, constexprs, attrs, sorted(options.__dict__.items())]
        )
        launches.setdefault(
            key,
            {
                "kernel": self,
                "signature": signature,
                "constexprs": constexprs,
                "attrs": attrs,
                "options": options.__dict__,
                "target": target,
                "shown": shown,
            },
        )

    original = JITFunction.run
    JITFunction.run = record
    try:
        package = write_package(solution, Path(tempfile.mkdtemp()) / "solution")
        entry = load_package(solution, definition, package).run
        set_constants(entry, settings or {}, solution.name)
        for workload in workloads:
            capture = dataset.captures.get(workload.uuid)
            inputs = materialize(definition, workload, data_root=dataset.root, capture=capture)
            outputs = _outputs(definition, workload)
            if not solution.spec.destination_passing_style:
                outputs = []  # the solution allocates them
            with torch.no_grad():
                entry(*inputs.values, *outputs)
    finally:
        JITFunction.run = original
    return list(launches.values())


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """What Triton's own cuobjdump prints of a cubin with ``flag``."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
        return subprocess.run(
            [str(tool), flag, file.name], capture_output=True, text=True, check=True
        ).stdout


def resources(cubin: bytes) -> dict:
    """cuobjdump's resource line of a cubin: registers, stack frame (where spills go) and
    local bytes."""
    text = _cuobjdump(cubin, "--dump-resource-usage")
    line = next((x for x in text.splitlines() if "REG:" in x), "")
    fields = dict(part.split(":", 1) for part in line.split() if ":" in part)
    return {name: int(fields[name]) for name in ("REG", "STACK", "LOCAL") if name in fields}


TENSOR_CORE = re.compile(r"MMA")  # HMMA, HGMMA, QGMMA, IMMA, IGMMA, ...
CONVERSIONS = {"F2FP", "F2F", "I2F", "F2I", "I2FP", "F2IP"}
INTEGER = {"IMAD", "IADD3", "LOP3", "SHF", "ISETP", "SEL", "LEA", "PRMT", "IMNMX", "IABS"}
INTEGER |= {"POPC", "FLO", "BMSK", "SGXT", "VIADD", "VIMNMX", "BREV"}


def opcodes(sass: str) -> list[str]:
    """Each instruction's opcode in cuobjdump's SASS text: "/*0120*/   @!P0 HMMA.16816.F32
    R4, ..." -> HMMA (past 64 KB of code the address has five digits: /*10120*/)."""
    return re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass)


def instruction_mix(cubin: bytes) -> dict:
    """The SASS of a cubin counted by opcode (its first part, ``HMMA.16816.F32`` as HMMA):
    all instructions, those on the tensor cores and the conversions by opcode, and the
    integer ALU's (IMAD counts there, as the moves it also does). A static count: a loop's
    body once, however often it runs."""
    found = opcodes(_cuobjdump(cubin, "-sass"))
    counts = collections.Counter(found)
    return {
        "instructions": len(found),
        "tensor_core": {op: n for op, n in sorted(counts.items()) if TENSOR_CORE.search(op)},
        "conversions": {op: n for op, n in sorted(counts.items()) if op in CONVERSIONS},
        "integer": sum(n for op, n in counts.items() if op in INTEGER),
    }


def compiled(launch: dict) -> dict:
    source = ASTSource(
        fn=launch["kernel"],
        signature=launch["signature"],
        constexprs=launch["constexprs"],
        attrs=launch["attrs"],
    )
    kernel = triton.compile(source, target=launch["target"], options=launch["options"])
    found = resources(kernel.asm["cubin"])
    return {
        "kernel": launch["kernel"].fn.__name__,
        "constexprs": {k: v for k, v in launch["shown"].items() if v is not None},
        "options": {k: launch["options"][k] for k in ("num_warps", "num_stages")},
        "registers": found.get("REG"),
        "stack_bytes": found.get("STACK"),  # the frame spilled registers go to
        "local_bytes": found.get("LOCAL"),
        "shared_bytes": kernel.metadata.shared,
        "sass": instruction_mix(kernel.asm["cubin"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("solutions", nargs="*", help="Triton solution names")
    parser.add_argument("--all", action="store_true", help="every Triton solution")
    parser.add_argument("--dev", action="store_true", help="every dev workload's launches")
    parser.add_argument("--arch", type=int, default=90, help="compute capability (90: H100/H200)")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    parser.add_argument("--dataset", type=Path, default=ROOT / "dataset", help="dataset root")
    parser.add_argument(
        "--candidate", type=Path, help="your solution (folder, JSON or .py), with -d"
    )
    parser.add_argument("-d", "--definition", help="the candidate's definition")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a module constant of the solution(s) given another value (repeatable)",
    )
    given = parser.parse_args()
    settings = {}
    for pair in given.set:
        constant, sep, value = pair.partition("=")
        if not sep or not constant or not value:
            parser.error(f"--set {pair!r}: expected NAME=VALUE")
        settings[constant] = value
    os.environ.pop("TRITON_INTERPRET", None)
    dataset = load_dataset(given.dataset)
    ours = sorted(s.name for s in dataset.solutions.values() if s.spec.language == "triton")
    solutions = {}
    if given.candidate:
        if given.definition not in dataset.definitions:
            parser.error(f"--candidate needs -d, a definition of {given.dataset}")
        try:
            found = candidate_solution(given.candidate, given.definition)
        except DatasetError as error:
            parser.error(str(error))
        solutions[found.name] = found.model_copy(update={"definition": given.definition})
    names = list(given.solutions) + (ours if given.all else [])
    for name in names:
        if name not in ours:
            parser.error(
                f"{name!r} is not a Triton solution of {given.dataset} ({', '.join(ours)})"
            )
        solutions[name] = dataset.solutions[name]
    if not solutions:
        parser.error("name a solution, or --all, or --candidate PATH -d DEFINITION")
    report, failed = {}, False
    for name, solution in solutions.items():
        try:
            suite = "dev" if given.dev else "first"
            launches = recorded_launches(dataset, solution, suite, given.arch, settings)
            report[name] = [compiled(launch) for launch in launches]
        except Exception as error:  # noqa: BLE001 - reported per solution
            report[name] = {"error": f"{type(error).__name__}: {str(error)[:2000]}"}
            failed = True
        if not given.json:
            found = report[name]
            if isinstance(found, dict):
                print(f"{name}: FAILED {found['error']}")
                continue
            print(name if found else f"{name}: no Triton kernel launched on these workloads")
            for entry in found:
                sass = entry["sass"]
                mma = ", ".join(f"{op} {n}" for op, n in sass["tensor_core"].items()) or "none"
                converted = sum(sass["conversions"].values())
                print(
                    f"  {entry['kernel']:<24} regs {entry['registers']:>3}  stack "
                    f"{entry['stack_bytes']} B  local {entry['local_bytes']} B  "
                    f"shared {entry['shared_bytes']} B  sass {sass['instructions']} "
                    f"(tensor cores: {mma}; conversions {converted}; integer "
                    f"{sass['integer']})  {entry['options']} {entry['constexprs']}"
                )
    if given.json:
        print(json.dumps({"arch": given.arch, "triton": triton.__version__, "solutions": report}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
