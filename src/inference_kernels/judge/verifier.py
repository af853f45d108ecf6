"""The verifier: one trusted process per device that never imports solution code.

For each workload it materializes the pristine inputs and gets the reference outputs
(from the on-disk cache, or by running the reference). When the scheduler asks, it takes
the outputs a solution's worker produced and the inputs it passed (shared memory, no
copies) from that worker's own queue, compares outputs under the task's tolerance with
the shared acceptance policy and inputs byte for byte, and reports verdicts to the
scheduler.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from .. import schema
from ..acceptance import compare
from ..errors import DatasetError
from ..materialize.inputs import canary_inputs, materialize
from ..materialize.references import output_problems, run_reference
from ..materialize.standins import STANDIN_VERSION
from . import statuses
from .logs import redirect_output


def reference_key(
    definition: schema.Definition, workload: schema.Workload, device: str, variant: str = ""
) -> str:
    """Cache key: reference source, the workload (axes, descriptors), torch and device type
    (and ``canary`` for the canary inputs of the workload)."""
    material = {
        "variant": variant,
        "definition": definition.name,
        "reference": definition.reference,
        "outputs": {k: v.model_dump() for k, v in definition.outputs.items()},
        "workload": workload.model_dump(mode="json"),
        "torch": torch.__version__,
        "device": torch.device(device).type,
        "standins": STANDIN_VERSION,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _bytes_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    flat_a = a.detach().contiguous().reshape(-1).view(torch.uint8)
    flat_b = b.detach().to(a.device).contiguous().reshape(-1).view(torch.uint8)
    return bool(torch.equal(flat_a, flat_b))


class Verifier:
    def __init__(self, device: str, results, cache: Path):
        self.device = torch.device(device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.results = results
        self.cache = cache
        self.current: dict[str, Any] | None = None

    def prepare(self, message: dict) -> dict:
        self.current = None
        definition = schema.Definition.model_validate_json(message["definition"])
        workload = schema.Workload.model_validate(message["workload"])
        capture = message.get("capture")
        capture = schema.CaptureRecord.model_validate(capture) if capture else None
        started = time.perf_counter()
        try:
            made = materialize(
                definition,
                workload,
                data_root=Path(message["data_root"]),
                device=self.device,
                capture=capture,
            )
        except DatasetError as error:
            return {"ok": False, "status": statuses.INPUT_ERROR, "error": str(error)}
        expected, cached = self._reference(definition, workload, made.values)
        if isinstance(expected, str):
            return {"ok": False, "status": statuses.REFERENCE_ERROR, "error": expected}
        canary_expected = None
        if message.get("canary"):
            mixed = canary_inputs(
                definition, workload, made.values, device=self.device, capture=capture
            )
            canary_expected, _ = self._reference(definition, workload, mixed, variant="canary")
            del mixed
            if isinstance(canary_expected, str):
                return {
                    "ok": False,
                    "status": statuses.REFERENCE_ERROR,
                    "error": "canary: " + canary_expected,
                }
        self.current = {
            "definition": definition,
            "names": list(definition.inputs),
            "pristine": made.values,
            "expected": expected,
            "canary_expected": canary_expected,
            "tolerance": schema.Tolerance.model_validate(message["tolerance"]),
        }
        return {
            "ok": True,
            "inputs": made.origin,
            "generator": made.generator,
            "reference_cached": cached,
            "seconds": time.perf_counter() - started,
        }

    def _reference(self, definition, workload, inputs, variant="") -> tuple[list | str, bool]:
        path = (
            self.cache
            / "references"
            / f"{reference_key(definition, workload, str(self.device), variant)}.safetensors"
        )
        if path.exists():
            stored = load_file(str(path), device=str(self.device))
            return [stored[str(i)] for i in range(len(stored))], True
        try:
            outputs = run_reference(definition, inputs)
        except Exception as error:
            return f"the reference raised {type(error).__name__}: {error}", False
        problems = output_problems(definition, workload, outputs, self.device)
        if problems:
            return "reference output: " + "; ".join(problems), False
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        save_file(
            {str(i): o.detach().to("cpu").contiguous() for i, o in enumerate(outputs)}, str(partial)
        )
        os.replace(partial, path)
        return outputs, False

    def verify(self, message: dict) -> dict:
        current = self.current
        if current is None:
            return {"status": statuses.REFERENCE_ERROR, "error": "no workload is prepared"}
        outputs = message["outputs"]
        groups = outputs.items() if isinstance(outputs, dict) else [("call", outputs)]
        metrics: dict[str, dict] = {}
        status, error = statuses.PASSED, None
        for method, produced in groups:
            expected = current["canary_expected" if method.endswith("canary") else "expected"]
            if expected is None:
                continue
            for name, value, wanted in zip(
                current["definition"].outputs, produced, expected, strict=True
            ):
                verdict = compare(value, wanted, current["tolerance"])
                metrics.setdefault(method, {})[name] = verdict.to_dict()
                if not verdict.passed and status == statuses.PASSED:
                    if method == "call":
                        status = verdict.status
                    elif method.startswith("graph"):
                        status = statuses.GRAPH_OUTPUT_MISMATCH
                    else:
                        status = statuses.TIMED_OUTPUT_MISMATCH
                    error = f"{method} output {name}: {verdict.message or verdict.status}"
        for when, inputs in message["inputs"].items():
            changed = [
                name
                for name, value, pristine in zip(
                    current["names"], inputs, current["pristine"], strict=True
                )
                if isinstance(pristine, torch.Tensor) and not _bytes_equal(pristine, value)
            ]
            if changed and status == statuses.PASSED:
                status = statuses.INPUT_MUTATED
                error = f"input(s) {', '.join(changed)} changed ({when})"
        return {"status": status, "error": error, "outputs": metrics}


def _worker_outputs(data, request: dict) -> dict:
    """The message the worker sent for ``request``'s case and stage (earlier ones, of cases
    that ended before their stage, are passed over). Raises pickle.UnpicklingError for a
    message that needs more than tensors."""
    while True:
        message = data.get()
        if (
            message.get("case_id") == request["case_id"]
            and message.get("stage") == request["stage"]
        ):
            return message


def main(device: str, control, data: dict, results, cache: str, log: str) -> None:
    """Serve the scheduler's requests (``control``: prepare, verify, exit). For "verify",
    the outputs come from the solution's own queue in ``data``; the worker cannot reach
    ``control`` or ``results``, so it can neither ask for anything nor post a verdict."""
    redirect_output(Path(log))
    verifier = Verifier(device, results, Path(cache))
    results.put({"op": "hello"})
    while True:
        request = control.get()
        op = request["op"]
        if op == "exit":
            return
        try:
            if op == "prepare":
                reply = verifier.prepare(request)
            else:
                try:
                    sent = _worker_outputs(data[request["solution"]], request)
                except pickle.UnpicklingError as error:
                    reply = {
                        "status": statuses.TYPE_MISMATCH,
                        "error": f"the worker sent objects that are not tensors ({error})",
                        "outputs": {},
                    }
                else:
                    reply = verifier.verify(sent)
                reply["stage"] = request["stage"]
        except Exception as error:
            reply = {
                "ok": False,
                "status": statuses.REFERENCE_ERROR,
                "error": f"verifier: {type(error).__name__}: {error}",
                "outputs": {},
                "stage": request.get("stage"),
            }
            traceback.print_exc()
        results.put(
            {
                "op": op + "d" if op == "prepare" else "verified",
                "case_id": request.get("case_id"),
                **reply,
            }
        )
        sent = reply = None  # drop shared tensors before the next message
