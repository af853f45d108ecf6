"""One self-contained HTML page of results: per definition, statuses and failure causes,
per-workload times and speedups over the task baseline, and plotly plots.

Every string in a row is text a solution may control (its name, its error message): it
reaches the page only through ``html.escape``, plot labels included (plotly renders a
subset of HTML in them). plotly.js is embedded once, inline, so the page opens with no
network.

Several files are combined in the order given: a later row for the same (definition,
solution, workload) replaces an earlier one, at the place the case was first seen. A
case judged again supersedes its old verdict, as within one file the last row's time
wins (``compare.times_by_case``). Environment rows are all kept.
"""

from __future__ import annotations

import html
import math
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ..dataset.selection import input_bytes
from ..schema import Definition, Hardware, Workload
from ..stats import median_interval
from ..statuses import PASSED
from .compare import Timed, speedup_entry, times_by_case
from .failures import grouped
from .rows import case_rows, counted, indicative, regime
from .sol import fractions
from .tables import (
    INDICATIVE_NOTE,
    INTERVAL_NOTE,
    STAND_IN_NOTE,
    inputs_label,
    method_label,
    passed_label,
    solution_table,
    time_notes,
)

PHASES = ("eager", "prepared", "graph")
# A row's least work (``work``: FLOPs and bytes per call, dataset/rooflines.py) places a
# case on a roofline, and with its device's measured peaks (the dataset's hardware table)
# gives the fraction of its speed of light it reached (``report/sol.py``). The page shows
# what rows and tables hold and estimates none of it.
FLOPS, BYTES = "flops", "bytes"
ERROR_SHOWN = 2000  # characters of an error message: a hostile one can be megabytes
COMBINING_NOTE = (
    "Files are combined in the order given: a later row for the same definition, solution "
    "and workload replaces an earlier one."
)


def combine(sources: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The rows of several results files as one list (see the module's docstring)."""
    environments: list[dict[str, Any]] = []
    cases: dict[tuple, dict[str, Any]] = {}
    for rows in sources:
        for row in rows:
            if row.get("type") == "case":
                cases[(row["definition"], row["solution"], row.get("uuid"))] = row
            else:
                environments.append(row)
    return environments + list(cases.values())


def counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    cases = case_rows(rows)
    return {
        "cases": len(cases),
        "definitions": len({row["definition"] for row in cases}),
        "solutions": len({(row["definition"], row["solution"]) for row in cases}),
        "statuses": dict(Counter(row["status"] for row in cases)),
        "inputs": dict(Counter(row.get("inputs") or "unknown" for row in cases)),
    }


def _e(value: Any) -> str:
    return html.escape(str(value))


def _timing(row: dict[str, Any]) -> dict[str, Any]:
    """A row's timing record; rows of failed cases may have none."""
    return row.get("timing") or {}


def _us(value: float) -> str:
    return f"{value:,.2f}" if value < 1000 else f"{value:,.0f}"


def _inputs_badge(inputs: str | None) -> str:
    """STAND-IN or captured, as a badge no reader can miss."""
    label = inputs_label(inputs or "unknown")
    kind = "stand-in" if "STAND-IN" in label else "captured" if label == "captured" else ""
    return f'<span class="badge {kind}">{_e(label)}</span>'


def _table(head: list[str], body: list[list[str]], numeric: tuple[int, ...] = ()) -> str:
    """A table of cells that are already HTML (escaped by whoever made them)."""
    cells = "".join(f"<th>{_e(h)}</th>" for h in head)
    lines = [
        "<tr>"
        + "".join(
            f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in body
    ]
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{''.join(lines)}</tbody></table>"


# ----------------------------------------------------------------------------- sizes


def _sizes(cases: list[dict[str, Any]], definition: Definition | None) -> tuple[dict, str]:
    """The x of the time plot, by workload uuid: the input bytes under the row's axes
    when the dataset knows the definition, else the product of the row's axes (a workload
    without axes gets none), and what the size is."""
    if definition is not None:
        try:
            return {
                row["uuid"]: input_bytes(
                    definition, Workload(uuid=row["uuid"] or "", axes=row["axes"], inputs={})
                )
                for row in cases
            }, "input bytes"
        except (KeyError, ValueError):  # axes the definition does not know: use the row's
            pass
    names = sorted({axis for row in cases for axis in row.get("axes", {})})
    sizes = {row["uuid"]: math.prod(row["axes"].values()) for row in cases if row.get("axes")}
    return sizes, "product of axes (" + " x ".join(names) + ")"


# ----------------------------------------------------------------------------- cells


def _phase_cell(timing: dict[str, Any] | None) -> str:
    """A phase's median and its 95% interval, or why it has no time."""
    if not timing:
        return ""
    if "median_us" not in timing:
        return f'<span class="muted" title="{_e(timing.get("error", ""))}">no time</span>'
    text = _us(timing["median_us"])
    if timing.get("median_interval_us"):
        low, high = timing["median_interval_us"]
        text += f' <span class="ci">[{_us(low)}-{_us(high)}]</span>'
    if indicative(timing.get("method", "")):
        text += ' <span class="badge indicative">CPU</span>'
    if not counted(timing):
        text += (
            ' <span class="badge unresolved" title="the outside check cannot resolve this '
            "time: never ranked on (without a resolved one, on the CPU the referee&#39;s own "
            'time of the calls stands for the case; on a GPU it is untimed)">unresolved</span>'
        )
    return text


def _speedup_cells(
    speedup: float | None, interval: list[float] | None, verdict: str | None, cpu: bool
) -> list[str]:
    """Speedup, its 95% interval and the verdict in words; CPU times marked indicative."""
    if not speedup:
        return ["-", "-", "-"]
    bounds = f"{interval[0]:.2f}-{interval[1]:.2f}" if interval else "-"
    said = verdict or "no interval (rows without samples)"
    words = f'<span class="verdict {_e(said.split()[0])}">{_e(said)}</span>'
    if cpu:
        words += ' <span class="badge indicative">indicative: CPU wall clock</span>'
    return [f"{speedup:.2f}x", bounds, words]


# ----------------------------------------------------------------------------- plots


def _plot(figure: go.Figure, div_id: str, title: str) -> str:
    figure.update_layout(
        title=title, template="plotly_white", height=440, margin=dict(l=60, r=20, t=50, b=50)
    )
    return figure.to_html(
        full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False}
    )


def _speedup_plot(speedups: dict[str, list[float]], cpu: bool, div_id: str) -> str:
    figure = go.Figure(
        [
            go.Box(y=values, name=_e(solution), boxpoints="all", jitter=0.3, pointpos=0)
            for solution, values in speedups.items()
        ]
    )
    figure.add_hline(y=1.0, line_dash="dot")
    figure.update_yaxes(type="log", title="speedup over the baseline (x)")
    figure.update_layout(showlegend=False)
    title = "Per-workload speedup over the baseline"
    return _plot(figure, div_id, title + (" (indicative: CPU wall clock)" if cpu else ""))


def _time_plot(points: list[dict[str, Any]], size_label: str, div_id: str) -> str:
    """Time per call against workload size, one trace per solution and kind of inputs,
    with the 95% interval of each median as error bars."""
    traces: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for point in points:
        traces[(point["solution"], inputs_label(point["inputs"] or "unknown"))].append(point)
    figure = go.Figure()
    for (solution, inputs), group in traces.items():
        figure.add_scatter(
            x=[p["size"] for p in group],
            y=[p["us"] for p in group],
            error_y=dict(
                type="data",
                array=[p["high"] - p["us"] for p in group],
                arrayminus=[p["us"] - p["low"] for p in group],
            ),
            mode="markers",
            marker=dict(symbol="circle-open" if inputs == "STAND-IN" else "circle", size=9),
            name=_e(f"{solution} ({inputs})"),
            text=[_e(f"{p['uuid']} {p['method']}") for p in group],
        )
    figure.update_xaxes(type="log", title=_e(size_label))
    figure.update_yaxes(type="log", title="time per call (us)")
    # The legend names each trace's inputs (STAND-IN or captured), even for one trace;
    # below the plot, where long solution names leave the plot its width.
    figure.update_layout(showlegend=True, legend=dict(orientation="h", y=-0.25))
    return _plot(figure, div_id, "Time against workload size")


def _roofline_plot(points: list[dict[str, Any]], div_id: str) -> str:
    """Achieved FLOP/s against arithmetic intensity, from the rows' own FLOP and byte
    counts (no roofs: the rows record no peak figures)."""
    by_solution: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for point in points:
        by_solution[point["solution"]].append(point)
    figure = go.Figure()
    for solution, group in by_solution.items():
        figure.add_scatter(
            x=[p["flops"] / p["bytes"] for p in group],
            y=[p["flops"] / p["us"] / 1e6 for p in group],
            mode="markers",
            name=_e(solution),
            text=[_e(p["uuid"]) for p in group],
        )
    figure.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    figure.update_yaxes(type="log", title="achieved TFLOP/s")
    return _plot(figure, div_id, "Roofline (achieved, no roofs drawn)")


# ----------------------------------------------------------------------------- sections


def _status_table(entries: list[dict[str, Any]]) -> str:
    """One line per solution (``tables.solution_table``); the baseline is named as such,
    not compared with itself."""
    body = []
    for entry in entries:
        failed = ", ".join(f"{k} {v}" for k, v in entry["failed"].items())
        is_baseline = entry["solution"] == entry["baseline"]
        cells = (
            ["baseline", "", ""]
            if is_baseline
            else _speedup_cells(
                entry["speedup"],
                entry["speedup_interval"],
                entry["significance"],
                entry["indicative"],
            )
        )
        body.append(
            [
                _e(entry["solution"]) + (" <em>(baseline)</em>" if is_baseline else ""),
                _inputs_badge(entry["inputs"]),
                _e(passed_label(entry)),
                f'<span class="bad">{_e(failed)}</span>' if failed else "",
                _us(entry["time_us"]) if entry["time_us"] else "-",
                _e(method_label(entry)),
                *cells,
            ]
        )
    head = ["solution", "inputs", "passed", "failed", "time (us)", "clock, regime"]
    head += ["speedup", "95% interval", "verdict"]
    return _table(head, body, numeric=(2, 4, 6))


def _failures(causes: list[dict[str, Any]]) -> str:
    """One entry per cause (failures.grouped): the first message in full, up to
    ERROR_SHOWN characters, and the workloads it happened on."""
    if not causes:
        return ""
    items = []
    for cause in causes:
        error = cause["error"]
        if len(error) > ERROR_SHOWN:
            error = (
                error[:ERROR_SHOWN] + f"... ({len(cause['error']) - ERROR_SHOWN} more characters)"
            )
        workloads = ", ".join(str(u) for u in cause["workloads"])
        items.append(
            f'<li><span class="bad">{_e(cause["status"])}</span> {_e(cause["solution"])} on '
            f"{len(cause['workloads'])} workload(s) <small>{_e(workloads)}</small>"
            f"<pre>{_e(error)}</pre></li>"
        )
    return f'<h3>Failures by cause</h3><ul class="failures">{"".join(items)}</ul>'


def _timed_points(row: dict[str, Any], mine: Timed, size: int | None) -> dict[str, list]:
    """What the plots take of one timed case: its time against its size (with the 95%
    interval of its median), and its FLOP rate when the row records FLOPs and bytes."""
    points: dict[str, list] = {"time": [], "roofline": []}
    if size is not None:
        low, high, _ = median_interval(mine.samples) or (mine.us, mine.us, 0.0)
        point = {"size": size, "us": mine.us, "low": low, "high": high, "method": mine.method}
        points["time"].append({**row, **point})
    figures = [(row.get("work") or {}).get(key) for key in (FLOPS, BYTES)]
    if all(isinstance(value, (int, float)) and value > 0 for value in figures):
        points["roofline"].append({**row, "flops": figures[0], "bytes": figures[1], "us": mine.us})
    return points


def _workloads(name: str, cases: list[dict[str, Any]], context: dict[str, Any]):
    """The per-workload table of one definition (workloads by size, the baseline first on
    each) and what its plots take: per-workload speedups, timed points, roofline points."""
    baseline = context["baselines"].get(name)
    times = context["times"]
    base = times.get((name, baseline or ""), {})
    sizes, size_label = _sizes(cases, context["definitions"].get(name))
    sol = context["sol"]
    with_sol = any((name, r["solution"], r["uuid"]) in sol for r in cases)
    plotted: dict[str, Any] = {"speedups": defaultdict(list), "time": [], "roofline": []}
    plotted.update(size_label=size_label, cpu=False)
    body = []
    order = sorted(
        cases,
        key=lambda r: (sizes.get(r["uuid"], math.inf), str(r["uuid"]), r["solution"] != baseline),
    )
    for row in order:
        mine = times.get((name, row["solution"]), {}).get(row["uuid"])
        cells = ["baseline", "", ""] if row["solution"] == baseline else ["-", "-", "-"]
        if mine and row["solution"] != baseline and row["uuid"] in base:
            entry = speedup_entry({row["uuid"]: mine}, {row["uuid"]: base[row["uuid"]]})
            if entry["speedup"] is not None:  # (none where the baseline's graph was lost)
                plotted["speedups"][row["solution"]].append(entry["speedup"])
            plotted["cpu"] |= entry["indicative"]
            cells = _speedup_cells(
                entry["speedup"], entry["interval"], entry["verdict"], entry["indicative"]
            )
        if mine:
            for kind, points in _timed_points(row, mine, sizes.get(row["uuid"])).items():
                plotted[kind] += points
        status = "good" if row["status"] == PASSED else "bad"
        line = [
            f'<span title="{_e(row["uuid"])}">{_e(str(row["uuid"])[:8])}</span>',
            _e(", ".join(f"{k}={v}" for k, v in row.get("axes", {}).items())),
            f"{sizes[row['uuid']]:,}" if row["uuid"] in sizes else "-",
            _inputs_badge(row.get("inputs")),
            _e(row["solution"]),
            f'<span class="{status}">{_e(row["status"])}</span>',
            *(_phase_cell(_timing(row).get(phase)) for phase in PHASES),
            _e(regime(row)) if _timing(row) else "",
            *cells,
        ]
        if with_sol:
            reached = sol.get((name, row["solution"], row["uuid"]))
            line.append(f"{reached['fraction']:.0%} ({reached['bound']})" if reached else "-")
        body.append(line)
    head = ["workload", "axes", size_label.split(" (")[0], "inputs", "solution", "status"]
    head += [f"{phase} (us) [95%]" for phase in PHASES]
    head += ["regime", "speedup", "95% interval", "verdict"]
    head += ["speed of light"] if with_sol else []
    return _table(head, body, numeric=(2, 6, 7, 8, 10)), plotted


def _plots(index: int, plotted: dict[str, Any]) -> str:
    """The plots of one definition, and a line for each that its rows cannot give."""
    plots, missing = [], []
    if plotted["speedups"]:
        plots.append(
            _speedup_plot(dict(plotted["speedups"]), plotted["cpu"], f"plot-{index}-speedup")
        )
    else:
        missing.append(
            "No speedup plot: no solution but the baseline was timed on the baseline's workloads."
        )
    if plotted["time"]:
        plots.append(_time_plot(plotted["time"], plotted["size_label"], f"plot-{index}-time"))
    if plotted["roofline"]:
        plots.append(_roofline_plot(plotted["roofline"], f"plot-{index}-roofline"))
    else:
        missing.append(
            f"No roofline: these rows record no FLOP and byte counts (work.{FLOPS}, "
            f"work.{BYTES}: the dataset has no roofline for the definition), and none are "
            "estimated here."
        )
    notes = "".join(f'<p class="note">{_e(line)}</p>' for line in missing)
    return f'<h3>Plots</h3>{notes}<div class="plots">{"".join(plots)}</div>'


def _definition(index: int, name: str, cases: list[dict[str, Any]], context: dict) -> str:
    """The section of one definition: status by solution, failures, workloads, plots."""
    baseline = context["baselines"].get(name)
    workloads, plotted = _workloads(name, cases, context)
    entries = [e for e in context["table"] if e["definition"] == name]
    causes = [c for c in context["failures"] if c["definition"] == name]
    said = _e(baseline) if baseline else "<em>none known</em> (no speedups)"
    return (
        f'<section id="d{index}"><h2>{_e(name)}</h2>'
        f"<p>Baseline: {said}; {len({r['uuid'] for r in cases})} workload(s), "
        f"{len(cases)} case(s).</p>"
        f"<h3>Status by solution</h3>{_status_table(entries)}{_failures(causes)}"
        f"<h3>Workloads</h3>{workloads}{_plots(index, plotted)}</section>"
    )


def _environment(row: dict[str, Any]) -> str:
    """One run's start: when, on which devices, with which versions, in which regime."""
    names = []
    for device in row.get("devices", []):
        smi = device.get("nvidia_smi")
        names.append(
            f"{device.get('device', '?')} {smi.get('name', '') if isinstance(smi, dict) else ''}"
        )
    devices = ", ".join(name.strip() for name in names)
    versions = ", ".join(f"{k} {v}" for k, v in row.get("versions", {}).items())
    extra = ", ".join(f"{k} {row[k]}" for k in ("suite", "regime", "resumed") if k in row)
    said = "; ".join(part for part in (devices or "cpu", extra) if part)
    when = row.get("started_at", "?")
    return f"<li>{_e(when)}: {_e(said)} <small>{_e(versions)}</small></li>"


_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2330; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border-bottom: 1px solid #dde1e8; padding: 3px 8px; text-align: left; }
td { vertical-align: top; }
th { background: #f2f4f7; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.ci, .muted, small { color: #6b7280; }
.badge { border-radius: 3px; padding: 0 4px; font-size: 11px; font-weight: 600; }
.badge { white-space: nowrap; }
.badge.stand-in { background: #fde68a; color: #7c2d12; }
.badge.captured { background: #d1fae5; color: #065f46; }
.badge.indicative { background: #e0e7ff; color: #3730a3; }
.badge.unresolved { background: #fee2e2; color: #991b1b; }
.good, .verdict.faster { color: #047857; }
.bad, .verdict.slower { color: #b91c1c; }
pre { white-space: pre-wrap; word-break: break-all; background: #f8f9fb; padding: 6px; }
pre { max-height: 12em; overflow: auto; }
/* auto-fill: a plot's cell has its final width before plotly sizes the plot to it */
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); }
.plots { gap: 12px; }
.plots > div { min-width: 0; }
.note { color: #4b5563; font-style: italic; }
ul.contents { columns: 2; }
section { border-top: 2px solid #c7ccd6; margin-top: 28px; }
"""


def page(
    rows: list[dict[str, Any]],
    baselines: dict[str, str],
    definitions: dict[str, Definition],
    sources: list[str],
    hardware: dict[str, Hardware] | None = None,
) -> str:
    """The whole page for combined ``rows`` (``combine``); ``baselines`` and
    ``definitions`` come from the dataset (empty without one: no speedups, sizes from the
    rows' axes); ``sources`` names the files read; ``hardware`` (the dataset's tables, by
    GPU name) gives each timed case its fraction of the speed of light."""
    cases = case_rows(rows)
    by_definition: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in cases:
        by_definition[row["definition"]].append(row)
    context = {
        "baselines": baselines,
        "definitions": definitions,
        "times": times_by_case(rows),
        "table": solution_table(rows, baselines),
        "failures": grouped(rows),
        "sol": fractions(rows, hardware or {}),
    }
    names = sorted(by_definition)
    sections = [_definition(i, name, by_definition[name], context) for i, name in enumerate(names)]
    contents = []
    for i, name in enumerate(names):
        passed = sum(row["status"] == PASSED for row in by_definition[name])
        link = f'<a href="#d{i}">{_e(name)}</a>'
        contents.append(f"<li>{link} {passed}/{len(by_definition[name])} passed</li>")
    total = counts(rows)
    notes = [INTERVAL_NOTE, STAND_IN_NOTE, COMBINING_NOTE]
    if any(entry["indicative"] for entry in context["table"]):
        notes.append(INDICATIVE_NOTE)
    notes += time_notes(context["table"])
    environments = [row for row in rows if row.get("type") == "environment"]
    written = datetime.now(UTC).isoformat(timespec="seconds")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>inference-kernels report</title>
<style>{_STYLE}</style><script>{get_plotlyjs()}</script></head><body>
<h1>inference-kernels report</h1>
<p>Written {written} from {", ".join(f"<code>{_e(s)}</code>" for s in sources)}.
{total["cases"]} cases, {total["definitions"]} definitions, {total["solutions"]} solutions;
statuses: {_e(", ".join(f"{k} {v}" for k, v in sorted(total["statuses"].items())))};
inputs: {_e(", ".join(f"{inputs_label(k)} {v}" for k, v in sorted(total["inputs"].items())))}.</p>
<p class="note">{_e(" ".join(notes))} Times are medians in microseconds per call with
their 95% interval in brackets; a case's time is its graph replay when it has one, else
its prepared or eager launch.</p>
<h3>Runs</h3><ul>{"".join(_environment(row) for row in environments)}</ul>
<h3>Definitions</h3><ul class="contents">{"".join(contents)}</ul>
{"".join(sections)}
</body></html>
"""
