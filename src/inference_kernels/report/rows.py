"""Reading results rows and the one time that stands for a case."""

from __future__ import annotations

import gzip
import json
import math
import statistics
import zlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import DatasetError
from ..judge.outside import resolved
from ..schema import CaseRow, EnvironmentRow
from ..signing import key, row_verifies
from ..statuses import PASSED

_MODELS = {"case": CaseRow, "environment": EnvironmentRow}

# The time that represents a case, best first: a CUDA graph replay (no launch overhead,
# prepared launch when the solution has one), then eager prepared launch, then eager.
TIME_PREFERENCE = ("graph", "prepared", "eager")


def results_text(path: Path) -> str:
    """The text of a results file, gzip-compressed where its name ends in ``.gz`` (the
    measurements kept in docs/ are, so that the tree sent to a GPU machine stays small)."""
    if not path.is_file():
        raise DatasetError(path, "", "no such results file")
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DatasetError(path, "", "not UTF-8 text, so no results file") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise DatasetError(path, "", f"not a whole gzip file ({error})") from None
    except OSError as error:
        raise DatasetError(path, "", f"cannot be read ({error.strerror or error})") from None


def read_rows(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The rows of a results file that this judge signed, each validated as a case or an
    environment row, and how many rows were dropped because their MAC fails."""
    text = results_text(path)
    secret = key(create=False)
    rows, dropped = [], 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # nested too deep: no results row
            raise DatasetError(path, f"line {number}", "not a JSON row") from None
        model = _MODELS.get(row.get("type")) if isinstance(row, dict) else None
        if model is None:
            raise DatasetError(path, f"line {number}.type", "neither a case nor an environment row")
        try:
            model.model_validate(row)
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise DatasetError(path, f"line {number}.{field}", first["msg"]) from None
        if row_verifies(row, secret):
            if row["type"] == "case":  # a solution that never loaded ran no workload
                row.setdefault("uuid", None)
            rows.append(row)
        else:
            dropped += 1
    return rows, dropped


def dropped_note(path: Path, dropped: int) -> str:
    return (
        f"{path}: dropped {dropped} row(s) that fail authentication (not signed with this "
        "judge's key: edited, forged, or written on another machine)"
    )


def case_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row.get("type") == "case"]


def gpus_of_cases(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
    """Each case row with the UUID of the GPU it ran on (from the environment row before it
    that names its device; None on the CPU or where no row says)."""
    devices: dict[str, str | None] = {}
    cases = []
    for row in rows:
        if row.get("type") == "environment":
            for entry in row.get("devices") or []:
                if isinstance(entry, dict) and isinstance(entry.get("device"), str):
                    devices[entry["device"]] = (entry.get("nvidia_smi") or {}).get("uuid")
        elif row.get("type") == "case":
            cases.append((row, devices.get(row.get("device"))))
    return cases


def standing(row: dict[str, Any]) -> dict[str, Any] | None:
    """The timing entry that stands for a passed case (TIME_PREFERENCE), or None: the
    first method with a time the outside check resolves (``counted``); where none has one
    and the row is the CPU's, the referee's own time of the first method it timed
    (``from_outside``); else none (the case is passed and untimed).

    On the CPU every process of the worker is halted as its reply arrives, so the
    referee's time is an upper bound of the calls' (the judge's overhead is in it), and
    no solution gains by reporting under the resolution on its slow workloads, which were
    left out of its comparisons while untimed (tenth attacker's trial: "4/4 (3 untimed)",
    its seen time up to 3 times the resolution). On a GPU it is not: work queued before
    the reply may run on after it, unseen up to the idle probe's 2 ms a sample (a kernel of
    87 us a call, 17 calls a sample, could be seen at about 30; review, forty-sixth
    session), so there an unresolved case stays untimed (README threat model)."""
    if row.get("status") != PASSED:
        return None
    timings = row.get("timing", {})
    for method in TIME_PREFERENCE:
        timing = timings.get(method, {})
        if isinstance(timing, dict) and counted(timing):
            return {"phase": method, **timing}
    for method in TIME_PREFERENCE:
        timing = timings.get(method, {})
        if not isinstance(timing, dict) or not indicative(timing.get("method", "")):
            continue
        seen = timing.get("outside")
        samples = [s for s in (seen or {}).get("samples_us") or [] if s > 0]
        if samples:  # (the median of the samples themselves: the entry's is not rounded)
            return {
                "phase": method,
                "method": timing["method"],
                "median_us": statistics.median(samples),
                "samples_us": samples,
                "from_outside": True,
            }
    return None


def counted(timing: dict[str, Any]) -> bool:
    """Whether a method's time may stand for its case: positive, and resolved by the
    outside check (``judge/outside.py`` RESOLVED_WITHIN; for rows written before the judge
    said so, from their ``resolution_us``)."""
    median = timing.get("median_us")
    if not isinstance(median, (int, float)) or median <= 0 or timing.get("unresolved"):
        return False
    resolution = (timing.get("outside") or {}).get("resolution_us")
    return not isinstance(resolution, (int, float)) or resolved(median, resolution)


def case_time(row: dict[str, Any]) -> tuple[float, str] | None:
    """(microseconds per call, method) of a passed case, or None (a time that is not
    positive is no time: no ratio is taken of it)."""
    timing = standing(row)
    return (timing["median_us"], timing.get("method", timing["phase"])) if timing else None


def regime(row: dict[str, Any]) -> str:
    """The device state the row was timed in; rows from before ``--regime`` were timed
    after the preheat, as ``sustained`` is."""
    return row.get("timing", {}).get("regime") or "sustained"


def indicative(method: str) -> bool:
    """CPU times (wall clock, or the tests' stand-in graph): indicative only (a shared
    machine shakes them)."""
    return "cpu-" in method


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
