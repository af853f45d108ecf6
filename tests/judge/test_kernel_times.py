"""The burst regime's kernel durations (``timing.kernels``): the device's own time of a
case's kernels, from CUPTI in the worker, beside the judged times (issue 11: what Nsight
Compute reports leaves out the gap between kernels). On the CPU there is no CUPTI: the
row says so, and the path from the referee to the worker and back is still exercised."""

import json
from types import SimpleNamespace

import pytest
from candidates import DEFINITION, ROOT, SOLUTIONS, candidates_request, write_candidate

from inference_kernels import schema
from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge import protocol
from inference_kernels.judge.referee import KERNEL_ALONE_CALLS, KERNEL_ALONE_REST_SECONDS
from inference_kernels.judge.session import judge
from inference_kernels.judge.timing import device_times


def _event(kind: str, ns: int, name: str = "gemm_kernel"):
    return SimpleNamespace(activity_type=lambda: kind, duration_ns=lambda: ns, name=lambda: name)


def test_device_times_sum_kernels_and_copies_per_call_and_skip_host_events():
    events = [
        _event("kernel", 10_000, "flash_fwd"),
        _event("kernel", 2_500, "softmax"),
        _event("gpu_memset", 1_000, "Memset (Device)"),
        _event("gpu_memcpy", 500, "Memcpy DtoD"),
        _event("cpu_op", 90_000, "aten::mm"),  # host side: not device time
        _event("cuda_runtime", 7_000, "cudaLaunchKernel"),
        _event("kernel", 12_500, "flash_fwd"),
        _event("kernel", 11_000, "x" * 300),
    ]
    us, copies, launches, top = device_times(events, calls=2)
    assert us == pytest.approx(18.0)  # (10 + 2.5 + 12.5 + 11) us over 2 calls
    assert copies == pytest.approx(0.75)
    assert launches == 2.0
    # which kernels ran, heaviest first, per call; names cut to what the protocol takes
    assert list(top.items()) == [("flash_fwd", 11.25), ("x" * 120, 5.5), ("softmax", 1.25)]


def test_device_times_name_only_the_heaviest_kernels():
    events = [_event("kernel", 1_000 * (i + 1), f"k{i}") for i in range(10)]
    top = device_times(events, calls=1).top
    assert list(top) == ["k9", "k8", "k7", "k6"]


def test_device_times_tell_kinds_by_name_where_events_do_not_say_them():
    # torch before 2.12 (the H200's 2.11) has no activity_type on its events
    from torch.autograd import DeviceType

    def event(name, device, ns):
        return SimpleNamespace(
            name=lambda: name, device_type=lambda: device, duration_ns=lambda: ns
        )

    events = [
        event("cudnn_sdpa_kernel", DeviceType.CUDA, 4_000),
        event("Memset (Device)", DeviceType.CUDA, 1_000),
        event("Memcpy DtoD (Device -> Device)", DeviceType.CUDA, 2_000),
        event("aten::scaled_dot_product_attention", DeviceType.CPU, 50_000),
    ]
    assert device_times(events, calls=1) == (4.0, 3.0, 1.0, {"cudnn_sdpa_kernel": 4.0})


@pytest.mark.parametrize(
    "bad",
    [
        {"us": -1.0},
        {"us": float("inf")},
        {"launches": float("nan")},
        {"top": {"k": -2.0}},
        {"top": {"k" * 121: 2.0}},
        {"top": {f"k{i}": 1.0 for i in range(9)}},
    ],
)
def test_a_worker_cannot_report_negative_or_endless_kernel_times(bad):
    with pytest.raises(protocol.Violation):
        protocol.parse({"op": "kernels", **bad}, protocol.Kernels)


def _judged(tmp_path, **options) -> tuple[list[dict], int]:
    """The honest candidate's rows on two workloads, and the seconds its second case spent
    getting a worker (a start imports torch in a new process: a second or more here)."""
    task = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())
    candidate = write_candidate(tmp_path, "honest", (SOLUTIONS / "honest_main.py").read_text())
    request = candidates_request(tmp_path, [candidate], workloads=task["dev"][:2], **options)
    judge(load_dataset(ROOT / "dataset"), request)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("solution") == "honest"]
    return rows, rows[-1]["breakdown"]["worker"]


def test_kernel_times_are_asked_for_and_their_worker_is_not_timed_again(tmp_path):
    # On the CPU there is no CUPTI: the row says so; the path through referee, protocol
    # and worker still runs. Each case's worker is replaced after its profiled sample, so
    # that the profiler, which may stay attached to a process, is in no later timing.
    rows, second_worker = _judged(tmp_path, kernel_times=True, regime="burst")
    assert len(rows) == 2 and all(r["status"] == "passed" for r in rows), rows
    for row in rows:
        kernels = schema.TimingRecord.model_validate(row["timing"]).kernels
        assert kernels is not None and kernels.us is None
        assert kernels.error.startswith(
            "RuntimeError: kernel durations come from CUPTI, on a CUDA device only"
        )
        # burst: a few calls, each alone after the device rested, as ncu runs a kernel
        assert kernels.rest_ms == KERNEL_ALONE_REST_SECONDS * 1e3 == 2.0
        eager_calls = row["timing"]["eager"]["calls_per_sample"]
        assert kernels.calls == min(eager_calls, KERNEL_ALONE_CALLS, row["timing"]["sets"]["count"])
    assert second_worker > 0.3, second_worker  # a new worker


def test_kernel_times_follow_each_other_in_the_sustained_regime(tmp_path):
    rows, _ = _judged(tmp_path, kernel_times=True, regime="sustained")
    for row in rows:
        kernels = row["timing"]["kernels"]
        assert kernels["rest_ms"] == 0.0
        assert kernels["calls"] == min(
            row["timing"]["eager"]["calls_per_sample"], row["timing"]["sets"]["count"]
        )


def test_a_kernel_sample_with_rest_runs_each_call_alone(monkeypatch):
    # What the worker does on CUDA, with the device, the profiler and the clock faked:
    # every call starts after a synchronize and the rest, and the sample ends synchronized.
    import contextlib

    import torch

    from inference_kernels.judge import timing

    log = []
    events = [_event("kernel", 3_000), _event("kernel", 5_000)]
    profiled = SimpleNamespace(
        profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events))
    )
    monkeypatch.setattr(timing, "_synchronize", lambda device: log.append("sync"))
    monkeypatch.setattr(timing.time, "sleep", lambda s: log.append(f"rest {s}"))
    monkeypatch.setattr(timing, "_profile", lambda **_: contextlib.nullcontext(profiled))
    slots = [lambda i=i: log.append(f"call {i}") for i in range(2)]
    cuda = torch.device("cuda", 0)
    assert timing.kernel_sample(slots, cuda, 0.002) == (4.0, 0.0, 1.0, {"gemm_kernel": 4.0})
    assert log == ["sync", "sync", "rest 0.002", "call 0", "sync", "rest 0.002", "call 1", "sync"]
    log.clear()
    timing.kernel_sample(slots, cuda)
    assert log == ["sync", "call 0", "call 1", "sync"]


def test_without_kernel_times_no_profiler_runs_and_the_worker_stays(tmp_path):
    rows, second_worker = _judged(tmp_path)
    assert len(rows) == 2 and all(r["timing"].get("kernels") is None for r in rows)
    assert second_worker < 0.3, second_worker  # the first case's, thawed
