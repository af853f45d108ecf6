"""The referee: one trusted process per device, the only place a verdict is made.

It never imports solution code. For each workload (``prepare``) it materializes the
pristine inputs and gets the reference outputs (the authenticated cache, or the
reference itself). For each (solution, workload) case (``judge``) it starts the
solution's worker in the sandbox (``workers.py``), shares the inputs with it, compares the
outputs the worker returns under the task's tolerance (``acceptance.py``), checks the
inputs byte for byte, and times the solution from its side of the sandbox
(``sampling.py``). Every verdict, ``passed`` included, is decided here from data it read
itself; a worker can only end its own case early with a failure.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import schema, signing, statuses
from ..acceptance import compare
from ..dataset.rooflines import work
from ..errors import DatasetError
from ..materialize.inputs import materialize
from ..materialize.references import (
    ambiguous_rows,
    output_problems,
    rejected_rows,
    run_reference,
)
from . import clocks, collector, device_memory, protocol, timing
from .busy import Busy, products
from .fresh import Call, Fresh
from .loader import SolutionLoadError, compiled
from .logs import redirect_output
from .prefetch import Prefetcher
from .reference_cache import ReferenceCache, reference_key
from .sampling import SAMPLE_GAP_SECONDS, Sampler
from .schedule import Plan, plan
from .sets import InputSets, set_bytes
from .stopwatch import Stopwatch
from .workers import CaseEnded, WorkerHandle, start_or_fail

# A GPU is loaded this long before its first timed case. Under a power cap the clock a
# power-bound kernel gets falls for seconds as the chip warms: on the H200 a bf16 GEMM
# ran at about 1,500 MHz in its first seconds after idle and at 1,470 MHz from about 8 s
# on (docs/measurements/h200-timing-fidelity.md). The referee runs the load, so that no
# solution can skip it to be timed on a cooler chip.
PREHEAT_SECONDS = 10.0
# Between cases the device is kept busy in the background (busy.py) until the case's first
# call, which the solution runs alone, and again from the end of that call while the referee
# checks it and the methods are set up (all but the samples that size the schedule, which
# run alone). Its timed rounds then follow a load, so that every case starts from the clocks
# of sustained work: STEADY_MIN_SECONDS when the device hardly rested, else STEADY_SECONDS
# whatever the rest (the background load since the rest counts towards it). Until the
# twelfth session the load ran before the calibration, and the graph captures after it left
# the device mostly idle for 0.1-0.6 s before the rounds (and a solution could make that
# rest as long as it liked). Before the eleventh session the rest also counted the referee's
# reading and comparing of the call's outputs: on the H200 most cases whose call took under
# 0.05 s then paid 0.3 s (docs/measurements/case-breakdown.md). A load as long as the rest
# missed that state both ways on the H200 (benchmarks/rest_recovery.py,
# docs/measurements/h200-regimes.md, ninth session): after 1 s of rest, 0.05 s of load left
# the SM clock at 1,950-1,980 MHz and a GEMM 1-3% faster than on the busy device (the clock
# falls only after 0.18 s of load), and 1 s of load overshot into the power cap's dip
# (1,185-1,440 MHz, up to 3% slower); 0.1-0.5 s gave the busy device's time. First calls
# take 0.1-1.2 s on a new worker (cuDNN plans, a Triton compile longer), so the old rule
# gave cases of one job different states.
STEADY_SECONDS = 0.3
STEADY_MIN_SECONDS = 0.05
# A rest counts (and the samples then need STEADY_SECONDS of load after it) from this long:
# the first call alone, or the alone parts of a case (its first call, the calibration, the
# sizing samples) added up; shorter rests get a load as long as they add up to, and at
# least STEADY_MIN_SECONDS (a solution that put them all in one block right before the
# rounds, its last sizing sample, rests the device just under this: as long a load follows;
# a review of b6e1d3b). Until the nineteenth session the threshold was STEADY_MIN_SECONDS,
# and the sizing samples' 30-70 ms alone made most cases pay the whole 0.3 s after the
# last of them (0.16 s a case of the H200 audit at 962fd84, the grouped GEMM's 0.29). What
# it rests on is thin: the ninth session's rest_recovery.py gave the same GEMM and SDPA times
# after 0.2 s of rest and 0.05 s of load as after 0.05 s of load alone, but its background
# load had died (every trial followed 1.5 s of idle, docs/measurements/h200-regimes.md); the
# judge before and after gave the same GEMM and SDPA medians (1.0009, 0.9961;
# h200-timing-fidelity.md, nineteenth session), honest baselines whose rests are spread.
RESTED_SECONDS = 0.1
# The burst regime (``--regime burst``) has no load: each case's samples start after this
# rest, as published micro-benchmarks and ncu's one-kernel-at-a-time times do.
BURST_REST_SECONDS = 0.5
# With ``--kernel-times`` a case ends with one eager sample under CUPTI. In the burst
# regime its calls run one at a time, each after the device rested this long, as Nsight
# Compute runs a kernel (the truth for this regime): the H200 ran the SDPA of
# noncausal_dense_attention_h32_d128 (N 2560) in 163 us back to back and 168-171 us after
# 2 or 20 ms of rest, ncu 171 us; the other kernels measured did not move
# (docs/measurements/h200-regimes.md, sixth session). In the sustained regime they follow
# each other, as under load.
KERNEL_ALONE_REST_SECONDS = 0.002
KERNEL_ALONE_CALLS = 30
# A graph replays launch-bound calls far faster than they run eagerly, so its samples,
# sized after its first capture (``Sampler._size``), need more calls than the plan's: the
# sets are made this many times the plan's calls at once (within what fits), and the sized
# graph extends the one captured. Made for the plan's calls only, they had to be made
# again in 786 of the 934 cases of the H200 audit at c839524 (a graph's calls per sample
# over the plan's: 1.0-1.6 in the lower half of cases, 11.5 at the 90th percentile, 37 at
# most), and every such graph was captured again from its first call on the new sets.
# The headroom stays within the worker's arena: at 8974884 it took the sets cap even where
# the arena did not hold them, and the 11x11x11 neighborhood attention (one call a sample,
# 1.6 GB a set) got ten sets in a new arena, and a new worker (5-6 s) in 7 of its 9 cases
# (H200 audit at 7829dc8, docs/measurements/case-breakdown.md, sixteenth session).
GRAPH_HEADROOM = 16
SETS_BUDGET_CPU = 1 << 30  # bytes of timing input sets on the CPU
OUTPUTS_BUDGET_CPU = 256 << 20  # bytes of one sample's outputs on the CPU
SETS_BUDGET_CUDA_FRACTION = 0.25  # of free device memory
# ... and never more than this, in one allocation (the worker's arena, below): on the H200 a
# worker reading its inputs from a 35 GB arena (a quarter of the free memory) ran every
# kernel slower, the 26 us SDPA of noncausal_dense_attention_h32_d64 in 37.3 us of kernel
# time (CUPTI) against 25.1 us from an arena of 8 or 16 GiB or from buffers of their own
# size; the 10 us one 11.3 against 9.4 (docs/measurements/h200-regimes.md, sixth session).
# Each worker of a job has the whole cap, however many solutions the job has. From b31c790
# to the fifteenth session a job of N solutions gave each worker 1/N of it (the fifth of
# five workers with 16 GiB arenas had run 6-22% slower once): a worker then got too few
# sets for a full sample (it never reuses one within a sample), and with 16 or 43 sets the
# SDPA of timing_fidelity.py ran 196 us of kernel time against 162 us with 91 sets or more,
# one worker as with five; five workers of 16 GiB each all ran at 162.6-162.8 us
# (docs/measurements/h200-timing-fidelity.md, fifteenth session). A job of many large
# solutions still shrinks the later workers' arenas: each gets a quarter of what is free.
SETS_BUDGET_CUDA_MAX = 16 << 30
# Experiments (sets_probe.py) and tests (samples of few sets: test_short_samples.py) set
# the cap, which then holds on the CPU too.
_CAP = os.environ.get("INFERENCE_KERNELS_SETS_CAP_BYTES", "")
if _CAP.isdigit() and int(_CAP) > 0:
    SETS_BUDGET_CUDA_MAX = int(_CAP)
    SETS_BUDGET_CPU = min(SETS_BUDGET_CPU, int(_CAP))
MAX_SETS = 4000
# A worker keeps the input buffers it was shown until it dies (``WorkerHandle.lend``): on
# CUDA one arena of the sets budget (fraction and cap above), made when it starts and
# lent in slices to every case it judges. A worker replaced whenever its buffers outgrew a
# limit cost an audit 3.5 s in one case of three (H200, issue 13): every case lent new
# buffers of its own sizes. One that holds more than the cap between cases (a case that
# needed more than its arena) is replaced, so that its buffers can be freed.
POOL_CPU = 2 << 30  # bytes


def sets_budget_cuda(free: int) -> int:
    """Bytes of timing input sets when ``free`` bytes of device memory are at hand."""
    return min(int(free * SETS_BUDGET_CUDA_FRACTION), SETS_BUDGET_CUDA_MAX)


def steady_seconds(rested: float | None, loaded: float = 0.0) -> float:
    """The load before a case's samples in the sustained regime, after the device
    ``rested`` seconds (None: nothing loaded it in this lane yet) and was then loaded again
    for ``loaded`` seconds: as long as it rested when that is less than RESTED_SECONDS,
    else what STEADY_SECONDS of load lack; at least STEADY_MIN_SECONDS."""
    if rested is not None and rested < RESTED_SECONDS:
        return max(STEADY_MIN_SECONDS, rested)
    return max(STEADY_MIN_SECONDS, STEADY_SECONDS - loaded)


@dataclass
class Workload:
    """The workload being judged: its pristine inputs, reference, and fresh values."""

    definition: schema.Definition
    workload: schema.Workload
    pristine: list[Any]
    expected: list[torch.Tensor]
    tolerance: schema.Tolerance
    timing: dict[str, int]
    fresh: Fresh | None = None
    ambiguous: torch.Tensor | None = None  # rows left out (the task's ambiguity), pristine


class Referee:
    def __init__(self, device: str, options: dict[str, Any]):
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.empty(1, device=self.device)
        self.options = options
        self.folder = Path(options["folder"])
        self.cache = ReferenceCache(Path(options["cache"]) / "references", signing.key())
        self.current: Workload | None = None
        self.workers: dict[str, WorkerHandle | str] = {}
        self.preheated = False
        self.rested_since: float | None = None  # the end of the last load or samples
        self.rested: float | None = None  # how long the device rested for a first call
        self.loaded_since = 0.0  # when the background load last came back
        self.loaded = 0.0  # seconds of background load before that, since that rest
        self.short_rests = 0.0  # seconds alone since then, in rests each too short to count
        sustained = options.get("regime", "sustained") == "sustained"
        loaded = self.device.type == "cuda" and sustained and not options["validation_only"]
        self.busy = Busy(products(self.device) if loaded else None)  # between cases
        self.clock = clocks.reader(self.device)
        self.holdings = device_memory.reader(self.device)  # what a worker keeps between cases
        self.watch = Stopwatch()  # the current case's steps (judge())
        self.profiled = False  # the current case's worker ran under the profiler
        self.prefetcher = Prefetcher()  # the next workload's inputs (prefetch.py)
        self.spares: dict[str, WorkerHandle] = {}  # workers of a later job, spawned (ahead)
        self.upcoming: list[str] = []  # the solutions of the job they were spawned for

    # ------------------------------------------------------------------ workloads

    def ahead(self, message: dict[str, Any]) -> None:
        """The lane's next job, named while this one runs: its inputs are made by the
        helper (prefetch.py); and the next job judged by other solutions (``spawn``: the
        next definition's, often several workloads later) has its workers spawned up to
        where they would load their solution (their interpreter, torch and the judge's
        modules, seconds of a worker's start: ``WorkerHandle.spawn``). A spawned worker
        runs only the judge's code, waiting to be told its case, until its first case: no
        solution code runs beside the current case. Compiled solutions are left to start
        as before. Each lane spawns its own (a worker serves one device): on several lanes,
        one that another lane's jobs outrun is stopped unused."""
        self.prefetcher.ask(message)
        spawn = message.get("spawn")
        self.upcoming = []  # none named: the spares of an earlier one go at the next job
        if spawn is None:
            return
        definition = schema.Definition.model_validate_json(spawn["definition"])
        for text in spawn["solutions"]:
            solution = schema.Solution.model_validate_json(text)
            self.upcoming.append(solution.name)
            running = self.workers.get(solution.name)
            if isinstance(running, WorkerHandle) and running.alive():
                continue
            if solution.name in self.spares or compiled(solution):
                continue
            try:
                self.spares[solution.name] = WorkerHandle.spawn(
                    solution,
                    definition,
                    self.device,
                    self.options["sandbox"],
                    self.folder,
                    self.options["timeout"],
                    self.options["lane"],
                )
            except SolutionLoadError:  # its case says why, as before
                continue
            print(f"worker for {solution.name} spawning ahead", flush=True)

    def _drop_spares(self, keep: list[str]) -> None:
        for name in [name for name in self.spares if name not in keep]:
            self.spares.pop(name).stop()

    def prepare(self, message: dict[str, Any]) -> dict[str, Any]:
        self.current = None
        self._drop_spares(message["solutions"] + self.upcoming)
        for name in list(self.workers):
            if name not in message["solutions"]:
                self._retire(name)
        definition = schema.Definition.model_validate_json(message["definition"])
        workload = schema.Workload.model_validate(message["workload"])
        capture = message.get("capture")
        capture = schema.CaptureRecord.model_validate(capture) if capture else None
        watch = Stopwatch()
        try:
            with watch.span("inputs"):
                made = None
                if self.prefetcher.has(message):  # made while the last case ran
                    with watch.span("prefetch_wait"):  # for what the helper had not finished
                        made = self.prefetcher.take(message)
                if made is not None:
                    made = made.to(self.device)
                    print(f"inputs of {workload.uuid} made ahead", flush=True)
                else:
                    made = materialize(
                        definition,
                        workload,
                        data_root=Path(message["data_root"]),
                        device=self.device,
                        capture=capture,
                    )
        except DatasetError as error:
            return {"ok": False, "status": statuses.INPUT_ERROR, "error": str(error)}
        key = reference_key(definition, workload, str(self.device))
        with watch.span("reference"):
            expected = self.cache.load(key, self.device)
            cached = expected is not None
            if expected is None:
                with self.busy.paused():  # the reference's own work keeps the device busy
                    expected = self._reference(definition, workload, made.values)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()  # the reference's temporaries: room for inputs
                if isinstance(expected, str):
                    return {"ok": False, "status": statuses.REFERENCE_ERROR, "error": expected}
                self.cache.store(key, expected)
            tolerance = schema.Tolerance.model_validate(message["tolerance"])
            with self.busy.paused():
                ambiguous = self._ambiguous(definition, tolerance, made.values, expected)
            if isinstance(ambiguous, str):
                return {"ok": False, "status": statuses.REFERENCE_ERROR, "error": ambiguous}
        roofline = message.get("roofline")
        least = None
        if roofline:
            with watch.span("least_work"):  # counted on the inputs (dataset/rooflines.py)
                least = _least_work(roofline, definition, workload, made.values)
        self.current = Workload(
            definition,
            workload,
            made.values,
            expected,
            tolerance,
            message["timing"],
            ambiguous=ambiguous,
        )
        return {
            "ok": True,
            "inputs": made.origin,
            "generator": made.generator,
            "reference_cached": cached,
            "work": least,
            "seconds": watch.rounded(),
        }

    def _reference(self, definition, workload, inputs) -> list[torch.Tensor] | str:
        try:
            outputs = run_reference(definition, inputs)
        except Exception as error:
            return f"the reference raised {type(error).__name__}: {error}"
        problems = output_problems(definition, workload, outputs, self.device)
        return "reference output: " + "; ".join(problems) if problems else outputs

    @staticmethod
    def _ambiguous(definition, tolerance, inputs, expected) -> torch.Tensor | None | str:
        """The rows the task's ambiguity function leaves out on these inputs, or why not."""
        try:
            return ambiguous_rows(definition, tolerance, inputs, expected)
        except Exception as error:
            return f"the ambiguity function raised {type(error).__name__}: {error}"

    def _check(self, method: str, window: Call, produced, verdict) -> None:
        """Compare a timed call's outputs with the reference of the window it ran on."""
        job = self.current
        inputs = job.fresh.inputs(window)
        expected = self._reference(job.definition, job.workload, inputs)
        if isinstance(expected, str):
            raise CaseEnded(statuses.REFERENCE_ERROR, f"{method} check: {expected}")
        ambiguous = self._ambiguous(job.definition, job.tolerance, inputs, expected)
        if isinstance(ambiguous, str):
            raise CaseEnded(statuses.REFERENCE_ERROR, f"{method} check: {ambiguous}")
        self._compare(method, produced, expected, verdict, inputs, ambiguous)

    # ------------------------------------------------------------------ workers

    def _worker(self, solution: schema.Solution) -> WorkerHandle:
        handle = self.workers.get(solution.name)
        failed = handle.loaded if isinstance(handle, WorkerHandle) else None
        if failed is not None and not failed.ok:
            # the same sources fail to build or load again: no new worker, no build per case
            raise CaseEnded(failed.status, failed.error or "the solution did not load")
        if handle is None or (isinstance(handle, WorkerHandle) and not handle.alive()):
            if isinstance(handle, WorkerHandle):
                handle.stop()
            spare = self.spares.pop(solution.name, None)
            definition = self.current.definition
            if spare is not None and spare.alive() and spare.made_for(solution, definition):
                handle = spare.initialize()
                print(f"worker for {solution.name} spawned ahead", flush=True)
            else:
                if spare is not None:
                    spare.stop()
                handle = start_or_fail(
                    solution,
                    definition,
                    self.device,
                    self.options["sandbox"],
                    self.folder,
                    self.options["timeout"],
                    self.options["lane"],
                    builds=Path(self.options["cache"]) / "builds",
                )
            self.workers[solution.name] = handle
            if isinstance(handle, WorkerHandle) and self.device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(self.device)
                handle.arena_bytes = sets_budget_cuda(free)
        if isinstance(handle, str):
            raise CaseEnded(statuses.LOAD_FAILED, handle)
        handle.thaw()
        if not handle.loaded.ok:  # load_failed, or compile_error
            # Its process goes now: it never gets a case, so it would never be frozen nor
            # its device memory read, and a solution that failed its load on purpose could
            # keep running beside every later case (review, twentieth session). The handle
            # stays, dead, to fail this solution's later cases at once.
            handle.stop()
            raise CaseEnded(
                handle.loaded.status, handle.loaded.error or "the solution did not load"
            )
        return handle

    def _bound_memory(self, name: str, worker: WorkerHandle, verdict: dict[str, Any]) -> None:
        """A worker that keeps more device memory than it may between its cases goes
        (``device_memory.py``); the row says why."""
        if self.holdings is None or not worker.alive() or self.workers.get(name) is not worker:
            return
        reason = device_memory.too_much(self.holdings(worker.owns))
        if reason:
            verdict["retired"] = reason
            self._retire(name)

    def _bound_pool(self, name: str, worker: WorkerHandle) -> None:
        """A worker whose input buffers outgrew what it may keep between its cases goes now,
        with them (they can only be freed once it is gone), before any other solution's
        case. (Kept until its own next case, as it was, the grouped GEMMs' 4.5 GB of
        weights, two or three copies of them a solution, stayed mapped in the referee
        through every later solution's cases: on the CPU the second solution judged got
        ``reference_error``, the referee killed for memory, red team at 99ea315.)"""
        if self.workers.get(name) is worker and worker.pooled() > self._pool_limit():
            self._retire(name)

    def _pool_limit(self) -> int:
        """Bytes of input buffers a worker may keep between its cases."""
        if self.device.type == "cuda":
            return SETS_BUDGET_CUDA_MAX
        return POOL_CPU

    def _retire(self, name: str) -> None:
        handle = self.workers.pop(name)
        if isinstance(handle, WorkerHandle):
            handle.exit()

    def close(self) -> None:
        self.busy.stop()
        self.prefetcher.close()
        self._drop_spares([])
        for name in list(self.workers):
            self._retire(name)

    # ------------------------------------------------------------------ a case

    def judge(self, message: dict[str, Any]) -> dict[str, Any]:
        solution = schema.Solution.model_validate_json(message["solution"])
        verdict: dict[str, Any] = {
            "status": statuses.PASSED,
            "error": None,
            "outputs": {},
            "timing": {},
        }
        if self.current is None:
            verdict.update(status=statuses.REFERENCE_ERROR, error="no workload is prepared")
            return verdict
        worker, self.watch, self.profiled = None, Stopwatch(), False
        try:
            with collector.paused():  # no collection in a case's timing or set-up paths
                try:
                    with self.watch.span("worker"):
                        worker = self._worker(solution)
                    self._case(worker, verdict)
                except CaseEnded as ended:
                    verdict.update(status=ended.status, error=ended.error)
                finally:
                    if worker is not None:
                        with self.watch.span("end"):  # the worker lets go, then is frozen
                            worker.end_case(self.watch)
                            self._bound_memory(solution.name, worker, verdict)
                            self._bound_pool(solution.name, worker)
                    if self.profiled and solution.name in self.workers:
                        # The profiler may stay attached to the process (CUPTI is not
                        # always torn down): no later sample is timed in it.
                        self._retire(solution.name)
                with self.watch.span("end"):  # the case's cycles, and the memory they hold
                    collector.young()  # (its exception dropped: nothing of it survives)
        finally:
            self.busy.start()  # until the next case's first call (sustained regime, busy.py)
        verdict["seconds"] = self.watch.rounded()
        return verdict

    def _compare(self, method: str, produced, expected, verdict, inputs, ambiguous=None) -> None:
        """Each output against its reference (``ambiguous``: the rows the task's ambiguity
        leaves out of the element-wise comparison of the outputs it names, on ``inputs``;
        they must then pass the task's ``accept`` function, when it has one)."""
        job = self.current
        named = job.tolerance.ambiguity.outputs if job.tolerance.ambiguity else []
        status = {"call": None, "graph": statuses.GRAPH_OUTPUT_MISMATCH}.get(
            method, statuses.TIMED_OUTPUT_MISMATCH
        )
        where = "" if method == "call" else f"{method} check, "
        for name, value, wanted in zip(job.definition.outputs, produced, expected, strict=True):
            result = compare(value, wanted, job.tolerance, ambiguous if name in named else None)
            verdict["outputs"].setdefault(method, {})[name] = result.to_dict()
            if not result.passed:
                raise CaseEnded(
                    status or result.status,
                    f"{where}output '{name}': {result.message or result.status}",
                )
        if ambiguous is None or not bool(ambiguous.any()):
            return
        try:
            rejected = rejected_rows(job.definition, job.tolerance, inputs, produced, ambiguous)
        except Exception as error:  # the dataset's function failed, not the solution
            raise CaseEnded(
                statuses.REFERENCE_ERROR,
                f"{where}the ambiguity's accept function raised {type(error).__name__}: {error}",
            ) from error
        if rejected is None:
            return
        count = int(rejected.sum())
        for name in named:
            verdict["outputs"][method][name]["accepted_rows"] = int(ambiguous.sum()) - count
        if count:
            first = int(torch.nonzero(rejected)[0, 0])
            raise CaseEnded(
                status or statuses.MISMATCH,
                f"{where}output{'s' if len(named) > 1 else ''} {', '.join(map(repr, named))}: "
                f"{count} of {int(ambiguous.sum())} ambiguous rows hold no selection the "
                f"definition allows (first: row {first})",
            )

    def _case(self, worker: WorkerHandle, verdict: dict[str, Any]) -> None:
        job = self.current
        names = list(job.definition.inputs)
        call = InputSets(job.pristine, names, 1, self.device, allocate=worker.lend)
        message, fds = call.message("case")
        message["workload"] = job.workload.model_dump(mode="json")
        if self.busy.running:  # the solution runs alone; the device rests from here on
            self.busy.stop()
            self.rested_since = time.monotonic()
        with self.watch.span("call"):
            checked = worker.ask(message, fds, protocol.Checked)
            self._load_again(first=True)
            if len(checked.outputs) != len(job.expected):
                raise CaseEnded(
                    statuses.PROTOCOL_VIOLATION, "the worker sent outputs of another count"
                )
            with self.watch.span("call_check"):  # the referee's part: outputs read, compared
                produced = worker.read(checked.outputs, job.expected)
                self._compare("call", produced, job.expected, verdict, job.pristine, job.ambiguous)
                changed = call.changed([{}], None)
        if changed:
            raise CaseEnded(statuses.INPUT_MUTATED, f"input(s) {', '.join(changed)} changed (call)")
        if not self.options["validation_only"]:
            self._time(worker, verdict, checked.seconds)

    def _load_again(self, first: bool = False) -> None:
        """The background load comes back after the solution ran alone: its ``first``
        call (the case's state starts there), a sample that sizes the schedule, or the
        rounds of a method sampled again. The device is counted as resting while the
        solution runs alone; a rest of RESTED_SECONDS or more starts the count of load
        since it again, and so do shorter rests once they add up to that (a solution that
        keeps each of its calls alone just under it rests the device as long). Until one
        does, ``rested`` is what they add up to."""
        if self.busy.work is None:
            return
        now = time.monotonic()
        rest = None if self.rested_since is None else now - self.rested_since
        if first or rest is None:
            self.rested, self.loaded, self.short_rests = rest, 0.0, 0.0
        self.short_rests += rest or 0.0
        if self.short_rests >= RESTED_SECONDS:
            self.rested, self.loaded, self.short_rests = self.short_rests, 0.0, 0.0
        elif self.rested is not None and self.rested < RESTED_SECONDS:  # none counted yet
            self.rested = self.short_rests
        self.busy.start()
        self.loaded_since = now

    @contextlib.contextmanager
    def _alone(self) -> Iterator[None]:
        """A sample that sizes the schedule runs alone; the background load comes back
        after it, while the methods are set up (graph captures, warmups)."""
        if not self.busy.running:
            yield
            return
        self.busy.stop()
        self.rested_since = time.monotonic()
        self.loaded += self.rested_since - self.loaded_since
        try:
            yield
        finally:
            self._load_again()

    def _resume(self) -> None:
        """After a case's rounds, before a method is set up to be sampled again: the
        background load comes back (the samples were the device's work, not a rest)."""
        self.rested_since = time.monotonic()
        self._load_again()

    def _settle(self) -> None:
        """Right before a case's timed rounds (sustained regime): the background load stops,
        and the steady load runs (the lane's preheat first, at its first case), with nothing
        of the solution after it. The background load ran while the methods were set up
        (graph captures, warmups: mostly host work), so the device did not rest there, and
        a solution cannot rest it between the load and its samples by taking its time."""
        with self.watch.span("device_load"):
            rested, loaded = self._rest()
            if not self.preheated:
                timing.load(self.device, PREHEAT_SECONDS)
                self.preheated = True
            timing.load(self.device, steady_seconds(rested, loaded))

    def _rest(self) -> tuple[float | None, float]:
        """Before a case's samples: how long the device rested (None: nothing loaded it in
        this lane yet) and how long it has been loaded again since; the background load
        stops here, and the solution's samples run alone."""
        now = time.monotonic()
        if self.busy.running:
            self.busy.stop()
            return self.rested, self.loaded + now - self.loaded_since
        return (None if self.rested_since is None else now - self.rested_since), 0.0

    def _fit(self, worker: WorkerHandle) -> tuple[int, bool, int]:
        """How many calls a sample may have: input sets that fit in memory, and outputs the
        worker keeps for a sample (on the CPU it copies them all into shared memory);
        whether integer inputs are shared by all sets (they are the same in every set: only
        floating inputs get fresh values); and how many sets a graph's headroom may take
        (GRAPH_HEADROOM: on CUDA only what the worker's arena holds, never a new arena)."""
        job = self.current
        whole, floats = set_bytes(job.pristine), set_bytes(job.pristine, True)
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            room = worker.pooled(idle_only=True)
            budget = outputs = sets_budget_cuda(free + room)
        else:
            room, budget, outputs = 0, SETS_BUDGET_CPU, OUTPUTS_BUDGET_CPU
        calls = outputs // max(sum(o.numel() * o.element_size() for o in job.expected), 1)
        fit = budget // max(whole, 1)
        share = fit < 2
        if share:
            fit = budget // max(floats, 1)
        spare = fit
        # On CUDA, stay in the arena when it holds at least half as many sets: a case that
        # outgrows it makes the worker be replaced before the next case (4-6 s on the H200).
        # With the integers shared when only that fits: the grouped GEMMs' 4.8 GB of expert
        # weights, in three sets, outgrew it every case; shared, about sixty sets of
        # activations fit. (The room of the task's warmup sets is left beside them, although
        # the timing sets now take the calibration's place: without it the grouped GEMMs
        # would get two sets of their own rather than about seventy sharing the weights.)
        if self.device.type == "cuda" and whole > 0:
            spare = 0
            for shared, per in ((False, whole), (True, floats)):
                if per == 0:  # no tensor inputs, or (shared) only integer ones
                    break
                inside = (room - (whole - per) - job.timing["warmup"] * per) // per
                if shared == share:
                    spare = max(0, inside)
                if inside >= max(2, fit // 2):
                    fit, share, spare = inside, shared, inside
                    break
        fit = max(1, min(MAX_SETS, fit, calls))
        return fit, share, min(fit, spare)

    def _sets(
        self, worker: WorkerHandle, count: int, share: bool, replacing: InputSets | None = None
    ) -> InputSets:
        """``count`` timing input sets, mapped by the worker; in the arena ``replacing``
        took, when they replace sets of this case (the worker's to write either way, and
        every sample's sets are compared with what was written into them)."""
        job = self.current
        if replacing is not None:
            worker.take_back(replacing.buffers)
        names = list(job.definition.inputs)
        sets = InputSets(job.pristine, names, count, self.device, share, allocate=worker.lend)
        message, fds = sets.message("sets")
        worker.ask(message, fds, protocol.Mapped)
        return sets

    def _time(self, worker: WorkerHandle, verdict: dict[str, Any], first_call: float) -> None:
        job = self.current
        regime = self.options.get("regime", "sustained")
        if self.device.type == "cuda" and regime == "burst":  # the clocks of a resting device
            with self.watch.span("device_load"):
                time.sleep(BURST_REST_SECONDS)
        if job.fresh is None:
            with self.watch.span("fresh"):  # the workload's secret pools (fresh.py)
                job.fresh = Fresh(job.pristine)
        wanted = self.options.get("methods", schema.METHODS)
        available = {
            "eager": True,
            "prepared": worker.loaded.prepare,
            "graph": self.device.type == "cuda" or timing.FAKE_GRAPH,
        }
        methods = [m for m in schema.METHODS if m in wanted and available[m]]
        with self.watch.span("sizing"):
            sampler = self._sampler(worker, first_call, regime, "graph" in methods)
        verdict["timing"]["regime"] = regime
        verdict["timing"]["schedule"] = {
            "warmup": sampler.plan.warmup,
            "iters": sampler.plan.iters,
            "trials": sampler.plan.trials,
        }
        if sampler.gap:
            verdict["timing"]["sample_gap_ms"] = round(sampler.gap * 1e3, 3)
        launch = "prepared" if worker.loaded.prepare else None
        with self.watch.span("samples"):
            timed = sampler.time_methods(methods, launch)
            if all("error" in entry for entry in timed.values()) and "eager" not in timed:
                # Only the graph was asked for and it cannot be captured: the case is
                # still timed, by its plain calls (the row says graph: unavailable).
                timed |= sampler.time_methods(["eager"], None)
            verdict["timing"].update(timed)
            if self.options.get("kernel_times"):  # what Nsight Compute times: kernels alone
                self.busy.stop()  # (back after a method sampled again that failed to set up)
                eager = timed.get("eager", {})
                calls = eager.get("calls_per_sample", sampler.plan.iters)
                rest = 0.0
                if regime == "burst":
                    calls, rest = min(calls, KERNEL_ALONE_CALLS), KERNEL_ALONE_REST_SECONDS
                self.profiled = True  # the worker goes after this case (judge())
                verdict["timing"]["kernels"] = sampler.kernel_times(calls, rest)
        self.rested_since = time.monotonic()
        verdict["timing"]["sets"] = {
            "count": sampler.sets.count,
            "integers_shared": sampler.sets.share_integers,
        }
        with self.watch.span("checks"):
            for method, checks in sampler.checks.items():
                for window, produced in checks:
                    self._check(method, window, produced, verdict)
        if sampler.busy_after:  # samples the GPU was busy after (sampling.PROBE_RETAKES)
            verdict["timing"]["busy_after"] = sampler.busy_after
        if sampler.suspect:
            raise CaseEnded(statuses.TIMING_SUSPECT, sampler.suspect[0])

    def _sampler(
        self, worker: WorkerHandle, first_call: float, regime: str, graph: bool
    ) -> Sampler:
        """A sampler with its input sets and its schedule, sized from a calibration; with
        room for what a ``graph`` sized after its capture needs (GRAPH_HEADROOM)."""
        job = self.current
        fit, share, spare = self._fit(worker)
        cold = bool(self.options.get("cold_l2"))
        warmup = max(1, min(job.timing["warmup"], int(0.1 / max(first_call, 1e-6)), fit))
        sets = self._sets(worker, warmup, share)
        sampler = Sampler(worker, sets, job.fresh, self.device, Plan(warmup, 1, 1), cold)
        sampler.output_bytes = sum(o.numel() * o.element_size() for o in job.expected)
        sampler.fit = fit
        sampler.shapes = job.expected
        # (not a closure over the sampler: in a reference cycle, each case's sampler, with its
        # fresh pools, sets and kept outputs, lived until the next full garbage collection)
        sampler.grow = lambda count, old: self._sets(worker, count, share, replacing=old)
        sampler.clock = self.clock
        sampler.watch = self.watch
        sampler.halt, sampler.wake, sampler.catch_up = worker.halt, worker.thaw, worker.catch_up
        if self.device.type == "cuda":  # the wall clock of the CPU does not rest
            sampler.gap = SAMPLE_GAP_SECONDS
        if self.device.type == "cuda" and regime == "sustained":  # a busy server's clocks
            sampler.alone, sampler.settle, sampler.resume = self._alone, self._settle, self._resume
        per_call = sampler.calibrate()
        sampler.plan = plan(job.timing, per_call, self.device, fit, cold, regime)
        count = sampler.plan.iters
        if graph and not cold:
            count = max(count, min(spare, count * GRAPH_HEADROOM))
        if count > sets.count:
            sampler.sets = self._sets(worker, count, share, replacing=sets)
        return sampler


def _least_work(roofline: dict, definition, workload, values: list) -> dict[str, Any]:
    """The workload's least work (dataset/rooflines.py), from its pristine inputs."""
    checked = schema.Roofline.model_validate(roofline)
    axes = definition.const_axes() | workload.axes
    try:
        found = work(checked, definition, axes, dict(zip(definition.inputs, values, strict=True)))
    except Exception as error:  # a count that fails is the row's note, never the case's
        return {"error": f"{type(error).__name__}: {error}"[:300], "math": checked.math}
    return {"flops": found.flops, "bytes": found.bytes, "math": checked.math}


def _end_with_the_run() -> None:
    """Exit as soon as the run that spawned this referee is gone (killed), even in the
    middle of a case: a referee left running would hold its device and time its cases beside
    the resumed run's. The run is the spawning process as multiprocessing recorded it before
    this one existed (its sentinel: a pipe only it holds open), so a run that died while
    this referee still started is seen too (a parent read at start would then be init; a
    helper's review of ff36a99). Its sandboxes end with it (bwrap --die-with-parent), its
    signaller and prefetcher at the end of their input."""
    spawner = multiprocessing.parent_process()
    if spawner is None:  # (not spawned by multiprocessing: nothing to watch)
        return
    multiprocessing.connection.wait([spawner.sentinel])
    os._exit(1)


def main(device: str, requests, replies, options: dict[str, Any], log: str) -> None:
    """Serve the lane's requests (prepare, judge, exit) in order."""
    # A session of its own: a wake sent from this process's thread as a worker's uid then
    # reaches, beyond that uid, only this session, where nothing is ever stopped
    # (signals.wake_uid), not the lane's parent and the other lanes' referees. Signals to
    # the run's process group or session (a closed terminal's hangup, a kill of the group)
    # then no longer reach this process: it ends when its parent has gone instead.
    with contextlib.suppress(OSError):  # (already leading one)
        os.setsid()
    threading.Thread(target=_end_with_the_run, daemon=True).start()
    redirect_output(Path(log))
    referee = Referee(device, options)
    collector.freeze()  # torch, the judge's modules (collector.py)
    replies.put({"op": "hello"})
    while True:
        request = requests.get()
        op = request["op"]
        if op == "exit":
            referee.close()
            return
        if op == "prefetch":  # no answer: the next prepare and case take what it made
            referee.ahead(request)
            continue
        try:
            reply = referee.prepare(request) if op == "prepare" else referee.judge(request)
        except Exception as error:
            traceback.print_exc()
            reply = {
                "ok": False,
                "status": statuses.REFERENCE_ERROR,
                "error": f"referee: {type(error).__name__}: {error}"[:800],
                "outputs": {},
                "timing": {},
            }
        replies.put({"op": op + "d" if op == "prepare" else "judged", **reply})
