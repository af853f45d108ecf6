"""The referee's sampler over a scripted worker whose clock the test sets (a fake device
timer): methods interleaved round by round, adaptive stopping, the outside check, clocks."""

import contextlib
import statistics
import time
from types import SimpleNamespace

import pytest
import torch

from inference_kernels.judge import protocol, sampling, schedule
from inference_kernels.judge.clocks import Reading
from inference_kernels.judge.sampling import Sampler
from inference_kernels.judge.schedule import Plan
from inference_kernels.judge.workers import CaseEnded

REF = protocol.TensorRef(buffer=0, offset=0, dtype="float32", shape=[1], stride=[1])
METHODS = ["eager", "prepared", "graph"]


class ScriptedWorker:
    """Answers every message at once; a sample's time is ``times(method, index)`` us per
    call, and the referee "sees" ``seen`` times that long from outside."""

    names = ["out"]

    def __init__(self, times, seen=1.0, graph_named=None):
        self.times, self.seen, self.log = times, seen, []
        self.channel = SimpleNamespace(arrived=0.0)
        # graph_named(calls): the outputs a graph's Ready names (as on CUDA), its samples
        # then answering "same"
        self.graph_named = graph_named

    def ask(self, message, fds, *kinds):
        self.log.append((message["op"], message.get("method"), message.get("index")))
        method = message["method"]
        if message["op"] == "method":
            if method == "graph" and self.graph_named is not None:
                named = self.graph_named(message["calls"])
                return protocol.Ready(op="ready", method=method, outputs=named)
            return protocol.Ready(op="ready", method=method)
        calls, index = message["calls"], message["index"]
        us = self.times(method, index)
        seen = self.seen(method, index) if callable(self.seen) else self.seen
        self.channel.arrived = time.perf_counter() + seen * us * 1e-6 * calls
        outputs = [[REF]] * calls if index >= 0 else []
        if method == "graph" and self.graph_named is not None and index >= 0:
            outputs = "same"
        return protocol.Sample(
            op="sample", method=message["method"], index=index, us=us, outputs=outputs, buffers=[]
        )

    def read(self, refs, shapes):
        return [torch.tensor([float(self.log[-1][2])])]  # the sample it came from


class Sets:
    count = 64
    share_integers = False

    def refresh(self, windows, fresh):
        pass

    def changed(self, windows, fresh):
        return []


def sampler(worker, trials=7):
    fresh = SimpleNamespace(draw=lambda count: [{}] * count)
    made = Sampler(worker, Sets(), fresh, torch.device("cpu"), Plan(1, 4, trials))
    made.fit = 4  # calls per sample stay 4: 4 x 5 ms is long enough for the outside check
    return made


def timed(worker):
    return [(method, index) for op, method, index in worker.log if op == "go" and index >= 0]


def test_methods_are_sampled_in_rounds_and_steady_ones_stop_when_converged():
    worker = ScriptedWorker(lambda method, index: 5000.0)
    entries = sampler(worker).time_methods(METHODS, "prepared")
    rounds = schedule.MIN_ROUNDS
    assert timed(worker) == [(m, i) for i in range(rounds) for m in METHODS]
    for method in METHODS:
        assert entries[method]["stopped"] == "converged"
        assert entries[method]["rounds"] == rounds
        assert entries[method]["median_half_width"] == 0.0
    assert entries["graph"]["launch"] == "prepared"


def test_a_noisy_phase_takes_the_time_the_steady_ones_left_then_stops_at_the_cap():
    noisy = lambda method, index: 5000.0 * (1.2 if index % 2 and method == "eager" else 1.0)  # noqa: E731
    worker = ScriptedWorker(noisy)
    entries = sampler(worker).time_methods(METHODS, None)
    assert entries["graph"]["stopped"] == entries["prepared"]["stopped"] == "converged"
    assert entries["graph"]["rounds"] == schedule.MIN_ROUNDS
    assert entries["eager"]["stopped"] == "time_cap"
    # the case's time is 7 rounds of all three; two stopped after 6, so eager gets more
    assert entries["eager"]["rounds"] > 7
    assert entries["eager"]["median_half_width"] > schedule.TARGET_HALF_WIDTH


def test_every_sample_is_read_alike_whether_it_is_kept_for_checking_or_not():
    """Were only the kept samples read, a worker timing the referee's reply would know
    which they are, and could stop being stale only there."""
    worker = ScriptedWorker(lambda method, index: 5000.0)
    reads = []
    worker.read = lambda refs, shapes: reads.append(worker.log[-1][1:]) or [torch.zeros(1)]
    made = sampler(worker)
    made.time_methods(METHODS, None)
    assert reads == timed(worker)  # one read after every timed sample, in order
    for method in METHODS:
        assert len(made.checks[method]) == sampling.CHECKS


def test_the_rounds_samples_follow_one_another_after_the_sampler_gap():
    """On a GPU (``sampling.SAMPLE_GAP_SECONDS``) each timed sample of the rounds has its
    sets refreshed (and is sent) at least ``gap`` after the one before it ended as the
    referee saw it, and the first as long after the steady load (``settle``): a
    power-capped kernel's time follows that idle (benchmarks/sample_gaps.py). The referee's
    bookkeeping counts toward the gap; the refresh comes after the wait, so a sample's
    inputs are never on the device during it. The sizing samples before do not wait."""
    assert sampling.SAMPLE_GAP_SECONDS == 0.020  # the value measured for (the docstring's)
    worker = ScriptedWorker(lambda method, index: 1000.0)
    made = sampler(worker)
    made.gap = 0.03
    ended = []
    made.settle = lambda: ended.append(time.perf_counter())
    refreshed = []
    made.sets.refresh = lambda windows, fresh: refreshed.append(time.perf_counter())
    ask = worker.ask

    def answered(message, fds, *kinds):
        reply = ask(message, fds, *kinds)
        if ended and message["op"] == "go":  # the rounds' samples
            ended.append(worker.channel.arrived)
        return reply

    worker.ask = answered
    made.time_methods(["graph"], None)
    rounds = refreshed[-(len(ended) - 1) :]  # the rounds' refreshes, one a sample
    assert len(rounds) == schedule.MIN_ROUNDS
    waits = [start - end for end, start in zip(ended[:-1], rounds, strict=True)]
    assert all(wait >= 0.03 for wait in waits), waits  # the gap, every time
    # and no more than the gap: a wait of its own on top of the gap would move them all
    # (one hiccup of the machine moves one: 0.055 s of six, CI at 43b75b8)
    assert statistics.median(waits) < 0.045, waits
    made = sampler(ScriptedWorker(lambda method, index: 1000.0))  # the CPU's: no gap
    began = time.monotonic()
    made.time_methods(["graph"], None)
    assert time.monotonic() - began < 0.03 * schedule.MIN_ROUNDS


def test_a_phase_cannot_be_stretched_beyond_its_share_of_rounds():
    fast_after_six = lambda method, index: 5000.0 if index < 6 or method == "graph" else 1.0  # noqa: E731
    entries = sampler(ScriptedWorker(fast_after_six)).time_methods(["eager", "graph"], None)
    assert entries["eager"]["rounds"] <= schedule.ROUNDS_PER_TRIAL * 7


@pytest.mark.parametrize("method", METHODS)
def test_a_phase_whose_clock_reports_a_fifth_of_what_was_seen_is_suspect(method):
    worker = ScriptedWorker(lambda m, index: 5000.0 / (5 if m == method else 1))
    worker.seen = 1.0
    made = sampler(worker)
    original = worker.ask

    def ask(message, fds, *kinds):  # the referee sees 5 ms per call whatever is reported
        reply = original(message, fds, *kinds)
        if message["op"] == "go":
            worker.channel.arrived = time.perf_counter() + 5e-3 * message["calls"]
        return reply

    worker.ask = ask
    made.time_methods(METHODS, None)
    assert [s.split(":")[0] for s in made.suspect] == [method]


def test_clocks_read_after_each_sample_are_summarized_with_the_time_in_cycles():
    made = sampler(ScriptedWorker(lambda method, index: 500.0 if method == "graph" else 5000.0))
    readings = iter([1470, 1485] * 100)
    made.clock = lambda: Reading(next(readings), 3201, 690.0, 0x4)
    entries = made.time_methods(METHODS, None)
    clocks = entries["graph"]["clocks"]
    assert len(clocks["sm_mhz"]) == entries["graph"]["rounds"]
    assert clocks["throttle_reasons"] == ["sw_power_cap"]
    assert clocks["median_power_w"] == 690.0
    assert clocks["median_cycles"] == round(entries["graph"]["median_us"] * clocks["median_sm_mhz"])


def no_graph(worker):
    """The worker cannot capture a graph: its setup answers unavailable."""
    original = worker.ask

    def ask(message, fds, *kinds):
        if message["op"] == "method" and message["method"] == "graph":
            return protocol.Unavailable(op="unavailable", method="graph", error="no capture")
        return original(message, fds, *kinds)

    worker.ask = ask


def test_a_graph_that_cannot_be_captured_leaves_the_other_phases_timed():
    worker = ScriptedWorker(lambda method, index: 5000.0)
    no_graph(worker)
    entries = sampler(worker).time_methods(METHODS, None)
    assert entries["graph"] == {"error": "no capture"}
    assert entries["eager"]["rounds"] == entries["prepared"]["rounds"] == schedule.MIN_ROUNDS


def test_mutated_inputs_end_the_case_in_the_round_they_are_seen():
    made = sampler(ScriptedWorker(lambda method, index: 5000.0))
    made.sets.changed = lambda windows, fresh: ["state"]
    with pytest.raises(CaseEnded) as ended:
        made.time_methods(METHODS, None)
    assert ended.value.status == "input_mutated"


def test_samples_that_adaptive_repetition_adds_can_be_the_checked_ones():
    """The attack: honest (and slow, and noisy, so the phase goes on) in the first rounds,
    stale and fast after them, while a quiet graph phase converges and leaves the time to
    eager. Checks picked among the first rounds would never see a stale answer; picked
    among all rounds, at least one lands on a stale sample in most cases."""

    def times(method, index):
        if method == "graph":
            return 5000.0
        return 5000.0 * (1.2 if index % 2 else 1.0) if index < schedule.MIN_ROUNDS else 50.0

    runs, late = 200, 0
    for _ in range(runs):
        made = sampler(ScriptedWorker(times))
        entries = made.time_methods(["eager", "graph"], None)
        assert entries["eager"]["rounds"] > 2 * schedule.MIN_ROUNDS  # the stale rounds won
        checked = [int(outputs[0]) for _, outputs in made.checks["eager"]]
        assert len(checked) == sampling.CHECKS
        late += any(index >= schedule.MIN_ROUNDS for index in checked)
    assert late / runs > 0.85  # about 0.93 with 2 checks among 22 rounds


def test_eager_samples_are_sized_by_a_warm_sample_not_by_the_calibration(monkeypatch):
    """The calibration's few calls carry a sample's fixed cost (the device waking up, the
    first call's issue), so a warm eager sample of the plan's calls sizes eager samples to
    SAMPLE_MIN_SECONDS, as it does a graph's; on the CPU too (a calibration taken on a busy
    machine gave samples too short for the outside check to hold its pauses)."""

    def times(method, index):
        return 1000.0

    class Grown(Sets):
        def __init__(self, count, old):
            self.count = count

    sizes = {}
    for kind in ("cuda", "cpu"):
        worker = ScriptedWorker(times)
        made = sampler(worker)
        made.device, made.fit = torch.device(kind), 1000
        made.plan = Plan(1, 16, 7)  # 16 calls: the calibration's 2 ms a call
        made.grow = Grown
        monkeypatch.setattr(made, "_probe", lambda: 0.0)
        entries = made.time_methods(["eager", "graph"], None)
        sizes[kind] = entries["eager"]["calls_per_sample"], entries["graph"]["calls_per_sample"]
    assert sizes["cuda"] == (27, 27)  # 26.7 ms of 1 ms calls
    assert sizes["cpu"] == (64, 64)  # 64 ms of 1 ms calls


def test_the_load_stops_for_sizing_samples_and_ends_right_before_the_rounds(monkeypatch):
    """The referee's background load (sustained regime) runs while methods are set up: it
    is held off (``alone``) for every sample that sizes the schedule, the calibration's and
    each method's sizing sample, and ends (``settle``, the steady load) right before the
    first timed sample, with no message to the worker in between."""
    worker = ScriptedWorker(lambda method, index: 1000.0)
    made = sampler(worker)
    made.device, made.fit, made.plan = torch.device("cuda"), 1000, Plan(4, 16, 7)
    made.grow = type("Grown", (Sets,), {"__init__": lambda self, count, old: None})
    monkeypatch.setattr(made, "_probe", lambda: 0.0)

    @contextlib.contextmanager
    def alone():
        worker.log.append(("alone", None, None))
        yield
        worker.log.append(("loaded", None, None))

    made.alone = alone
    made.settle = lambda: worker.log.append(("settle", None, None))
    made.calibrate()
    made.time_methods(["eager", "graph"], None)
    log, inside = worker.log, False
    for op, method, index in log:
        inside = {"alone": True, "loaded": False}.get(op, inside)
        if op == "method":  # a capture or a warmup setup: under the load
            assert not inside, log
        if op == "go" and index == -1 and method == "graph":  # its sizing sample
            assert inside, log
    calibration = [entry for entry in log if entry[0] != "method"][:3]
    bracket = [("alone", None, None), ("loaded", None, None)]
    assert calibration == [bracket[0], ("go", "eager", -1), bracket[1]]  # one sample
    first = next(i for i, (op, _, index) in enumerate(log) if op == "go" and index >= 0)
    assert [entry[0] for entry in log].count("settle") == 1 and log[first - 1][0] == "settle"


def test_no_settle_when_nothing_is_timed_and_a_resampled_method_is_set_up_under_the_load(
    monkeypatch,
):
    """A case whose only method is a graph that cannot be captured times nothing: no steady
    load is spent on it (the referee then times eager calls, with a settle of their own).
    A method sampled again, longer, is set up after the load came back (``resume``), and
    its rounds follow a settle of their own, with no message to the worker in between."""
    worker = ScriptedWorker(lambda method, index: 1000.0)
    no_graph(worker)
    made = sampler(worker)
    made.settle = lambda: worker.log.append(("settle", None, None))
    made.resume = lambda: worker.log.append(("resume", None, None))
    assert made.time_methods(["graph"], None) == {"graph": {"error": "no capture"}}
    assert [entry[0] for entry in worker.log].count("settle") == 0

    worker = ScriptedWorker(lambda method, index: 1000.0)
    made = sampler(worker)
    made.settle = lambda: worker.log.append(("settle", None, None))
    made.resume = lambda: worker.log.append(("resume", None, None))
    asked = iter([8, None])  # the first rounds were too short: once, 8 calls
    monkeypatch.setattr(made, "_longer", lambda samples, iters: next(asked))
    entries = made.time_methods(["graph"], None)
    assert entries["graph"]["resampled"] is True
    ops = [entry[0] for entry in worker.log]
    resumed = ops.index("resume")
    assert ops.count("settle") == 2 and ops.count("resume") == 1
    assert ops.index("settle") < resumed  # the first rounds came before
    assert "method" in ops[resumed:]  # the longer graph was set up after the load came back
    second = resumed + ops[resumed:].index("settle")
    assert "method" not in ops[second:]
    timed_after = [entry for entry in worker.log[second + 1 :] if entry[0] == "go"]
    assert timed_after and all(index >= 0 for _, _, index in timed_after)


def probed(waits_ms, before_ms=()):
    """A sampler whose idle probe after timed sample j (all phases, in order) waits
    ``waits_ms[j]`` ms, and before its inputs are written ``before_ms[j]`` (0 past the
    lists), on a "cuda" device."""
    worker = ScriptedWorker(lambda method, index: 1000.0 + max(index, 0))  # sample j: 1000+j
    made = sampler(worker)
    made.device, made.fit = torch.device("cuda"), 1000
    made.grow = lambda count, old: Sets()
    waits, before = iter(waits_ms), iter(before_ms)
    made._probe = lambda: next(waits, 0.0) / 1e3
    made._probe_before = lambda: next(before, 0.0) / 1e3
    return worker, made


def test_a_sample_the_gpu_was_busy_after_ranks_slowest_and_the_next_does_not_count():
    """An honest case met a device stall of 2-3 ms after a sample once (the referee's load
    before it): it is not timing_suspect for that. The sample counts as the phase's slowest
    (the probe's wait only bounds the work left running from below: what the sample
    reports cannot be vouched for), the next does not count (that work may reach into it,
    or have prepared its outputs), and the row says which and why."""
    worker, made = probed([0, 0, 3.2])  # the third sample (round 2)
    entry = made.time_methods(["graph"], None)["graph"]
    assert made.suspect == []
    assert entry["not_counted"] == [3]
    assert entry["ranked_slowest"] == [2]
    assert len(timed(worker)) == entry["rounds"] + 1
    samples = entry["samples_us"]
    assert samples[:2] == [1000.0, 1001.0] and samples[2] == max(samples) > 1002.0
    assert 1003.0 not in samples
    assert entry["outside"]["samples_us"][2] < entry["outside"]["samples_us"][4]  # raw there
    assert made.busy_after == [
        "graph sample 2: the GPU was still busy 3.2 ms after the worker reported the sample done"
    ]


def test_a_sample_reported_fast_with_work_left_running_cannot_lower_the_median():
    """Work hidden after the sample's clock, with the probe's wait short (a lower bound):
    the sample reports far less than the others, and would pull the median down a rank;
    ranked slowest, it pushes it up instead (review of 9fd0248)."""
    worker = ScriptedWorker(lambda method, index: 800.0 if index in (0, 1) else 1000.0 + index)
    made = sampler(worker)
    made.device, made.fit = torch.device("cuda"), 1000
    made.grow = lambda count, old: Sets()
    waits = iter([2.1, 0.0, 2.1])
    made._probe = lambda: next(waits, 0.0) / 1e3
    made._probe_before = lambda: 0.0
    entries = made.time_methods(["eager", "graph"], None)
    for entry in entries.values():
        samples, ranked = entry["samples_us"], entry.get("ranked_slowest", [])
        assert 800.0 not in samples
        vouched = [t for i, t in enumerate(samples) if i not in ranked]
        assert entry["median_us"] >= statistics.median(vouched)
    assert entries["eager"]["ranked_slowest"] == [0, 1]


def test_a_solution_that_leaves_work_running_in_many_samples_is_still_suspect():
    """Past PROBE_RETAKES such samples the case is timing_suspect, as every such sample
    made it before (attack ``side_stream`` leaves a matmul running in every sample)."""
    _, made = probed([5.0] * 40)
    made.time_methods(["graph"], None)
    assert len(made.busy_after) > sampling.PROBE_RETAKES
    assert made.suspect[0] == (
        f"graph sample {sampling.PROBE_RETAKES}: the GPU was still busy 5.0 ms after the worker "
        f"reported the sample done ({sampling.PROBE_RETAKES + 1} samples of the case)"
    )


def test_work_left_running_to_prepare_the_next_sample_gains_nothing():
    """A solution could leave work running after a sample that prepares the next one's
    outputs, to be fast there: the sample it leaves work after ranks slowest, the prepared
    one is not timed, and beyond PROBE_RETAKES the case is suspect."""
    worker, made = probed([4.0, 0.0] * 20)
    entry = made.time_methods(["graph"], None)["graph"]
    assert made.suspect  # the third time
    assert entry["not_counted"] == [1, 3]
    assert entry["ranked_slowest"] == [0, 1]  # rounds 0 and 2: the first two counted
    assert 1001.0 not in entry["samples_us"] and 1003.0 not in entry["samples_us"]


def test_work_launched_between_samples_that_runs_into_the_next_inputs_gains_nothing():
    """A kernel the worker launches after its reply (during its catch-up, or in the gap)
    could wait on the sets and compute the next sample's outputs as the referee writes its
    inputs, the worker's processes halted (a helper's review at 3bc4545; the probe after a
    sample runs before the catch-up). The probe runs again as the worker is halted for the
    refresh: a sample the GPU was busy before does not count, and past PROBE_RETAKES of
    them the case is suspect."""
    worker, made = probed([], [0, 4.0, 0, 0, 0])  # before the second sample
    entry = made.time_methods(["graph"], None)["graph"]
    assert made.suspect == []
    assert entry["not_counted"] == [1]
    assert 1001.0 not in entry["samples_us"]
    assert made.busy_after == [
        "graph sample 1: the GPU was still busy 4.0 ms as the referee began to write its "
        "inputs, the worker halted"
    ]
    # a stall over both probes of one sample is one of PROBE_RETAKES, not two
    worker, made = probed([0, 2.5], [0, 4.0])
    entry = made.time_methods(["graph"], None)["graph"]
    assert made.suspect == [] and entry["not_counted"] == [1, 2]
    assert made.busy_after == [
        "graph sample 1: the GPU was still busy 2.5 ms after the worker reported the sample "
        "done (and 4.0 ms before its inputs)"
    ]
    _, made = probed([], [3.0] * 40)
    made.time_methods(["graph"], None)
    assert len(made.busy_after) > sampling.PROBE_RETAKES
    assert made.suspect[0].startswith(f"graph sample {sampling.PROBE_RETAKES}: the GPU was")
    assert made.suspect[0].endswith(f"({sampling.PROBE_RETAKES + 1} samples of the case)")


def test_a_graph_names_its_outputs_when_captured_and_every_sample_answers_same():
    """On CUDA a graph's outputs stay where they are: the worker names them in its Ready
    (exported then, outside any sample: in the first sample they cost the referee's time
    15 us a call, H200 audit at 962fd84) and every timed sample answers "same"; the
    referee reads what the Ready named after every sample."""
    worker = ScriptedWorker(lambda method, index: 5000.0, graph_named=lambda calls: [[REF]] * calls)
    made = sampler(worker)
    entries = made.time_methods(["graph"], None)
    assert entries["graph"]["rounds"] == schedule.MIN_ROUNDS
    assert len(made.checks["graph"]) == sampling.CHECKS


def test_a_graph_sample_that_names_outputs_again_ends_the_case():
    """Once its Ready named them, a graph's outputs cannot move: a sample naming them again
    (it would only make the referee read more while the device rests) is refused."""
    worker = ScriptedWorker(lambda method, index: 5000.0, graph_named=lambda calls: [[REF]] * calls)
    ask = worker.ask
    worker.ask = lambda message, fds, *kinds: (
        ask(message, fds, *kinds).model_copy(update={"outputs": [[REF]] * message["calls"]})
        if message["op"] == "go" and message["index"] >= 0
        else ask(message, fds, *kinds)
    )
    with pytest.raises(CaseEnded) as ended:
        sampler(worker).time_methods(["graph"], None)
    assert (ended.value.status, ended.value.error) == (
        "protocol_violation",
        "a graph's outputs moved",
    )


def test_a_ready_for_another_method_ends_the_case():
    worker = ScriptedWorker(lambda method, index: 5000.0)
    ask = worker.ask
    worker.ask = lambda message, fds, *kinds: (
        protocol.Ready(op="ready", method="eager")
        if message["op"] == "method" and message["method"] == "graph"
        else ask(message, fds, *kinds)
    )
    with pytest.raises(CaseEnded) as ended:
        sampler(worker).time_methods(["graph"], None)
    assert ended.value.error == "the worker set up another method"


def test_a_graph_whose_ready_names_too_few_calls_ends_the_case():
    worker = ScriptedWorker(lambda method, index: 5000.0, graph_named=lambda calls: [[REF]])
    with pytest.raises(CaseEnded) as ended:
        sampler(worker).time_methods(["graph"], None)
    assert ended.value.status == "protocol_violation"
    assert "outputs of 1 calls for a sample of 4" in ended.value.error


def test_a_solution_that_rests_the_device_before_its_clock_in_a_few_samples_gains_nothing():
    """The outside check goes by the median, so a solution may idle before starting its own
    clock in a minority of samples without being suspect; each such sample runs on a rested
    device and reports faster (here 900 us against 1,000). Each is late (the referee saw
    ten times what it reports: past the CPU's loose limit) and ranks slowest: the median
    can only go up."""
    rested = {1, 4}
    worker = ScriptedWorker(
        lambda method, index: 900.0 if index in rested else 1000.0 + index,
        seen=lambda method, index: 10.0 if index in rested else 1.0,
    )
    made = sampler(worker)
    entry = made.time_methods(["graph"], None)["graph"]
    assert made.suspect == []  # most samples are on time
    assert entry["late"] == entry["ranked_slowest"] == [1, 4]
    assert 900.0 not in entry["samples_us"]
    honest = [1000.0 + index for index in range(entry["rounds"]) if index not in rested]
    assert entry["median_us"] >= statistics.median(honest)
    assert entry["outside"]["samples_us"][1] > 9.9 * 900.0  # the raw figures stay in the row


def test_on_a_gpu_a_short_sample_seen_a_few_ms_late_is_a_spike_not_a_rest(monkeypatch):
    """Samples of 4 ms (few input sets fit): the outside limit is then 6.6 ms, and the
    referee's view of honest samples has spikes of a few ms. One seen at 8.8 ms (4.8 ms
    beyond the worker's time) is not late: a rest that short buys nothing that counts. One
    seen at 16 ms (a rest of 12 ms before the worker's clock) is, and ranks slowest."""
    worker = ScriptedWorker(
        lambda method, index: 1000.0 if index != 4 else 950.0,
        seen=lambda method, index: {2: 2.2, 4: 4.0}.get(index, 1.1),
    )
    made = sampler(worker)
    made.device = torch.device("cuda")
    monkeypatch.setattr(made, "_probe", lambda: 0.0)
    entry = made.time_methods(["graph"], None)["graph"]
    assert entry["calls_per_sample"] == 4
    assert entry["late"] == entry["ranked_slowest"] == [4]
    assert made.suspect == []


def test_a_method_is_sized_by_a_sample_only_where_more_calls_are_possible():
    """A sizing sample can only raise the plan's calls; where they are already the most a
    sample may have (the sets that fit, or MAX_CALLS) none is taken."""

    def sizing_samples(fit):
        worker = ScriptedWorker(lambda method, index: 5000.0)
        made = sampler(worker)
        made.fit = fit
        made.time_methods(["graph"], None)
        return [entry for entry in worker.log if entry == ("go", "graph", -1)]

    assert sizing_samples(4) == []  # the plan's 4 calls are all the sets that fit
    assert sizing_samples(64) == [("go", "graph", -1)]
