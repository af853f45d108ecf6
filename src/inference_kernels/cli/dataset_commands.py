"""Dataset commands: check, show, materialize, reference."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import DatasetError
from .common import (
    DataRootOption,
    DatasetOption,
    DefinitionOption,
    DeviceOption,
    JsonOption,
    SuiteOption,
    WorkloadOption,
    _cases,
    _fail,
    _known,
    _load,
    _progress,
    _writable,
    app,
    console,
)


@app.command()
def check(
    dataset: DatasetOption = None, data_root: DataRootOption = None, as_json: JsonOption = False
) -> None:
    """Validate a dataset: layout, schema, references, constraints, tasks, captures, blobs."""
    from ..dataset.check import check_dataset

    try:
        loaded = _load(dataset)
        blob_total = sum(
            1
            for ws in loaded.workloads.values()
            for w in ws
            for d in w.inputs.values()
            if d.type == "safetensors"
        )
        with _progress() as progress:
            task = progress.add_task("verifying blobs", total=blob_total or None)
            report = check_dataset(loaded, data_root, lambda n: progress.advance(task, n))
    except DatasetError as error:
        _fail(str(error))
    if as_json:
        print(
            json.dumps(
                {
                    "dataset": str(loaded.root),
                    "ok": report.ok,
                    "counts": report.counts,
                    "problems": [vars(p) for p in report.problems],
                },
                indent=2,
            )
        )
    else:
        counts = ", ".join(f"{value} {key}" for key, value in report.counts.items())
        console.print(f"{loaded.root}: {counts}", highlight=False)
        for problem in report.problems:
            console.print(f"  [red]x[/red] {problem}", highlight=False)
        verdict = "ok" if report.ok else f"{len(report.problems)} problems"
        console.print(f"check: {verdict}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def show(
    what: Annotated[str, typer.Argument(help="definitions, tasks or workloads")] = "definitions",
    dataset: DatasetOption = None,
    definition: DefinitionOption = None,
    as_json: JsonOption = False,
) -> None:
    """List definitions, tasks or workloads. With -d NAME, definitions are shown whole:
    the signature a solution implements, inputs and outputs with shapes and dtypes, axes
    (constants, and the range of the workloads), constraints, tolerance and timing."""
    from ..dataset.describe import describe
    from ..dataset.selection import input_bytes

    if what not in ("definitions", "tasks", "workloads"):
        _fail(f"show what? {what!r} is not definitions, tasks or workloads")
    try:
        loaded = _load(dataset)
        for name in definition or []:
            _known("definition", name, loaded.definitions)
    except DatasetError as error:
        _fail(str(error))
    names = [n for n in sorted(loaded.definitions) if not definition or n in definition]
    if what == "definitions" and definition:
        described = [describe(loaded, name) for name in names]
        if as_json:
            print(json.dumps(described, indent=2))
        for entry in [] if as_json else described:
            _print_described(entry)
        return
    rows: list[dict] = []
    for name in names:
        d = loaded.definitions[name]
        if what == "definitions":
            rows.append(
                {
                    "name": name,
                    "op_type": d.op_type,
                    "inputs": list(d.inputs),
                    "outputs": list(d.outputs),
                    "var_axes": d.var_axes(),
                    "workloads": len(loaded.workloads.get(name, [])),
                }
            )
        elif what == "tasks" and name in loaded.tasks:
            t = loaded.tasks[name]
            rows.append({"definition": name, **t.model_dump(exclude={"definition", "sources"})})
        elif what == "workloads":
            for w in loaded.workloads.get(name, []):
                kinds = sorted({desc.type for desc in w.inputs.values()})
                rows.append(
                    {
                        "definition": name,
                        "uuid": w.uuid,
                        "axes": w.axes,
                        "inputs": kinds,
                        "input_bytes": input_bytes(d, w),
                    }
                )
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table(show_lines=False)
    for column in rows[0] if rows else []:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(value) for value in row.values()))
    console.print(table)
    console.print(f"{len(rows)} {what}", highlight=False)


def _print_described(entry: dict) -> None:
    """One definition, as ``show -d NAME`` prints it."""
    console.print(f"[bold]{escape(entry['name'])}[/bold] ({escape(entry['op_type'])})")
    if entry["description"]:
        console.print(escape(entry["description"]), highlight=False)
    console.print(f"  {entry['signature']}", highlight=False)
    console.print(f"  {entry['signature_dps']}   (destination_passing_style)", highlight=False)
    table = Table(title="inputs and outputs")
    for column in ("", "name", "shape", "dtype", "note"):
        table.add_column(column)
    for group in ("inputs", "outputs"):
        for name, spec in entry[group].items():
            shape = "scalar" if spec["shape"] is None else f"[{', '.join(spec['shape'])}]"
            note = ("optional; " if spec.get("optional") else "") + spec.get("description", "")
            table.add_row(group[:-1], name, escape(shape), spec["dtype"], escape(note))
    console.print(table)
    axes = Table(title="axes")
    for column in ("axis", "value", "description"):
        axes.add_column(column)
    for axis, spec in entry["axes"].items():
        if "const" in spec:
            value = str(spec["const"])
        else:
            span = spec["var"]
            value = f"var, {span[0]}..{span[1]} in the workloads" if span else "var"
        axes.add_row(axis, value, escape(spec.get("description", "")))
    console.print(axes)
    for constraint in entry["constraints"]:
        console.print(f"  constraint: {constraint}", highlight=False)
    if roofline := entry["roofline"]:
        for step, expression in roofline.get("let", {}).items():
            console.print(f"  least work: {step} = {escape(expression)}", highlight=False)
        moved = roofline.get("bytes", "every input read once, every output written once")
        console.print(
            f"  least work: flops = {escape(roofline['flops'])} ({roofline['math']}); "
            f"bytes = {escape(moved)}",
            highlight=False,
        )
    task = entry["task"]
    console.print(f"{entry['workloads']} workloads", highlight=False)
    console.print(f"solutions: {', '.join(entry['solutions']) or 'none'}", highlight=False)
    for device, choice in entry["preferred"].items():
        speedup = choice["speedup_over_baseline"]
        console.print(
            f"preferred on {device}: {choice['solution']} ({choice['time_us']:.1f} us"
            + (f", {speedup:.2f}x the baseline" if speedup else "")
            + f", {choice['workloads']} workloads, {choice['inputs']} inputs)",
            highlight=False,
        )
    if task:
        tolerance = ", ".join(f"{k} {v}" for k, v in task["tolerance"].items())
        console.print(
            f"task: {tolerance}; timing {task['timing']}; baseline {task['baseline']}; "
            f"{task['dev_workloads']} dev workloads",
            highlight=False,
        )


def _cell(value: object) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k}={_cell(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) if len(value) <= 6 else f"{len(value)} items"
    return str(value)


@app.command()
def materialize(
    dataset: DatasetOption = None,
    data_root: DataRootOption = None,
    definition: DefinitionOption = None,
    workload: WorkloadOption = None,
    suite: SuiteOption = "first",
    device: DeviceOption = "cpu",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write a dataset here whose selected workloads are safetensors blobs "
            "(stand-ins stay labelled as stand-ins in the blob metadata).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Turn workloads into input tensors; optionally write them into a blob store."""
    from ..dataset.blobs import content_hash
    from ..dtypes import dtype_name
    from ..materialize import inputs as inputs_module
    from ..materialize.export import export_dataset

    if output is not None:
        _writable(output, folder=True)
    loaded, cases = _cases(dataset, definition, suite, workload)
    try:
        if output is not None:
            summary = export_dataset(loaded, cases, output, data_root)
            if as_json:
                print(json.dumps(summary, indent=2))
            else:
                console.print(
                    f"wrote {summary['blobs']} blobs for {summary['workloads']} workloads "
                    f"of {summary['definitions']} definitions into {output}",
                    highlight=False,
                )
            return
        rows = []
        with _progress() as progress:
            bar = progress.add_task("materializing", total=len(cases))
            for d, w in cases:
                made = inputs_module.materialize(
                    d,
                    w,
                    data_root=data_root or loaded.root,
                    device=device,
                    capture=loaded.captures.get(w.uuid),
                )
                tensors = {}
                for name, value in zip(made.names, made.values, strict=True):
                    if hasattr(value, "shape"):
                        tensors[name] = {
                            "shape": list(value.shape),
                            "dtype": dtype_name(value.dtype),
                            "origin": made.origins[name],
                            "sha256": content_hash(value),
                        }
                    else:
                        tensors[name] = {"value": value, "origin": made.origins[name]}
                rows.append(
                    {
                        "definition": d.name,
                        "uuid": w.uuid,
                        "inputs": made.origin,
                        "generator": made.generator,
                        "tensors": tensors,
                    }
                )
                progress.advance(bar)
    except DatasetError as error:
        _fail(str(error))
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        label = "STAND-IN" if row["inputs"] != "captured" else "captured"
        console.print(f"{row['definition']} {row['uuid']} [{label}]", highlight=False)
        for name, info in row["tensors"].items():
            detail = (
                f"{info['dtype']}{info['shape']} {info['sha256'][:12]}"
                if "shape" in info
                else f"= {info['value']}"
            )
            console.print(f"  {name:24s} {detail}  ({info['origin']})", highlight=False)


@app.command()
def reference(
    dataset: DatasetOption = None,
    data_root: DataRootOption = None,
    definition: DefinitionOption = None,
    workload: WorkloadOption = None,
    suite: SuiteOption = "first",
    device: DeviceOption = "cpu",
    report: Annotated[
        Path | None, typer.Option(help="Append one JSON line per case to this file.")
    ] = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            help="Also keep the outputs in this judge cache (run --cache DIR): a later run "
            "on the same device type finds every reference computed, e.g. --suite all."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Materialize workloads and run their references: finite outputs of the declared shapes?"""
    from ..materialize.reference_runs import run_case

    if report is not None:
        _writable(report)
    if cache is not None:
        _writable(cache / "references", folder=True)
    loaded, cases = _cases(dataset, definition, suite, workload)
    root = data_root or loaded.root
    fill = _fill(cache, device)
    runs = []
    stream = report.open("a") if report else None
    try:
        with _progress(transient=True) as progress:
            bar = progress.add_task("references", total=len(cases))
            for index, (d, w) in enumerate(cases):
                progress.update(bar, description=d.name[:40])
                capture = loaded.captures.get(w.uuid)
                made, waited = None, time.perf_counter()
                if fill is not None:
                    made = fill.inputs(fill.request(d, w, capture, root))
                    if index + 1 < len(cases):
                        d2, w2 = cases[index + 1]
                        fill.ahead(fill.request(d2, w2, loaded.captures.get(w2.uuid), root))
                waited = time.perf_counter() - waited  # for the helper: part of making them
                run = run_case(
                    d,
                    w,
                    data_root=root,
                    device=device,
                    capture=capture,
                    keep=fill.keeper(d, w) if fill is not None else None,
                    made=made,
                )
                run.materialize_seconds += waited
                runs.append(run)
                if stream:
                    stream.write(json.dumps(run.to_dict()) + "\n")
                    stream.flush()
                if fill is not None and fill.failed:
                    _fail(fill.failed, 1)
                progress.advance(bar)
    finally:
        if fill is not None:
            fill.close()
        if stream:
            stream.close()
    if fill is not None and fill.failed:
        _fail(fill.failed, 1)
    failed = [r for r in runs if r.status != "passed"]
    if as_json:
        print(json.dumps({"cases": [r.to_dict() for r in runs], "failed": len(failed)}, indent=2))
    else:
        _reference_table(runs)
    if failed:
        raise typer.Exit(1)


def _fill(cache: Path | None, device: str):
    """The judge's reference cache to fill (judge/reference_fill.py), or None. On CUDA the
    next workload's inputs are made on the CPU while the current reference runs; on the
    CPU that would take the reference's own cores."""
    if cache is None:
        return None
    from ..judge.reference_fill import Fill

    return Fill(cache, device, prefetch=device.startswith("cuda"))


def _reference_table(runs) -> None:
    table = Table(title="reference runs")
    columns = ["definition", "axes", "inputs", "status", "make s", "ref s", "peak MiB"]
    kept = any(r.keep_seconds for r in runs)
    if kept:  # --cache: the time to store each reference in it
        columns.insert(6, "cache s")
    for column in columns:
        table.add_column(column, justify="right" if column.endswith(("s", "MiB")) else "left")
    for r in runs:
        status = "[green]passed[/green]" if r.status == "passed" else f"[red]{r.status}[/red]"
        inputs = "STAND-IN" if r.inputs == "stand-in" else r.inputs
        table.add_row(
            r.definition,
            " ".join(f"{k}={v}" for k, v in r.axes.items()),
            inputs,
            status,
            f"{r.materialize_seconds:.2f}",
            f"{r.reference_seconds:.2f}",
            *([f"{r.keep_seconds:.2f}"] if kept else []),
            f"{r.peak_memory_bytes / 2**20:.0f}",
        )
    console.print(table)
    for r in runs:
        for problem in r.problems:
            console.print(f"[red]x[/red] {r.definition} {r.uuid}: {problem}", highlight=False)
    scope = runs[0].peak_memory_scope if runs else ""
    passed = sum(r.status == "passed" for r in runs)
    console.print(
        f"{passed}/{len(runs)} passed. Inputs labelled STAND-IN are generated, not captured. "
        f"Peak memory: {scope}.",
        highlight=False,
    )
