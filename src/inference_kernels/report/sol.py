"""How close each timed case came to its speed of light: its workload's least work (the
row's ``work``, dataset/rooflines.py) held to its device's measured peaks (the dataset's
hardware table for the GPU the environment row names), over the case's time; and the rates
it achieved (the least work's FLOPs and bytes over its time), which need no table.

Computed when a report is made, not stored: peaks measured again change every fraction,
not one row of them. A case gets none where its row has no counts, its device no table,
or two environment rows name different GPUs for the same device.
"""

from __future__ import annotations

from typing import Any

from ..dataset.rooflines import Work, speed_of_light
from ..schema import Hardware
from .rows import case_rows, case_time


def device_names(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Device (``cuda:0``) -> the GPU's name, as the environment rows record it; a device
    the rows name two GPUs for is left out."""
    seen: dict[str, set[str]] = {}
    for row in rows:
        if row.get("type") != "environment":
            continue
        for device in row.get("devices") or []:
            name = (device.get("nvidia_smi") or {}).get("name")
            if isinstance(name, str) and isinstance(device.get("device"), str):
                seen.setdefault(device["device"], set()).add(name)
    return {device: names.pop() for device, names in seen.items() if len(names) == 1}


def fractions(
    rows: list[dict[str, Any]], hardware: dict[str, Hardware]
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(definition, solution, uuid) -> {"fraction", "bound", "limit_us"} of each timed case
    that has counts and a device with a hardware table."""
    names = device_names(rows)
    found = {}
    for row in case_rows(rows):
        work, measured = row.get("work") or {}, case_time(row)
        table = hardware.get(names.get(str(row.get("device")), ""))
        if not measured or table is None or work.get("flops") is None:
            continue
        if work.get("bytes") is None or work.get("math") not in table.tflops:
            continue
        limit = speed_of_light(Work(work["flops"], work["bytes"]), work["math"], table)
        found[(row["definition"], row["solution"], row["uuid"])] = {
            "fraction": limit.us / measured[0],
            "bound": limit.bound,
            "limit_us": limit.us,
        }
    return found


def achieved(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, float]]:
    """(definition, solution, uuid) -> {"tflop_s", "tb_s"}: the least work's FLOPs and
    bytes over the case's time, for each timed case with counts."""
    found = {}
    for row in case_rows(rows):
        work, measured = row.get("work") or {}, case_time(row)
        if not measured or work.get("flops") is None or work.get("bytes") is None:
            continue
        seconds = measured[0] * 1e-6
        found[(row["definition"], row["solution"], row["uuid"])] = {
            "tflop_s": work["flops"] / seconds / 1e12,
            "tb_s": work["bytes"] / seconds / 1e12,
        }
    return found


def rates_label(entry: dict[str, Any], prefix: str = "") -> str:
    """An entry's achieved rates as tables show them, e.g. "412 TFLOP/s, 1.23 TB/s"."""
    flops, moved = entry.get(f"{prefix}tflop_s"), entry.get(f"{prefix}tb_s")
    if flops is None and moved is None:
        return "-"
    shown = (f"{x:.3g}" if x is not None else "-" for x in (flops, moved))
    return "{} TFLOP/s, {} TB/s".format(*shown)
