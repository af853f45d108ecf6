"""Timing the methods of one case, driven by the referee from outside the sandbox.

For each sample the referee writes fresh values (``fresh.py``) into the input sets the
sample will use, tells the worker to go, and waits for its report. It then:

- times the sample from outside and holds the worker's own time to it (``outside.py``);
- reads the GPU's clocks (``clocks.py``), and on CUDA checks that the GPU is idle
  (``probe``): work still running when the worker reported the sample done is work its
  clock did not see;
- keeps CHECKS of the method's samples, a uniform secret choice among all of them (how
  many there will be is not known in advance: reservoir sampling), one call picked at
  random in each, its outputs copied out with the window its inputs came from; the
  referee computes that window's reference and compares (``checks``). Every call must be
  right, in every sample, the later rounds included, since any could be the one checked;
- compares every input set the sample used with what it wrote (``input_mutated``).

The schedule (calls per sample, rounds, when a phase stops) is ``schedule.py``'s.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import statuses
from . import outside, protocol, timing
from .clocks import Reader
from .fresh import Call, Fresh
from .outside import ALLOWANCE, TOLERANCE
from .schedule import (
    MAX_CALLS,
    MIN_ROUNDS,
    ROUNDS_PER_TRIAL,
    SAMPLE_MIN_SECONDS,
    TARGET_HALF_WIDTH,
    Phase,
    Plan,
    summary,
)
from .sets import InputSets
from .stopwatch import Stopwatch
from .workers import CaseEnded, WorkerHandle

# Samples of each method whose outputs are checked, one call each. One was too few: a
# solution that remembered answers by input address was right on the calls of its first
# sample (all new addresses) and stale on the others; the one checked call fell in that
# first sample a third of the time (attack ``cache_by_pointer``). They are chosen among all
# of a phase's samples: chosen among the first rounds only, a solution honest there and
# stale in the rounds that adaptive repetition adds would never be checked.
CHECKS = 2
# Eager calls on a graph's side stream before it is captured (``timing.capture``), for what
# a stream sets up lazily (a cuBLAS workspace): the case's first call and the calibration's
# samples have run the solution already, and the capture's own replay warms the graph. The
# plan's warmup (up to ten calls, twice with an extension) ran under the background load
# and shared the device with it: a case's setup grew 0.12 s on the H200 (c839524 against
# ae23d6d, docs/measurements/case-breakdown.md).
CAPTURE_WARMUP = 1
PROBE_LIMIT = 0.002  # seconds for a one-element kernel on a GPU that should be idle
# Samples of a case after which the GPU may be found busy past PROBE_LIMIT before the case
# is timing_suspect. Such a sample counts as the phase's slowest (the probe's wait is only
# a lower bound of the work left running: what the sample reports cannot be vouched for),
# and the sample after it, of any phase, does not count (that work may reach into it, or
# may have prepared its outputs); the phase takes another.
# Honest baselines met it: a GEMM 2.3 and 3.2 ms (4f62343), a neighborhood attention 2.3 ms
# (c839524), each once in a case, right after the referee's load; the device stalled
# 14.5 ms after a load with nothing else on it (benchmarks/clock_stall.py). A solution that
# leaves work running in more samples than this is timing_suspect as before. One that does
# it in fewer gains nothing: its own sample ranks last, the next is not timed, and it cannot
# drop a sample after seeing that it was slow.
PROBE_RETAKES = 2
# Late samples: a sample whose own round trip, seen by the referee, exceeds the outside
# check's limit (outside.py) counts as the phase's slowest too ("late" in the row). The
# check goes by the median of the samples, so a solution could idle before starting its
# clock in a minority of them (three of seven) unseen, and each such sample runs on a rested
# device: a power-capped GEMM 525 us after the judge's 20 ms gap, 518 after 120 ms
# (benchmarks/sample_gaps.py). Ranked slowest, such samples can only push its median up.
# Honest samples met it in the H200 audit at 962fd84 almost only as the first sample of the
# rounds, when the worker exported a graph's outputs (15 us a call); a graph's Ready now
# names them. At b6e1d3b they met it in 25 of about 4,300 samples, nearly all where a
# sample is short (the QSA sparse decode's 4-16 ms: few of its input sets fit, and the
# limit is then 2.6-4.4 ms) and the referee's view had one of its spikes of 2-6 ms (0.5-5%
# of samples in every definition). On a GPU a sample is late only when the referee also
# saw more than outside.LATE_FLOOR beyond the worker's time: a rest that short on top of
# the gap buys a power-capped GEMM about 0.1% (525.2 us after 20 ms of rest, 524.5 after
# 25, benchmarks/sample_gaps.py), and 18 of those 25 honest samples were under it
# (docs/measurements/case-breakdown.md, nineteenth session).

# On a GPU, a sample of the rounds is sent at least this long after the one before it ended
# as the referee saw it (the first: after the steady load). The device idles in between
# while the referee compares, probes and reads the clocks, and a power-capped kernel's time
# follows that idle: on one H200 a bf16 GEMM took 600 us a call with none, 537 with 13 ms,
# 525 with 20 and 523 with 30 (benchmarks/sample_gaps.py --rest-first), so a gap left to
# the bookkeeping's speed (17-18 ms at c839524, 12.6-13 ms at 7829dc8) moved every time
# with it. In the judge, 20 ms gave the GEMM 520.7 us (spread of five copies 0.4%) and the
# SDPA 166.3 (0.9%) where the judge before issue 13 gave 521.7 and 165.4 on the same GPU
# (docs/measurements/h200-timing-fidelity.md, eighteenth session). The times are then those
# of about 27 ms of a kernel after 20 ms of rest within sustained load, not of back-to-back
# calls (triton's do_bench_cudagraph: 0.87 of its GEMM figure). The bookkeeping counts
# toward the gap; the refresh of the sets follows the wait, so a sample's inputs are never
# on the device while it lasts.
SAMPLE_GAP_SECONDS = 0.020


@dataclass
class Sampler:
    """Runs the samples of each method of one case."""

    worker: WorkerHandle
    sets: InputSets
    fresh: Fresh
    device: torch.device
    plan: Plan
    cold_l2: bool = False
    output_bytes: int = 0  # of one call's outputs
    fit: int = 1  # input sets that fit in memory
    grow: Any = None  # grow(count, sets) -> ``count`` sets replacing ``sets``, mapped
    # method -> (window, outputs) of the calls checked after the fact
    checks: dict[str, list[tuple[Call, list[torch.Tensor]]]] = field(default_factory=dict)
    shapes: list[torch.Tensor] = field(default_factory=list)  # outputs' expected shape, dtype
    refs: dict[str, list] = field(default_factory=dict)  # per method, the last output references
    suspect: list[str] = field(default_factory=list)
    busy_after: list[str] = field(default_factory=list)  # samples the GPU was busy after
    _skip_next: bool = False  # the last sample found the GPU busy: the next is not counted
    _before: float = 0.0  # the idle probe's wait as the last timed sample's inputs were written
    clock: Reader | None = None  # the device's clocks, read after each sample (clocks.py)
    # The referee's load on the device (sustained regime, busy.py): it runs while methods
    # are set up (captures, warmups); ``alone`` holds it off for a sample that sizes the
    # schedule, ``settle`` ends it right before the timed rounds, with the steady load, and
    # ``resume`` brings it back after them, for a method to be sampled again.
    alone: Callable[[], AbstractContextManager] = nullcontext
    # ``halt`` stops every process of the worker (``WorkerHandle.halt``; ``ask`` halts it
    # as a sample's reply arrives) and ``wake`` lets it run again: halted from its reply
    # until the sample's outputs are copied and its inputs compared, and while the sets are
    # refreshed (no thread of a solution's reads a sample's inputs before it starts)
    halt: Callable[[], None] = lambda: None
    wake: Callable[[], float | None] = lambda: None  # (when the worker could first run)
    # ``catch_up`` wakes the worker and waits until it has done what it does after a reply
    # (``WorkerHandle.catch_up``), before it is halted for the next sample's inputs
    catch_up: Callable[[], None] = lambda: None
    settle: Callable[[], None] = lambda: None
    resume: Callable[[], None] = lambda: None
    watch: Stopwatch = field(default_factory=Stopwatch)  # the case's (its setup, refresh...)
    gap: float = 0.0  # least seconds from a sample's end to the next (SAMPLE_GAP_SECONDS on a GPU)
    _ended: float | None = None  # perf_counter when the steady load or the last sample ended
    # methods whose outputs the worker named when they were set up (a graph on CUDA); the
    # input sets each method was last set up on
    named: set[str] = field(default_factory=set)
    _set_up_on: dict[str, Any] = field(default_factory=dict)
    _random: random.SystemRandom = field(default_factory=random.SystemRandom)
    _scratch: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "cuda" if self.device.type == "cuda" else "cpu"

    def go(self, method: str, index: int, windows: list[Call], probe: bool = False):
        """Refresh the sets with ``windows``, run one sample on them; (the worker's report,
        with "same" outputs resolved, and the seconds the referee saw). With ``probe`` (a
        timed round's sample) the idle probe runs as the worker is halted for the refresh."""
        calls = len(windows)
        self._refresh(windows, probe)
        if self.cold_l2 and self.kind == "cuda":
            timing.flush_l2(self.device, self._scratch)
        message = {"op": "go", "method": method, "index": index, "calls": calls}
        # The sample's time from outside begins as the worker could first run again: its
        # inputs are all written by then, and whatever its processes do from there on is
        # the sample's (a candidate's 32 processes in sessions of their own, each woken by
        # this signal, kept the referee from its clock for 2-25 ms and computed the
        # sample's calls meanwhile: passed at 14.7-35.7 us a call where they take 241-314;
        # CPU, a helper's trial at 363b789).
        woken = self.wake()
        sent = time.perf_counter() if woken is None else woken
        reply = self.worker.ask(message, [], protocol.Sample)
        outside = self.worker.channel.arrived - sent
        if os.environ.get("INFERENCE_KERNELS_TRACE"):
            print(f"trace go {index} sent {sent:.6f} arrived {self.worker.channel.arrived:.6f}")
        if reply.method != method or reply.index != index:
            raise CaseEnded(statuses.PROTOCOL_VIOLATION, "the worker answered another sample")
        outputs = reply.outputs
        if index >= 0:
            if method in self.named and outputs != "same":
                # a captured graph's outputs cannot move; naming them again would only make
                # the referee read more before the next sample, the device resting meanwhile
                raise CaseEnded(statuses.PROTOCOL_VIOLATION, "a graph's outputs moved")
            if outputs == "same":
                if method not in self.refs:
                    raise CaseEnded(statuses.PROTOCOL_VIOLATION, "outputs the same as none")
                outputs = self.refs[method]
            self.refs[method] = outputs = self._slots(outputs, calls)
        else:  # (nothing of an untimed sample is kept: its worker may finish its reply)
            self.catch_up()
        return outputs, reply, outside

    def _slots(self, outputs: list, calls: int) -> list:
        """``outputs`` if they name every output of each of ``calls`` calls."""
        if len(outputs) != calls or any(len(o) != len(self.worker.names) for o in outputs):
            raise CaseEnded(
                statuses.PROTOCOL_VIOLATION,
                f"the worker sent outputs of {len(outputs)} calls for a sample of {calls}",
            )
        return outputs

    def _probe(self) -> float:
        """Seconds a one-element kernel waited: a GPU that runs someone else's work makes
        it wait."""
        if self.kind != "cuda":
            return 0.0
        if "probe" not in self._scratch:
            self._scratch["probe"] = torch.zeros(1, device=self.device)
        began = time.perf_counter()
        self._scratch["probe"].add_(1)
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - began

    def _probe_before(self) -> float:
        """The idle probe as a timed sample's inputs are about to be written."""
        return self._probe()

    def _counted(
        self, method: str, index: int, waited: float, before: float = 0.0
    ) -> tuple[bool, bool]:
        """Whether the sample just taken counts, and whether as the phase's slowest (see
        PROBE_RETAKES): it does if the GPU was busy past PROBE_LIMIT after it, and does not
        count if the GPU was after the one before, or ``before`` it, as its inputs were
        about to be written (work the worker launched between samples, which may have
        computed its outputs from them). Past PROBE_RETAKES such samples the case is
        timing_suspect, and every sample counts as it is (the verdict is made)."""
        follows_busy, self._skip_next = self._skip_next, False
        busy_before, busy_after = before > PROBE_LIMIT, waited > PROBE_LIMIT
        if not (busy_before or busy_after):
            return not follows_busy, False
        if busy_after:  # (one note a sample, one of PROBE_RETAKES: a stall may span both)
            note = f"still busy {waited * 1e3:.1f} ms after the worker reported the sample done"
            note += f" (and {before * 1e3:.1f} ms before its inputs)" if busy_before else ""
        else:
            note = (
                f"still busy {before * 1e3:.1f} ms as the referee began to write its inputs, "
                "the worker halted"
            )
        self.busy_after.append(f"{method} sample {index}: the GPU was {note}")
        if len(self.busy_after) > PROBE_RETAKES:
            self.suspect.append(
                f"{self.busy_after[-1]} ({len(self.busy_after)} samples of the case)"
            )
            return busy_after or not follows_busy, False
        self._skip_next = busy_after
        return not (follows_busy or busy_before), busy_after

    def calibrate(self) -> float:
        """Seconds per call over one untimed eager sample of ``plan.warmup`` calls, on sets
        the solution has not seen (the case's first call ran on buffers of its own, so a
        solution fast only on inputs it has seen before is sized by its slow calls rather
        than given thousands): the smaller of the worker's time and the referee's time per
        call (a worker that claims slow warmups to be given short samples is sized by what
        the referee saw). Until the nineteenth session a second sample on the same sets
        followed and the larger was kept: such a second sample can only be faster for that
        solution, and for the others it cost a round trip, the sets' refresh and compare
        and the calls themselves, alone on the device (0.1 s a case of GDN prefill). What
        the plan's calls are too few for, ``_size`` raises from a warm sample (on a GPU,
        without ``--cold-l2``)."""
        calls = self.plan.warmup
        setup = {"op": "method", "method": "eager", "calls": calls, "warmup": 0}
        self.worker.ask(setup, [], protocol.Ready)
        with self.alone():
            windows = self.fresh.draw(calls)
            _, reply, seen = self.go("eager", -1, windows)
        return min(reply.us * 1e-6, seen / calls)

    def _setup(
        self, method: str, iters: int, launch: str | None, extend: bool = False
    ) -> str | None:
        """Prepare the method's launches or capture its graph; the reason it cannot be
        timed, if it cannot. ``extend``: the sets are those of the graph already captured,
        which then only captures the calls it lacks."""
        setup = {"op": "method", "method": method, "calls": iters, "warmup": CAPTURE_WARMUP}
        if launch:
            setup["launch"] = launch
        if extend:
            setup["extend"] = True
        with self.watch.span("setup"):
            # only a graph may be unavailable (one that cannot be captured)
            kinds = [protocol.Ready] + ([protocol.Unavailable] if method == "graph" else [])
            sent = time.perf_counter()
            ready = self.worker.ask(setup, [], *kinds)
        if os.environ.get("INFERENCE_KERNELS_TRACE"):  # beside the worker's: where setups go
            print(
                f"trace method {method} {iters} sent {sent:.6f} arrived "
                f"{self.worker.channel.arrived:.6f} parsed {time.perf_counter():.6f}"
            )
        if ready.method != method:
            raise CaseEnded(statuses.PROTOCOL_VIOLATION, "the worker set up another method")
        self._set_up_on.pop(method, None)
        self.named.discard(method)
        if isinstance(ready, protocol.Unavailable):
            return ready.error
        self._set_up_on[method] = self.sets
        self.refs.pop(method, None)  # set up again: its old outputs are gone
        if method == "graph" and ready.outputs is not None:  # where they are after every replay
            self.refs[method] = self._slots(ready.outputs, iters)
            self.named.add(method)
        return None

    def time_methods(self, methods: list[str], launch: str | None) -> dict[str, dict[str, Any]]:
        """Time every method of the case in one state of the device: each is set up and
        sized first, then their samples are taken in rounds, one sample of each method per
        round, so that eager, prepared and graph times differ by launch cost and nothing
        else (issue 11). A phase stops when its median's 95% interval is within
        TARGET_HALF_WIDTH, or when the case has spent its time (the schedule's trials
        times one round); each entry says which. Raises CaseEnded when the case ends."""
        entries: dict[str, dict[str, Any]] = {}
        phases: dict[str, Phase] = {}
        for method in methods:
            phase_launch = launch if method == "graph" else None
            error = self._setup(method, self.plan.iters, phase_launch)
            if error is not None:
                entries[method] = {"error": error}
                continue
            phases[method] = Phase(method, self._size(method, self.plan.iters), phase_launch)
        for method, error in self._ready(phases).items():
            entries[method] = {"error": error}
            del phases[method]
        self._rounds(list(phases.values()))
        for method, phase in phases.items():
            wanted = self._longer(phase.samples, phase.iters)
            if wanted is not None:
                # The worker's own times say the samples were too short for the outside
                # check to hold it to them (its warm samples said otherwise): sample again,
                # longer, this method alone (set up under the load, as the first time).
                phase = Phase(method, wanted, phase.launch, resampled=True)
                self.resume()
                error = self._ready({method: phase}).get(method)
                if error is not None:
                    entries[method] = {"error": error}
                    continue
                self._rounds([phase])
            entries[method] = self._entry(phase)
        return {method: entries[method] for method in methods}

    def _size(self, method: str, iters: int) -> int:
        """Calls per sample for ``method``: one warm sample of the plan's calls sizes its
        samples to at least SAMPLE_MIN_SECONDS (the outside check's allowance stays a small
        part of each sample). A prepared launch or a graph replay can be far shorter than
        the eager calls the plan was sized by; the eager calls themselves are shorter than
        the calibration said, as its samples of a few calls carry a sample's fixed cost
        (the device waking from the idle between samples, the host issuing the first call:
        about 250 us on the H200, benchmarks/launch_gaps.py). Sized by the calibration alone,
        the SDPA of noncausal_dense_attention_h32_d128 (N 2560) got eager samples of 97 calls
        against the graph's 163, and an eager/graph of 1.022 from that fixed cost alone.
        On the CPU, eager is sized the same way: a calibration taken while the machine was
        busy gave samples as short as 15 calls (10.6 ms), too short for the outside check's
        allowance to hold the machine's own pauses, and an honest eager call was suspect.
        Where the plan's calls are already the most a sample may have (MAX_CALLS, or the
        sets that fit), no sample is taken: it could only keep them (the 11x11x11
        neighborhood attention's one call of 0.2 s, the M 8192 GEMMs' sets).
        """
        if self.cold_l2:
            return iters
        if iters >= self._calls_for(0.0):  # the most calls a sample may have
            return iters
        with self.alone():
            _, reply, seen = self.go(method, -1, self.fresh.draw(iters))
        return max(iters, self._calls_for(min(reply.us * 1e-6, seen / iters)))

    def _calls_for(self, per_call: float) -> int:
        """Calls that make a sample SAMPLE_MIN_SECONDS long, within MAX_CALLS and the sets
        that fit."""
        per_call = max(per_call, 1e-7)
        return min(math.ceil(SAMPLE_MIN_SECONDS[self.kind] / per_call), MAX_CALLS, self.fit)

    def _ready(self, phases: dict[str, Phase]) -> dict[str, str]:
        """Sets enough for every phase, each method set up for its calls and warmed up;
        the methods that cannot be (a graph that cannot be captured), with the reason."""
        grown = False
        needed = max((phase.iters for phase in phases.values()), default=0)
        if needed > self.sets.count:
            # launches on the old sets are gone
            self.sets, grown = self.grow(needed, self.sets), True
        errors = {}
        for method, phase in phases.items():
            if method != "eager" and (grown or phase.iters != self.plan.iters or phase.resampled):
                # grown: new sets, and the launches on the old ones are gone; a graph extends
                # only on the sets it was captured on (another method's resample may have
                # grown them since: its calls on the old ones would read memory no longer
                # refreshed, review of 962fd84)
                same = self._set_up_on.get(method) is self.sets
                error = self._setup(method, phase.iters, phase.launch, extend=same)
                if error is not None:
                    errors[method] = error
                    continue
            if method != "graph":  # a graph warmed up when it was captured
                calls = min(self.plan.warmup, phase.iters)
                self.go(method, -1, self.fresh.draw(calls))
        return errors

    def _rounds(self, phases: list[Phase]) -> None:
        """Samples in rounds until every phase has stopped (see ``time_methods``); they
        follow the referee's ``settle`` with nothing of the worker in between."""
        if not phases:  # nothing to time (a graph that cannot be captured): no settle
            return
        least = min(MIN_ROUNDS, self.plan.trials)
        for phase in phases:  # (a graph's outputs are named when it is captured)
            self.checks[phase.method] = []
        self.settle()
        self._ended = time.perf_counter()  # the first sample rests after the steady load too
        self._skip_next = False
        # The case's time: the schedule's trials times a round of every phase (the median
        # of the rounds every phase ran: neither a slow first round nor one slow sample a
        # solution adds on purpose stretches it), and never more than ROUNDS_PER_TRIAL
        # rounds per trial.
        active, spent, rounds, whole_rounds = list(phases), 0.0, 0, []
        most = max(least, ROUNDS_PER_TRIAL * self.plan.trials)
        while active:
            whole = len(active) == len(phases)
            took = sum(self._sample(phase, rounds) for phase in active)
            spent += took
            rounds += 1
            if whole:
                whole_rounds.append(took)
            budget = statistics.median(whole_rounds) * self.plan.trials
            for phase in list(active):
                counted = len(phase.samples)  # rounds, less those not counted
                if counted >= most or rounds >= most + PROBE_RETAKES:
                    phase.stopped = "max_rounds"
                elif counted < least:
                    continue
                elif phase.half_width() <= TARGET_HALF_WIDTH:
                    phase.stopped = "converged"
                elif spent >= budget * (1 - 1e-9) or (whole and counted >= self.plan.trials):
                    phase.stopped = "time_cap"
                else:
                    continue
                active.remove(phase)

    def _sample(self, phase: Phase, index: int) -> float:
        """One timed sample of ``phase``; the seconds the referee saw."""
        method = phase.method
        windows = self.fresh.draw(phase.iters)  # (the referee's alone: drawn within the gap)
        if self.gap and self._ended is not None:
            # before the refresh: the sample's inputs are written right before it is sent,
            # never left for the solution's threads to work on during the rest
            time.sleep(max(0.0, self._ended + self.gap - time.perf_counter()))
        outputs, reply, seconds = self.go(method, index, windows, probe=True)
        self._ended = self.worker.channel.arrived
        with self.watch.span("clocks"):  # the idle probe and the NVML readings
            counted, slowest = self._counted(method, index, self._probe(), self._before)
            reading = self.clock() if counted and self.clock is not None else None
        with self.watch.span("keep"):  # one call's outputs copied out for the checks
            self._keep_for_checking(method, index + 1, windows, outputs)
        self._unchanged(windows, f"{method} sample {index}")
        # What the worker does after its reply (the collection it put off) it finishes now,
        # not in the next sample's time; it is halted again while the next sample's inputs
        # are written
        self.catch_up()
        if not counted:
            phase.dropped.append(index)
            return seconds
        if reading is not None:
            phase.clocks.readings.append(reading)
        per_call = outside.allowed_per_call(
            method, self.kind, len(self.worker.names), self.output_bytes
        )
        if outside.late(seconds, reply.us, phase.iters, self.kind, per_call):
            phase.late.append(len(phase.samples))  # (late samples, above)
            slowest = True
        if slowest:
            phase.slowest.append(len(phase.samples))
        phase.samples.append(reply.us)
        phase.outside.append(seconds)
        if reply.host_us is not None:
            phase.host.append(reply.host_us)
        return seconds

    def kernel_times(self, calls: int, rest: float) -> dict[str, Any]:
        """The kernels' own durations over one eager sample of ``calls`` calls (at most
        one per input set), each after ``rest`` seconds of device rest if that is more than
        0, from CUPTI in the worker: what Nsight Compute would time, with no gap between
        kernels. The worker's report, held to nothing but the protocol's ranges: rows show
        it beside the judged times and nothing ranks on it."""
        calls = min(calls, self.sets.count)
        windows = self.fresh.draw(calls)
        self._refresh(windows)
        message = {"op": "kernels", "calls": calls, "idle_s": rest}
        reply = self.worker.ask(message, [], protocol.Kernels)
        self._unchanged(windows, "kernel times")
        asked = {"calls": calls, "rest_ms": rest * 1e3}
        if reply.error is not None:
            return {"error": reply.error} | asked
        return reply.model_dump(exclude={"op", "error"}) | asked

    def _refresh(self, windows: list[Call], probe: bool = False) -> None:
        """Fresh values into the sets ``windows`` names (one per set, from the first), the
        worker stopped while they are written. (Running, a thread of a solution's computed
        each set's GEMM as soon as its inputs were written, before the sample started and
        outside both clocks: passed at 31.8 us a call where the calls took 294.7; CPU, red
        team at 366baf1.) With ``probe``, the idle probe first (``_before``): the worker
        halted, nothing of its should run on the device; a kernel it launched after its
        last reply could wait on the sets and compute from them as they are written."""
        with self.watch.span("refresh"):
            self.catch_up()  # (after a message other than a sample's: a method's set-up)
            self.halt()
            self._before = self._probe_before() if probe else 0.0
            self.sets.refresh(windows, self.fresh)

    def _unchanged(self, windows: list[Call], what: str) -> None:
        """Every set still holds what ``_refresh`` wrote, or the case ends: input_mutated."""
        with self.watch.span("compare"):
            changed = self.sets.changed(windows, self.fresh)
        if changed:
            raise CaseEnded(
                statuses.INPUT_MUTATED, f"input(s) {', '.join(changed)} changed ({what})"
            )

    def _keep_for_checking(self, method: str, count: int, windows, outputs) -> None:
        """Reservoir sampling: after ``count`` samples, each of them is among the kept
        CHECKS with the same probability. One random call's outputs are copied out of
        every sample, kept or not, now, before the worker may run again (what it returned,
        not later): a worker that timed the referee's reply could otherwise tell which
        samples are kept, and stop the phase when the kept ones are honest."""
        call = self._random.randrange(len(windows))
        copied = (windows[call], self.worker.read(outputs[call], self.shapes))
        kept = self.checks[method]
        if len(kept) < CHECKS:
            kept.append(copied)
        elif self._random.randrange(count) < CHECKS:
            kept[self._random.randrange(CHECKS)] = copied

    def _longer(self, samples: list[float], iters: int) -> int | None:
        """Calls per sample to time again with, when the samples the worker reports are too
        short for ALLOWANCE to be within TOLERANCE of them (and more calls are possible)."""
        per_call = statistics.median(samples) * 1e-6
        if self.cold_l2 or per_call * iters * TOLERANCE[self.kind] >= ALLOWANCE[self.kind]:
            return None
        wanted = self._calls_for(per_call)
        return wanted if wanted > iters else None

    def _entry(self, phase: Phase) -> dict[str, Any]:
        """The phase's row entry."""
        method, iters = phase.method, phase.iters
        if method == "graph":
            name = "cuda-graph" if self.kind == "cuda" else "cpu-graph-stand-in"  # tests only
        else:
            name = "cuda-events" if self.kind == "cuda" else "cpu-wall-clock"
        if self.cold_l2 and self.kind == "cuda":
            name += ", cold L2"
        host = phase.host if method != "graph" else []
        result = summary(method, name, phase.ranked(), iters, host)
        result["rounds"] = len(phase.samples)
        result["stopped"] = phase.stopped
        result["median_half_width"] = round(phase.half_width(), 5)
        if phase.dropped:  # the GPU was busy after the sample before
            result["not_counted"] = phase.dropped
        if phase.slowest:  # busy after, or late: samples_us holds the slowest there
            result["ranked_slowest"] = phase.slowest
        if phase.late:
            result["late"] = phase.late
        if phase.resampled:
            result["resampled"] = True
        if method == "graph":
            result["launch"] = phase.launch or "run"
        result["outside"] = self._outside(method, phase)
        if not outside.resolved(result["median_us"], result["outside"]["resolution_us"]):
            result["unresolved"] = True  # shown, never ranked on (outside.RESOLVED_WITHIN)
        clocks = phase.clocks.summary(result["median_us"])
        if clocks is not None:
            result["clocks"] = clocks
        if suspect := outside.host_check(
            method, result["median_us"], result.get("host_median_us"), iters
        ):
            self.suspect.append(suspect)
        self.refs.pop(method, None)
        return result

    def _outside(self, method: str, phase: Phase) -> dict[str, Any]:
        """The referee's times of the phase against the worker's (``outside.py``)."""
        per_call = outside.allowed_per_call(
            method, self.kind, len(self.worker.names), self.output_bytes
        )
        entry, suspect = outside.check(
            method, phase.samples, phase.outside, phase.iters, self.kind, per_call
        )
        if suspect:
            self.suspect.append(suspect)
        return entry
