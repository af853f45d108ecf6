"""The GPU's clocks and power, read through NVML (``nvidia-ml-py``) by the referee.

The referee reads them right after each timed sample, outside the sandbox, so a solution
cannot change what is recorded. A phase's row entry carries the readings per sample and
their medians, the throttle reasons seen, and its median time in SM cycles (time x SM
clock): a time taken at 1,470 MHz and one at 1,980 MHz are then comparable.

Off CUDA, or where NVML cannot be loaded, there is no reader and rows carry no clocks.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

# NVML's clock-event (throttle) reason bits, by the names NVML gives them.
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


@dataclass(frozen=True)
class Reading:
    sm_mhz: int
    mem_mhz: int
    power_w: float
    reasons: int  # bit mask, REASONS


Reader = Callable[[], "Reading | None"]


def gpu_uuid(device: torch.device) -> str | None:
    """``device``'s UUID as NVML and ``CUDA_VISIBLE_DEVICES`` name it ("GPU-..."), or None
    where torch does not give one."""
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "")
    if not uuid:
        return None
    return uuid if uuid.startswith("GPU-") else "GPU-" + uuid


def nvml(device: torch.device) -> tuple[Any, Any] | None:
    """(the pynvml module, ``device``'s NVML handle), or None off CUDA or where NVML
    cannot be had (no driver library, an old torch, a device NVML does not list)."""
    if device.type != "cuda":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid(device))
    except Exception:
        return None


def reader(device: torch.device) -> Reader | None:
    """A function that reads ``device``'s clocks now (None when a reading fails), or None
    when there is nothing to read (no CUDA, no NVML, a driver without these queries)."""
    found = nvml(device)
    if found is None:
        return None
    pynvml, handle = found
    reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons
    try:
        reasons(handle)
    except Exception:  # drivers before R535 know only the older name
        reasons = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read() -> Reading:
        return Reading(
            sm_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            mem_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            reasons=int(reasons(handle)),
        )

    try:
        read()
    except Exception:  # a query this device does not support: no clocks, not a failure
        return None

    def guarded() -> Reading | None:
        try:
            return read()
        except Exception:  # a transient NVML error costs one reading, never the case
            return None

    return guarded


def reason_names(mask: int) -> list[str]:
    named = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    return named + ([f"0x{rest:x}"] if rest else [])


@dataclass
class Log:
    """The readings taken after each sample of one phase."""

    readings: list[Reading] = field(default_factory=list)

    def summary(self, median_us: float) -> dict[str, Any] | None:
        if not self.readings:
            return None
        sm = [r.sm_mhz for r in self.readings]
        mask = 0
        for r in self.readings:
            mask |= r.reasons
        median_sm = statistics.median(sm)
        return {
            "sm_mhz": sm,
            "mem_mhz": [r.mem_mhz for r in self.readings],
            "power_w": [round(r.power_w, 1) for r in self.readings],
            "median_sm_mhz": median_sm,
            "median_power_w": round(statistics.median(r.power_w for r in self.readings), 1),
            "throttle_reasons": reason_names(mask),
            "median_cycles": round(median_us * median_sm),  # us x MHz = cycles
        }
