"""Our kernels against the library paths a user would pick (issue 14), per definition.

A solution is a library path when its name says so (LIBRARY_PREFIXES: the plain-PyTorch
baseline, which is cuBLAS or cuDNN through torch where one call does the work;
torch.compile; fla-core; FlashInfer), ours otherwise (triton_, cuda_, cpp_). For each
definition: the fastest of each kind (of the solutions that passed every case they ran,
over the most workloads), ours over the library's as a paired speedup with its 95%
interval and verdict (compare.py), and the fraction of the speed of light of the fastest
of all. The geometric mean of those fractions over the definitions, and the definitions
under FLOOR, are the issue's acceptance figures.
"""

from __future__ import annotations

from typing import Any

from .compare import Timed, speedup_entry
from .rows import geomean
from .tables import ranked as ranked_entries

LIBRARY_PREFIXES = ("torch_", "compile_", "fla_", "flashinfer_")
FLOOR = 0.3  # no definition's fastest solution below this fraction of its speed of light


def is_library(solution: str) -> bool:
    return solution.startswith(LIBRARY_PREFIXES)


def against_libraries(
    table: list[dict[str, Any]], times: dict[tuple[str, str], dict[str, Timed]]
) -> dict[str, Any]:
    """From ``solution_table``'s entries and ``times_by_case``: one row per definition, and
    the geometric mean of the fastest solutions' fractions of their speed of light."""
    found = []
    for definition, ranked in ranked_entries(table).items():
        library = next((e for e in ranked if is_library(e["solution"])), None)
        ours = next((e for e in ranked if not is_library(e["solution"])), None)
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
        "below_floor": [r["definition"] for r in found if (r["sol_fraction"] or 0) < FLOOR],
    }


def markdown(section: dict[str, Any]) -> list[str]:
    """performance.md's lines for ``against_libraries``'s result."""
    lines = [
        "## Our kernels against the library paths",
        "",
        "Per definition, the fastest library path (plain PyTorch: cuBLAS or cuDNN through "
        "torch; torch.compile; fla-core; FlashInfer) and the fastest of our kernels, each "
        "of the solutions that passed every case they ran; ours over the library's is a "
        "paired speedup (95% interval); the speed of light is the fastest solution's.",
        "",
        "| definition | library | us | ours | us | ours over library | fastest | speed of light |",
        "|---|---|---:|---|---:|---:|---|---:|",
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
            f"| {row['definition']} | {row['library'] or '-'} | {_us(row['library_us'])} "
            f"| {row['ours'] or '-'} | {_us(row['ours_us'])} | {ratio} | {row['fastest']} "
            f"| {light} |"
        )
    geo = section["sol_geomean"]
    lines += [
        "",
        f"Speed of light, geometric mean over {section['with_sol']} definitions: "
        + (f"{geo:.2f}" if geo else "-")
        + f"; under {FLOOR}: {', '.join(section['below_floor']) or 'none'}.",
        "",
    ]
    return lines


def _us(value: float | None) -> str:
    return f"{value:.2f}" if value else "-"
