"""The NVML reader, over a fake ``pynvml``: old drivers, unsupported queries and transient
errors cost readings, never a case."""

import sys
from types import SimpleNamespace

import pytest
import torch

from inference_kernels.judge import clocks


class FakeNvml(SimpleNamespace):
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, **failing):
        super().__init__(failing=failing, uuids=[])

    def _maybe_fail(self, name):
        if self.failing.get(name):
            self.failing[name] -= 1
            raise RuntimeError(f"NVML {name} failed")

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.uuids.append(uuid)
        return "handle"

    def nvmlDeviceGetClockInfo(self, handle, clock):
        return 1470 if clock == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetPowerUsage(self, handle):
        self._maybe_fail("power")
        return 692_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        self._maybe_fail("event_reasons")
        return 0x4

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return 0x4 | 0x40


@pytest.fixture
def gpu(monkeypatch):
    def install(fake):
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        props = SimpleNamespace(uuid="83ef5ba9-37bf")
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
        return clocks.reader(torch.device("cuda:0"))

    return install


def test_a_reading_names_the_clocks_power_and_throttle_reasons(gpu):
    fake = FakeNvml()
    read = gpu(fake)
    assert fake.uuids == ["GPU-83ef5ba9-37bf"]
    assert read() == clocks.Reading(1470, 3201, 692.0, 0x4)
    assert clocks.reason_names(0x4 | 0x40 | 0x10000) == [
        "sw_power_cap",
        "hw_thermal_slowdown",
        "0x10000",
    ]


def test_a_driver_without_the_new_query_falls_back_to_the_old_one(gpu):
    read = gpu(FakeNvml(event_reasons=10**9))
    assert read().reasons == 0x4 | 0x40


def test_an_unsupported_query_means_no_reader_and_a_transient_error_one_lost_reading(gpu):
    assert gpu(FakeNvml(power=1)) is None  # fails when first tried: no clocks at all
    fake = FakeNvml()
    read = gpu(fake)
    fake.failing["power"] = 1
    assert read() is None
    assert read().power_w == 692.0


def test_no_reader_off_cuda():
    assert clocks.reader(torch.device("cpu")) is None


def test_a_phase_summary_gives_medians_and_the_time_in_cycles():
    log = clocks.Log([clocks.Reading(1470, 3201, 690.0, 0x4), clocks.Reading(1490, 3201, 700.0, 0)])
    summary = log.summary(median_us=500.0)
    assert summary["median_sm_mhz"] == 1480 and summary["median_power_w"] == 695.0
    assert summary["median_cycles"] == 740_000 and summary["throttle_reasons"] == ["sw_power_cap"]
    assert clocks.Log().summary(1.0) is None
