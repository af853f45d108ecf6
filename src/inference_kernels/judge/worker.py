"""The solution worker: the only process where solution code runs, inside the sandbox.

It talks to its referee over one socket (``channel.py``) and does as told: load the
solution, call it once on the inputs the referee shares, then run timing samples on input
sets the referee refreshes between samples. It reports only what happened here, as
messages of ``protocol.py``; whether anything passed is the referee's decision. Nothing
here is trusted: solution code can rewrite any of it, which changes at most what this
worker reports about its own solution.

Run as ``python -m inference_kernels.judge.worker --fd N [--sandboxed]``.
"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from .. import cpu_math, schema, statuses
from ..dataset.shapes import declared_shape
from ..dtypes import torch_dtype
from . import collector, cuda_ipc
from . import timing as timer  # binds the clocks before any solution is imported
from .channel import Channel, ChannelClosed
from .guards import aliased_inputs, as_list, is_plain_tensor
from .loader import Build, LoadedSolution, SolutionLoadError, load_package
from .shared import Outbox


def _one_line(error: BaseException) -> str:
    where = traceback.extract_tb(error.__traceback__)
    place = f" (at {Path(where[-1].filename).name}:{where[-1].lineno})" if where else ""
    text = " ".join(str(error).split())[:500]
    return f"{type(error).__name__}: {text}{place}"


def drop_privileges(uid: int) -> None:
    """As root inside the sandbox, become ``uid`` (and the gid of that number) for good,
    with no capabilities left."""
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


# Bytes of freed device memory a worker keeps cached between its cases (_give_back_memory).
KEPT_CACHE_BYTES = 1 << 30


class CallFailed(Exception):
    def __init__(self, status: str, error: str):
        super().__init__(error)
        self.status, self.error = status, error


class Worker:
    def __init__(self, channel: Channel, init: dict[str, Any]):
        self.channel = channel
        self.device = torch.device(init["device"])
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            torch.empty(1, device=self.device)  # the primary context, current on this thread
        self.definition = schema.Definition.model_validate_json(init["definition"])
        self.solution = schema.Solution.model_validate_json(init["solution"])
        self.names = list(self.definition.outputs)
        self.loaded: LoadedSolution | None = None
        self.outbox = Outbox(self.device)
        self.timed_at = 0.0
        self._case_reset()

    def _case_reset(self) -> None:
        self.imports = cuda_ipc.Imports(self.device) if self.device.type == "cuda" else None
        self.maps: list[mmap.mmap] = []
        self.workload: schema.Workload | None = None
        self.inputs: list[Any] = []
        self.sets: list[list[Any]] = []
        self.buffers: list[list[torch.Tensor]] = []  # DPS outputs per set
        self.launches: dict[str, list[Any]] = {}  # per method, its prepared launches
        self.graph: timer.Graphs | None = None
        self.kept: list[Any] = []  # the last sample's outputs, until the next message
        self.last_refs: dict[str, list] = {}  # per method, its last sample's references

    # ------------------------------------------------------------------ shared inputs

    def _map(self, buffer: dict[str, Any], fds: list[int]) -> torch.Tensor:
        if buffer["kind"] == "cuda":
            return self.imports.open(buffer["handle"])
        fd = fds[buffer["fd"]]
        mapped = mmap.mmap(fd, buffer["size"], flags=mmap.MAP_SHARED)
        os.close(fd)
        self.maps.append(mapped)
        return torch.frombuffer(mapped, dtype=torch.uint8)

    def _arguments(self, message: dict[str, Any], fds: list[int]) -> list[Any]:
        raws = [self._map(buffer, fds) for buffer in message["buffers"]]
        values = []
        for argument in message["inputs"]:
            if "tensor" in argument:
                ref = argument["tensor"]
                dtype = torch_dtype(ref["dtype"])
                raw = raws[ref["buffer"]]
                size = raw.numel() - raw.numel() % dtype.itemsize
                values.append(
                    raw[:size]
                    .view(dtype)
                    .as_strided(ref["shape"], ref["stride"], ref["offset"] // dtype.itemsize)
                )
            else:
                values.append(argument.get("value"))
        return values

    # ------------------------------------------------------------------ calls

    def _dps_buffers(self) -> list[torch.Tensor]:
        return [
            torch.empty(
                declared_shape(self.definition, self.workload, name),
                dtype=torch_dtype(spec.dtype),
                device=self.device,
            )
            for name, spec in self.definition.outputs.items()
        ]

    def _call(self, inputs: list[Any], buffers: list[torch.Tensor] | None) -> Any:
        if buffers is not None:
            self.loaded.run(*inputs, *buffers)
            return buffers
        return as_list(self.loaded.run(*inputs), self.names)

    def _outputs(self, outputs: Any, what: str, timed: bool) -> list[torch.Tensor]:
        """The call's outputs, if they are as many plain tensors on this device as the
        definition declares; else CallFailed (for a timed call: timed_output_mismatch)."""
        if outputs is None:
            raise CallFailed(
                statuses.TIMED_OUTPUT_MISMATCH if timed else statuses.WRONG_OUTPUT_COUNT,
                f"{what} returned no outputs {self.names}",
            )
        for name, value in zip(self.names, outputs, strict=True):
            status = statuses.TIMED_OUTPUT_MISMATCH if timed else statuses.TYPE_MISMATCH
            if not is_plain_tensor(value):
                raise CallFailed(
                    status, f"{what}: {name} is a {type(value).__name__}, not a plain torch.Tensor"
                )
            if value.device.type != self.device.type:
                status = statuses.TIMED_OUTPUT_MISMATCH if timed else statuses.DEVICE_MISMATCH
                raise CallFailed(status, f"{what}: {name} is on {value.device}, not {self.device}")
        return list(outputs)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ messages

    def case(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        self.workload = schema.Workload.model_validate(message["workload"])
        self.inputs = self._arguments(message, fds)
        dps = self.solution.spec.destination_passing_style
        try:
            began = time.perf_counter()
            outputs = self._call(self.inputs, self._dps_buffers() if dps else None)
            self._synchronize()
            seconds = time.perf_counter() - began
        except Exception as error:
            raise CallFailed(statuses.RUNTIME_ERROR, _one_line(error)) from None
        outputs = self._outputs(outputs, "the call", timed=False)
        aliased = aliased_inputs(outputs, self.inputs, list(self.definition.inputs))
        if aliased:
            raise CallFailed(
                statuses.OUTPUT_ALIASES_INPUT,
                f"an output shares storage with input(s) {', '.join(aliased)}",
            )
        self.kept = outputs
        refs = self.outbox.add(outputs)
        return {"op": "checked", "seconds": seconds, "outputs": refs}

    def map_sets(self, message: dict[str, Any], fds: list[int]) -> None:
        """The timing input sets: each tensor input stacked [count, ...] (or one shared),
        each set's tensor a view of its own (a shared one too: what a solution does to one
        view's shape or strides stays in that set). Views made by ``unbind`` in one call per
        input: indexed one by one, 4,000 sets of three inputs took the worker 23 ms on the
        H200 (twentieth session's traces), on the CI machine 15 ms against 8."""
        count = message["count"]
        stacked = self._arguments(message, fds)
        columns = [
            (value[0:1].expand(count, *value.shape[1:]) if share else value[:count]).unbind(0)
            if isinstance(value, torch.Tensor)
            else [value] * count
            for value, share in zip(stacked, message["shared"], strict=True)
        ]
        no_inputs = [[] for _ in range(count)]
        self.sets = [list(values) for values in zip(*columns, strict=True)] or no_inputs
        dps = self.solution.spec.destination_passing_style
        self.buffers = [self._dps_buffers() for _ in range(count)] if dps else []

    def _slot(self, index: int, method: str):
        """call(): one call on set ``index`` (eager, or the method's prepared launch)."""
        inputs = self.sets[index]
        buffers = self.buffers[index] if self.buffers else None
        launches = self.launches.get(method)
        if launches:  # a prepared launch returns its outputs
            launch = launches[index % len(launches)]
            return lambda: as_list(launch(), self.names)
        return lambda: self._call(inputs, buffers)

    def method(self, message: dict[str, Any]) -> dict[str, Any]:
        """Set up ``method`` for samples of ``calls`` calls. Methods set up earlier stay
        ready (the referee interleaves their samples); setting one up again replaces it,
        except that a graph told to ``extend`` (its sets unchanged since its capture, now
        sized for more calls) keeps its calls and captures only the new ones."""
        method, calls, warmup = message["method"], message["calls"], message["warmup"]
        if calls > len(self.sets):  # the referee maps enough sets first; never reuse one
            raise CallFailed(
                statuses.TIMING_ERROR, f"{method}: {calls} calls, {len(self.sets)} sets"
            )
        graph = self.graph if method == "graph" and message.get("extend") else None
        first = graph.calls if graph is not None and graph.calls < calls else 0
        if not first:
            self.launches.pop(method, None)
            if method == "graph":
                self.graph = None
        self.last_refs.pop(method, None)
        self.outbox.forget()  # a graph released its memory: its segments are not the same
        try:
            if method in ("prepared", "graph") and self.loaded.prepare is not None:
                if method == "prepared" or message.get("launch") == "prepared":
                    made = [self.loaded.prepare(*s) for s in self.sets[first:calls]]
                    self.launches[method] = self.launches.get(method, [])[:first] + made
        except Exception as error:
            raise CallFailed(statuses.TIMING_ERROR, f"prepare: {_one_line(error)}") from None
        if method == "graph":
            slots = [self._slot(i, method) for i in range(first, calls)]
            try:
                captured, outputs = timer.capture(slots, warmup, self.device)
            except Exception as error:
                self._synchronize()
                self.graph = None
                return {"op": "unavailable", "method": method, "error": _one_line(error)}
            self.graph = self.graph if first else timer.Graphs()
            self.graph.add(captured, outputs)
            self.timed_at = time.perf_counter()  # (the trace's: when the capture ended)
            if self.device.type == "cuda":  # its outputs stay where they are: named once, here
                return {"op": "ready", "method": method, "outputs": self._graph_refs()}
        return {"op": "ready", "method": method}

    def _graph_refs(self) -> list:
        """The graph's outputs per call, checked and exported now rather than in its first
        timed sample: there it cost the referee's time 15 us a call (35 ms for 4,000 calls)
        beyond the worker's (H200 audit at 962fd84), in the first sample alone."""
        self.kept = []
        refs = self._sample_outputs("graph", self.graph.outputs)
        self.kept = []  # the graph holds them
        return refs

    def go(self, message: dict[str, Any]) -> dict[str, Any]:
        method, calls, index = message["method"], message["calls"], message["index"]
        self.kept = []
        try:
            if method == "graph":
                if self.graph is None or self.graph.calls != calls:
                    raise CallFailed(statuses.TIMING_ERROR, f"graph: no graph of {calls} calls")
                us, host_us = timer.replay(self.graph, calls, self.device)
                produced = self.graph.outputs
            else:
                slots = [self._slot(i % len(self.sets), method) for i in range(calls)]
                us, host_us, produced = timer.sample(slots, self.device)
        except Exception as error:
            raise CallFailed(statuses.TIMING_ERROR, f"{method}: {_one_line(error)}") from None
        self.timed_at = time.perf_counter()
        reply: dict[str, Any] = {
            "op": "sample",
            "method": method,
            "index": index,
            "us": us,
            "outputs": [],
        }
        if host_us is not None:
            reply["host_us"] = host_us
        if index >= 0:  # the warmup sample's outputs are not checked
            reply["outputs"] = self._sample_outputs(method, produced)
        return reply

    def kernels(self, message: dict[str, Any]) -> dict[str, Any]:
        """One eager sample of ``calls`` calls under CUPTI, each after ``idle_s`` of rest
        where that is more than 0: its kernels' own durations."""
        calls, idle_s = message["calls"], message["idle_s"]
        if calls > len(self.sets):
            raise CallFailed(
                statuses.TIMING_ERROR, f"kernels: {calls} calls, {len(self.sets)} sets"
            )
        slots = [self._slot(i, "eager") for i in range(calls)]
        try:
            times = timer.kernel_sample(slots, self.device, idle_s)
        except Exception as error:
            self._synchronize()
            return {"op": "kernels", "error": _one_line(error)}
        return {"op": "kernels", **times._asdict()}

    def _sample_outputs(self, method: str, produced: list[Any]) -> list | str:
        """References to each slot's outputs, or "same" when they are those of the
        method's previous sample (a graph's on CUDA always are: its outputs are exported
        where they live; on the CPU they are copied out after every sample)."""
        last = self.last_refs.get(method)
        if method == "graph" and last is not None and self.device.type == "cuda":
            return "same"
        slots = [self._outputs(outputs, f"{method} call", timed=True) for outputs in produced]
        self.kept = slots
        flat = self.outbox.add([tensor for outputs in slots for tensor in outputs])
        width = len(self.names)
        refs = [flat[i : i + width] for i in range(0, len(flat), width)]
        if refs == last and not self.outbox.new:
            return "same"
        self.last_refs[method] = refs
        return refs

    def end(self) -> dict[str, Any]:
        self._synchronize()
        self.kept = []
        self.inputs, self.sets, self.buffers, self.launches = [], [], [], {}
        self.graph = None
        if self.imports is not None:
            self.imports.close()
        for mapped in self.maps:
            try:
                mapped.close()
            except BufferError:  # a view the solution keeps: the mapping goes with the process
                pass
        self._case_reset()
        self.outbox.reset()
        self._give_back_memory()
        return {"op": "ended"}

    def _give_back_memory(self) -> None:
        """The case's device memory back to the driver, its graphs' pools first. torch keeps
        what a process freed for its own later use, and a graph's pool, once the graph is
        gone, serves no other: each capture takes new memory. While a graph is captured
        torch may not give cached memory back, so a capture ran out of memory where the
        device was full of this worker's old pools (13 of the 1,129 cases of the H200
        audit at b6e1d3b/e83ee6e lost their graph to it; one worker's out-of-memory
        message counted 114 GiB of free blocks in graph pools), and the referee, sizing a
        case by the device's free memory, gave samples fewer calls case after case
        (docs/measurements/case-breakdown.md, twentieth session). Everything of the case
        is unreachable here (the referee closed its mappings of the outputs before it
        asked the worker to end).

        Only where more than KEPT_CACHE_BYTES are cached: emptying it after every case cost
        the H200 audit at 958f3fb 0.015-0.02 s a case in the step itself (the QSA index
        decode's ``end`` 0.041 s against 0.019 at e83ee6e, twenty-second session), and the
        next case then took from the driver what it could have found cached. Old pools
        then pile up to at most that much: too little to fail a capture or to move the
        referee's sizing (a quarter of the free memory, capped at 16 GiB, where the
        referee and its sets leave about 100 GiB free), and well within what the referee
        lets a worker keep between cases (device_memory.WORKER_HELD_BYTES). The bound is a
        worker's: the frozen workers of a job's solutions keep up to that much each."""
        if self.device.type != "cuda":
            return
        cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        if cached > KEPT_CACHE_BYTES:
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ the loop

    def send(self, reply: dict[str, Any]) -> None:
        if reply["op"] in ("checked", "sample", "ready"):
            reply["buffers"] = self.outbox.new
        try:
            self.channel.send(reply, self.outbox.fds)
        finally:
            self.outbox.sent()

    def serve(self) -> None:
        trace = bool(os.environ.get("INFERENCE_KERNELS_TRACE"))
        while True:
            message, fds = self.channel.recv()
            received = time.perf_counter()
            op = message["op"]
            if op == "exit":
                return
            # No cyclic collection while a graph is captured, a sample runs, and either's
            # outputs are named and sent (thousands of objects at once, collector.py): a
            # pause there is no part of the solution's time, yet the referee, timing from
            # outside, would see it. The collection due runs after the reply has gone.
            pause = collector.paused() if op in ("method", "go") else contextlib.nullcontext()
            with pause:
                reply = self._answer(op, message, fds)
                built = time.perf_counter()
                self.send(reply)
            if trace:  # INFERENCE_KERNELS_TRACE: when each message came and went, in the log
                print(
                    f"trace {op} {message.get('index', '')} received {received:.6f} "
                    f"built {built:.6f} sent {time.perf_counter():.6f} "
                    f"timed {self.timed_at:.6f}",
                    flush=True,
                )

    def _answer(self, op: str, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """The reply to one message of the referee's (a failure of the solution's own, as
        a message, when it fails)."""
        try:
            if op == "case":
                return self.case(message, fds)
            if op == "sets":
                self.map_sets(message, fds)
                return {"op": "mapped"}
            if op == "method":
                return self.method(message)
            if op == "kernels":
                return self.kernels(message)
            if op == "go":
                return self.go(message)
            if op == "wake":
                return {"op": "awake"}
            return self.end()
        except CallFailed as failure:
            self.outbox.sent()
            return {"op": "failed", "status": failure.status, "error": failure.error}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--sandboxed", type=int, metavar="UID")
    options = parser.parse_args()
    if options.sandboxed is not None:
        drop_privileges(options.sandboxed)
    channel = Channel.from_fd(options.fd)
    init, _ = channel.recv()
    worker = Worker(channel, init)
    # A cpp/cuda solution is compiled here, before anything is timed (within the referee's
    # wait for "loaded": the worker's timeout).
    build = Build.from_dict(init["build"]) if init.get("build") else None
    cpu_math.warm()  # before any solution code runs (the first sqrt of a process, cpu_math.py)
    try:
        worker.loaded = load_package(
            worker.solution, worker.definition, Path(init["package"]), build
        )
        collector.freeze()  # torch, the solution's modules: out of every later collection
        channel.send({"op": "loaded", "ok": True, "prepare": worker.loaded.prepare is not None})
    except SolutionLoadError as error:
        failed = {"op": "loaded", "ok": False, "error": str(error)[:3000], "status": error.status}
        channel.send(failed)
        return
    except Exception as error:
        channel.send({"op": "loaded", "ok": False, "error": _one_line(error)})
        return
    try:
        worker.serve()
    except ChannelClosed:
        pass
    sys.stdout.flush()


if __name__ == "__main__":
    main()
