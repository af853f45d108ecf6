"""Our kernels against the library paths a user would pick (issue 14), per definition.

Among the dataset's own solutions (never a candidate: a candidate file may name itself
anything the dataset does not hold): a Python solution is a library path (the
plain-PyTorch baseline, which is cuBLAS or cuDNN through torch where one call does the
work; torch.compile; fla-core; NATTEN; FlashInfer), a Triton, CUDA or C++ one is ours. For each
definition: the fastest of each kind (of the solutions that passed every case they ran,
over the most workloads), ours over the library's as a paired speedup with its 95%
interval and verdict (compare.py), and the fraction of the speed of light of the fastest of
the dataset's solutions. The geometric mean of those fractions over the definitions, and
the definitions under FLOOR, are the issue's acceptance figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..schema import Solution
from .compare import Timed, speedup_entry
from .rows import geomean
from .tables import inputs_label
from .tables import ranked as ranked_entries

FLOOR = 0.3  # no definition's fastest solution below this fraction of its speed of light
OURS = ("triton", "cuda", "cpp")


def kinds(solutions: Iterable[Solution]) -> dict[str, str]:
    """Each dataset solution's kind: "library" (Python) or "ours" (Triton, CUDA, C++)."""
    return {s.name: "ours" if s.spec.language in OURS else "library" for s in solutions}


def against_libraries(
    table: list[dict[str, Any]],
    times: dict[tuple[str, str], dict[str, Timed]],
    kind: dict[str, str],
) -> dict[str, Any]:
    """From ``solution_table``'s entries, ``times_by_case`` and the dataset's ``kinds``: one
    row per definition, and the geometric mean of the fastest solutions' fractions of
    their speed of light."""
    found = []
    ours_only = [entry for entry in table if entry["solution"] in kind]
    for definition, ranked in ranked_entries(ours_only).items():
        library = next((e for e in ranked if kind[e["solution"]] == "library"), None)
        ours = next((e for e in ranked if kind[e["solution"]] == "ours"), None)
        row: dict[str, Any] = {
            "definition": definition,
            "library": library and library["solution"],
            "library_us": library and library["time_us"],
            "ours": ours and ours["solution"],
            "ours_us": ours and ours["time_us"],
            "ours_over_library": None,
            "fastest": ranked[0]["solution"],
            "sol_fraction": ranked[0]["sol_fraction"],
            "bound": ranked[0]["bound"],
            "inputs": ", ".join(sorted({o for e in ranked for o in e["inputs"].split(", ") if o})),
        }
        if library and ours:
            paired = speedup_entry(
                times[(definition, ours["solution"])], times[(definition, library["solution"])]
            )
            row["ours_over_library"] = {
                key: paired[key] for key in ("speedup", "interval", "verdict", "pairs")
            }
        found.append(row)
    fractions = [row["sol_fraction"] for row in found if row["sol_fraction"]]
    return {
        "definitions": found,
        "sol_geomean": geomean(fractions),
        "with_sol": len(fractions),
        "below_floor": [
            r["definition"] for r in found if r["sol_fraction"] and r["sol_fraction"] < FLOOR
        ],
        "without_sol": [r["definition"] for r in found if not r["sol_fraction"]],
    }


def markdown(section: dict[str, Any]) -> list[str]:
    """performance.md's lines for ``against_libraries``'s result."""
    lines = [
        "## Our kernels against the library paths",
        "",
        "Per definition, among the dataset's solutions (not candidates), the fastest library "
        "path (Python: plain PyTorch, which is cuBLAS or cuDNN through torch; torch.compile; "
        "fla-core; NATTEN; FlashInfer) and the fastest of our kernels (Triton, CUDA, C++), each of "
        "the solutions that passed every case they ran; ours over the library's is a paired "
        "speedup (95% interval); the speed of light is the fastest solution's.",
        "",
        "| definition | inputs | library | us | ours | us | ours over library | fastest "
        "| speed of light |",
        "|---|---|---|---:|---|---:|---:|---|---:|",
    ]
    for row in section["definitions"]:
        paired = row["ours_over_library"]
        ratio = "-"
        if paired and paired["speedup"]:
            low, high = paired["interval"] or (None, None)
            span = f" ({low:.2f}-{high:.2f})" if low is not None else ""
            ratio = f"{paired['speedup']:.2f}x{span} {paired['verdict'] or ''}".strip()
        light = f"{row['sol_fraction']:.2f} ({row['bound']})" if row["sol_fraction"] else "-"
        lines.append(
            f"| {row['definition']} | {inputs_label(row['inputs']) or '-'} "
            f"| {row['library'] or '-'} | {_us(row['library_us'])} "
            f"| {row['ours'] or '-'} | {_us(row['ours_us'])} | {ratio} | {row['fastest']} "
            f"| {light} |"
        )
    geo = section["sol_geomean"]
    lines += [
        "",
        f"Speed of light, geometric mean over {section['with_sol']} definitions: "
        + (f"{geo:.2f}" if geo else "-")
        + f"; under {FLOOR}: {', '.join(section['below_floor']) or 'none'}"
        + (
            f"; without a fraction (no counts, or no hardware table): "
            f"{', '.join(section['without_sol'])}"
            if section["without_sol"]
            else ""
        )
        + ".",
        "",
    ]
    return lines


def _us(value: float | None) -> str:
    return f"{value:.2f}" if value else "-"
