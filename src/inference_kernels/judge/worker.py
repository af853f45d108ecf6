"""The solution worker: one process per (solution, device), the only place solution code runs.

It materializes a case's inputs, calls the solution once, checks what it returned
(count, plain tensors, no aliasing of inputs), and hands the outputs and the inputs
it passed to the verifier process, which alone holds the reference outputs. If told
to continue, it times the solution on rotating, perturbed input copies and hands over
the timed calls' outputs and the inputs once more. It reports to the scheduler only
what happened here; the verdict on correctness is the verifier's.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from .. import schema
from ..errors import DatasetError
from ..materialize.inputs import canary_inputs, materialize
from . import statuses
from . import timing as timer  # binds the clocks before any solution is imported
from .guards import aliased_inputs, as_list, is_plain_tensor, make_copies
from .loader import LoadedSolution, SolutionLoadError, load_solution
from .logs import redirect_output

COPY_BUDGET_CPU = 1 << 30  # bytes of input copies for timing on the CPU
COPY_BUDGET_CUDA_FRACTION = 0.25  # of free device memory


def _one_line(error: BaseException) -> str:
    where = traceback.extract_tb(error.__traceback__)
    place = f" (at {Path(where[-1].filename).name}:{where[-1].lineno})" if where else ""
    text = " ".join(str(error).split())[:500]
    return f"{type(error).__name__}: {text}{place}"


class Worker:
    def __init__(self, device: str, commands, verify, results, definition, solution, cache: Path):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.commands, self.verify, self.results = commands, verify, results
        self.definition = schema.Definition.model_validate_json(definition)
        self.solution = schema.Solution.model_validate_json(solution)
        self.output_names = list(self.definition.outputs)
        self.cache = cache
        self.loaded: LoadedSolution | None = None
        self.call_seconds = 0.0  # the checked call's duration, which sizes the timing schedule
        self.preheated = False  # the GPU is loaded once, before this worker's first timing

    # ------------------------------------------------------------------ calls

    def _output_buffers(self, workload) -> list:
        from ..dataset.shapes import declared_shape
        from ..dtypes import torch_dtype

        return [
            self.torch.empty(
                declared_shape(self.definition, workload, name),
                dtype=torch_dtype(spec.dtype),
                device=self.device,
            )
            for name, spec in self.definition.outputs.items()
        ]

    def _caller(self, workload, input_sets: list[list[Any]], prepared: bool):
        """call(k): one call on input set k; returns its outputs (a list, or None)."""
        loaded = self.loaded
        if prepared:
            launches = [loaded.prepare(*inputs) for inputs in input_sets]
            return lambda k: as_list(launches[k](), self.output_names)
        if self.solution.spec.destination_passing_style:
            buffers = [self._output_buffers(workload) for _ in input_sets]

            def call_dps(k: int):
                loaded.run(*input_sets[k], *buffers[k])
                return buffers[k]

            return call_dps
        return lambda k: as_list(loaded.run(*input_sets[k]), self.output_names)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    # ------------------------------------------------------------------ a case

    def run_case(self, message: dict) -> None:
        case = message["case_id"]
        workload = schema.Workload.model_validate(message["workload"])
        capture = message.get("capture")
        capture = schema.CaptureRecord.model_validate(capture) if capture else None
        data_root = Path(message["data_root"])
        try:
            made = materialize(
                self.definition, workload, data_root=data_root, device=self.device, capture=capture
            )
        except DatasetError as error:
            self.results.put(
                {
                    "op": "checked",
                    "case_id": case,
                    "status": statuses.INPUT_ERROR,
                    "error": str(error),
                }
            )
            return
        inputs = made.values
        try:
            began = time.perf_counter()
            outputs = self._caller(workload, [inputs], prepared=False)(0)
            self._synchronize()
            self.call_seconds = time.perf_counter() - began
        except Exception as error:
            self.results.put(
                {
                    "op": "checked",
                    "case_id": case,
                    "status": statuses.RUNTIME_ERROR,
                    "error": _one_line(error),
                }
            )
            return
        problem = self._output_problem(outputs, inputs)
        if problem:
            self.results.put({"op": "checked", "case_id": case, **problem})
            return
        self.verify.put(
            {
                "op": "verify",
                "case_id": case,
                "stage": "check",
                "outputs": outputs,
                "inputs": {"call": inputs},
            }
        )
        self.results.put({"op": "checked", "case_id": case, "status": "sent"})
        if self.commands.get()["op"] != "continue":
            return
        canary = canary_inputs(
            self.definition, workload, inputs, device=self.device, capture=capture
        )
        try:
            began = (
                time.perf_counter()
            )  # a second call, without first-call setup, sizes the schedule
            self._caller(workload, [inputs], prepared=False)(0)
            self._synchronize()
            self.call_seconds = time.perf_counter() - began
            timing, timed = self._time(message["timing"], workload, inputs, canary, made.nbytes())
            failure = self._timing_failure(timing, timed)
        except Exception as error:
            timing, timed = {}, {}
            failure = {"status": statuses.TIMING_ERROR, "error": _one_line(error)}
        if failure:
            timed = {}  # what is not verified is not sent: it may not even pickle
        self.verify.put(
            {
                "op": "verify",
                "case_id": case,
                "stage": "timed",
                "outputs": timed,
                "inputs": {"after timing": inputs},
            }
        )
        self.results.put({"op": "timed", "case_id": case, "timing": timing, **(failure or {})})
        self.commands.get()  # "done": the verifier has read the tensors; let them go

    def _timing_failure(self, timing: dict, timed: dict) -> dict | None:
        """Eager and prepared calls must not raise while timed, and every timed method must
        leave outputs to verify (its last call's and its canary call's): a launch that
        returns nothing would otherwise be timed and never checked. A graph that cannot be
        captured only loses its graph time."""
        for method in ("eager", "prepared"):
            if "error" in timing.get(method, {}):
                return {
                    "status": statuses.TIMING_ERROR,
                    "error": f"{method}: {timing[method]['error']}",
                }
        for method in [m for m in ("eager", "prepared", "graph") if m in timing]:
            if method == "graph" and "error" in timing[method]:
                continue
            for key in (method, f"{method} canary"):
                outputs = timed.get(key)
                if outputs is None or not all(is_plain_tensor(v) for v in outputs):
                    return {
                        "status": statuses.TIMED_OUTPUT_MISMATCH,
                        "error": f"{key} call returned no outputs of plain tensors "
                        f"({self.output_names})",
                    }
        return None

    def _output_problem(self, outputs, inputs) -> dict | None:
        if outputs is None:
            return {
                "status": statuses.WRONG_OUTPUT_COUNT,
                "error": f"expected {len(self.output_names)} outputs {self.output_names}",
            }
        for name, value in zip(self.output_names, outputs, strict=True):
            if not is_plain_tensor(value):
                return {
                    "status": statuses.TYPE_MISMATCH,
                    "error": f"{name} is a {type(value).__name__}, not a plain torch.Tensor",
                }
        aliased = aliased_inputs(outputs, inputs, list(self.definition.inputs))
        if aliased:
            return {
                "status": statuses.OUTPUT_ALIASES_INPUT,
                "error": f"an output shares storage with input(s) {', '.join(aliased)}",
            }
        return None

    def _copy_plan(self, nbytes: int, calls: int) -> tuple[int, bool]:
        """How many input sets to rotate over, and whether integer inputs must be shared."""
        if self.device.type == "cuda":  # free memory, and what this process holds unused
            cuda = self.torch.cuda
            unused = cuda.memory_reserved(self.device) - cuda.memory_allocated(self.device)
            free = cuda.mem_get_info(self.device)[0] + unused
            budget = int(free * COPY_BUDGET_CUDA_FRACTION)
        else:
            budget = COPY_BUDGET_CPU
        fit = budget // max(nbytes, 1)  # full copies that fit in the budget
        return max(2, min(calls, fit)), fit < 2

    def _time(self, options: dict, workload, inputs, canary, nbytes: int):
        """Eager, prepared and graph timings, and the outputs to verify: those of the last
        timed call (on an unperturbed copy) and of the call on the canary inputs."""
        warmup, iters, trials = timer.schedule(options, self.call_seconds, self.device)
        if not self.preheated:
            timer.preheat(self.device)
            self.preheated = True
        total = warmup + iters * trials
        count, share = self._copy_plan(nbytes, total)
        sets = make_copies(inputs, count, share_integers=share) + [canary]
        last, canary_call = total - 1, total - 2
        keep = {last, canary_call}

        def pick(i: int) -> int:  # fresh sets in turn; the last call on set 0 (unperturbed)
            return count if i == canary_call else (last - i) % count

        results: dict[str, Any] = {
            "schedule": {"warmup": warmup, "iters": iters, "trials": trials},
            "copies": {"sets": count, "integers_shared": share},
        }
        timed: dict[str, list] = {}
        methods = [("eager", False)] + ([("prepared", True)] if self.loaded.prepare else [])
        for method, prepared in methods:
            try:
                on_set = self._caller(workload, sets, prepared)

                def call(i: int, on_set=on_set):
                    return on_set(pick(i))

                if options.get("cold_l2") and self.device.type == "cuda":
                    measured, kept = timer.eager_cold(call, warmup, trials, self.device, keep)
                else:
                    measured, kept = timer.eager(call, warmup, iters, trials, self.device, keep)
                results[method] = {**measured.to_dict(), "suspect": timer.suspect(measured)}
                timed[method] = kept.get(last)
                timed[f"{method} canary"] = kept.get(canary_call)
            except Exception as error:
                results[method] = {"error": _one_line(error)}
        if self.device.type == "cuda":
            results["graph"], graph_outputs = self._graph(
                workload, sets, count, warmup, iters, trials
            )
            timed.update(graph_outputs)
        self._synchronize()
        return results, {k: v for k, v in timed.items() if v is not None}

    def _graph(self, workload, sets, count, warmup, iters, trials) -> tuple[dict, dict]:
        """CUDA graph timing: captured call 0 runs on set 0, call 1 on the canary."""
        prepared = self.loaded.prepare is not None
        captured = max(iters, 2)
        order = [0, count] + [1 + j % max(count - 1, 1) for j in range(captured - 2)]
        try:
            on_set = self._caller(workload, sets, prepared)
            measured, outputs = timer.graph(
                lambda j: on_set(order[j]), warmup, captured, trials, self.device
            )
        except Exception as error:
            self._synchronize()
            return {"error": _one_line(error)}, {}
        launch = "prepared" if prepared else "run"
        return {**measured.to_dict(), "launch": launch}, {
            "graph": outputs[0],
            "graph canary": outputs[1],
        }


def main(
    device: str, commands, verify, results, definition: str, solution: str, cache: str, log: str
) -> None:
    redirect_output(Path(log))
    worker = Worker(device, commands, verify, results, definition, solution, Path(cache))
    try:
        worker.loaded = load_solution(worker.solution, worker.definition, worker.cache)
        results.put({"op": "loaded", "ok": True})
    except SolutionLoadError as error:
        results.put({"op": "loaded", "ok": False, "error": str(error)})
        return
    except Exception as error:
        results.put({"op": "loaded", "ok": False, "error": _one_line(error)})
        return
    while True:
        message = commands.get()
        if message["op"] == "exit":
            return
        worker.run_case(message)
