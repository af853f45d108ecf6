"""The capture writer: tensors met at an operator boundary become a workload and its receipt.

A capture directory has the dataset's layout::

    definitions/<op_type>/<name>.json        written once per definition (``define``)
    workloads/<op_type>/<name>.jsonl         one workload line per capture
    blob/workloads/<name>/<sha256>.safetensors   each tensor once, named by its content hash
    captures.jsonl                           one receipt per capture: provenance, engine output

A capture is committed by its receipt: the workload line is appended first, the receipt
second, each in one write followed by fsync, and blobs are renamed into place before
either. A writer opened on a directory first drops what a crash left behind (a torn
last line, a workload line whose receipt never came), so a killed capture never leaves
a half-written record.

The uuid of a capture is derived from its provenance (model, revision, engine,
operation, adapters, step...), its input tensors and the engine output, so capturing
the same thing twice yields the same uuid and the second is not recorded again.
"""

from __future__ import annotations

import json
import uuid as uuids
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from ..dataset import files
from ..dataset.blobs import blob_path, content_hash, put
from ..dtypes import dtype_name, torch_dtype
from ..schema import CaptureRecord, Definition, ScalarInput, TraceLine, Workload

NAMESPACE = uuids.UUID("6b3f0a52-9d1e-5c47-8a55-3c1f1d7e2b90")  # inference-kernels captures
BLOB_METADATA = {"origin": "captured"}


class CaptureError(ValueError):
    """A call that cannot be recorded as the definition says (shape, dtype, unknown name)."""


def selection_key(name: str, provenance: Mapping[str, Any]) -> Hashable:
    """By default the first call per (definition, variant) is captured."""
    return (name, provenance.get("variant"))


def _not_json(value: Any) -> Any:
    raise CaptureError(f"provenance value {value!r} is not JSON (sets and objects are refused)")


def _canonical(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces; non-JSON values refused, so
    that a uuid never depends on how an object prints."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_not_json)


def write_atomically(path: Path, text: str) -> None:
    files.write_atomically(path, text.encode())


def _whole_lines(path: Path, uuid_of: Callable[[dict], str]) -> tuple[list[dict[str, Any]], int]:
    """The records of ``path`` and its number of lines. Only the last line may be torn (an
    interrupted append) and is left out; any other unreadable line is an error naming the
    file and line."""
    if not path.exists():
        return [], 0
    lines = path.read_text().splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            uuid_of(record)
        except json.JSONDecodeError:
            if number == len(lines):
                continue
            raise CaptureError(f"{path}: line {number}: not JSON") from None
        except (TypeError, KeyError):
            raise CaptureError(f"{path}: line {number}: not a record with a uuid") from None
        records.append(record)
    return records, len(lines)


def _rewrite(path: Path, records: list[dict[str, Any]], sort_keys: bool = False) -> None:
    write_atomically(path, "".join(json.dumps(r, sort_keys=sort_keys) + "\n" for r in records))


class CaptureWriter:
    """Writes captures into ``root``; see the module docstring for the layout.

    ``context`` is provenance shared by every capture (model, model_revision, engine,
    engine_version, source...). ``enabled`` limits the definitions captured, ``steps``
    the steps (the ``step`` of a call's provenance), ``key`` groups calls of which only
    the first is captured, and ``budget_bytes`` bounds the bytes of new blobs.
    """

    def __init__(
        self,
        root: Path,
        context: Mapping[str, Any],
        enabled: set[str] | None = None,
        steps: set[int] | None = None,
        key: Callable[[str, Mapping[str, Any]], Hashable] = selection_key,
        budget_bytes: int | None = None,
    ) -> None:
        self.root, self.context = Path(root), dict(context)
        self.enabled, self.steps, self.key = enabled, steps, key
        self.budget_bytes = budget_bytes
        self.written_bytes = 0
        self.definitions: dict[str, Definition] = {}
        self.captured: set[Hashable] = set()
        self.counts = {"written": 0, "already_recorded": 0, "over_budget": 0}
        self.receipts: set[str] = set()
        self._recover()

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        """Drop what an interrupted capture left: torn lines, workloads without receipts,
        files cut off mid-write (``*.partial``: a kill skips their cleanup)."""
        for partial in self.root.glob("**/*.partial"):
            partial.unlink()
        receipts_path = self.root / "captures.jsonl"
        receipts, lines = _whole_lines(receipts_path, lambda record: record["uuid"])
        if len(receipts) != lines:
            _rewrite(receipts_path, receipts, sort_keys=True)
        self.receipts = {record["uuid"] for record in receipts}
        for path in sorted((self.root / "workloads").glob("*/*.jsonl")):
            records, lines = _whole_lines(path, lambda record: record["workload"]["uuid"])
            kept = [r for r in records if r["workload"]["uuid"] in self.receipts]
            if len(kept) != lines:
                _rewrite(path, kept)
        for path in sorted((self.root / "definitions").glob("*/*.json")):
            try:
                definition = Definition.model_validate_json(path.read_text())
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "definition"
                raise CaptureError(
                    f"{path}: {where}: {first['msg']} ({error.error_count()} problems)"
                ) from None
            self.definitions[definition.name] = definition

    # ------------------------------------------------------------------ definitions

    def _definition_path(self, definition: Definition) -> Path:
        return self.root / "definitions" / definition.op_type / f"{definition.name}.json"

    def define(self, definition: Definition) -> None:
        """Make ``definition`` known. Its file is written with its first workload, so that a
        definition never lies on disk without one. A file that exists must hold the same."""
        known = self.definitions.get(definition.name)
        if known is not None:
            if known != definition:
                raise CaptureError(
                    f"{self._definition_path(known)}: differs from the definition being captured"
                )
            return
        self.definitions[definition.name] = definition

    def _persist(self, definition: Definition) -> None:
        path = self._definition_path(definition)
        if not path.exists():
            write_atomically(path, definition.model_dump_json(indent=2, exclude_none=True) + "\n")

    # ------------------------------------------------------------------ selection

    def wants(self, name: str, provenance: Mapping[str, Any]) -> bool:
        """Capture this call? Enabled definition, chosen step, first of its selection key,
        and budget left."""
        if self.enabled is not None and name not in self.enabled:
            return False
        if self.steps is not None and provenance.get("step") not in self.steps:
            return False
        if self.budget_bytes is not None and self.written_bytes >= self.budget_bytes:
            return False
        return self.key(name, provenance) not in self.captured

    # ------------------------------------------------------------------ writing

    def tensor(self, value: torch.Tensor, name: str, definition: str = "auxiliary") -> dict | None:
        """Store an auxiliary tensor (a page table, a mask...) and return its descriptor, or
        None when the size budget does not allow it."""
        digests = {id(value): content_hash(value)}
        needed = self._new_bytes(definition, [value], digests)
        if self.budget_bytes is not None and self.written_bytes + needed > self.budget_bytes:
            self.counts["over_budget"] += 1
            return None
        descriptor = put(self.root, definition, value, BLOB_METADATA, digests[id(value)])
        self.written_bytes += needed
        return {
            **descriptor.model_dump(),
            "name": name,
            "shape": list(value.shape),
            "dtype": dtype_name(value.dtype),
        }

    def _axes(self, definition: Definition, inputs: Mapping[str, Any]) -> dict[str, int]:
        const = definition.const_axes()
        axes: dict[str, int] = {}
        for input_name, spec in definition.inputs.items():
            value = inputs[input_name]
            if spec.shape is None:
                continue
            if not isinstance(value, torch.Tensor):
                raise CaptureError(f"{definition.name}.{input_name}: expected a tensor")
            if value.dtype != torch_dtype(spec.dtype):
                raise CaptureError(
                    f"{definition.name}.{input_name}: dtype {dtype_name(value.dtype)}, "
                    f"declared {spec.dtype}"
                )
            if value.dim() != len(spec.shape):
                raise CaptureError(
                    f"{definition.name}.{input_name}: {value.dim()} dims, declared {spec.shape}"
                )
            for axis, size in zip(spec.shape, value.shape, strict=True):
                expected = const.get(axis, axes.get(axis))
                if expected is not None and expected != size:
                    raise CaptureError(
                        f"{definition.name}.{input_name}: axis {axis} is {size}, "
                        f"elsewhere {expected}"
                    )
                if axis not in const:
                    axes[axis] = int(size)
        return axes

    def _new_bytes(self, name: str, tensors: list[torch.Tensor], digests: dict[int, str]) -> int:
        """Bytes of the tensors whose blobs do not exist yet (each distinct blob once)."""
        fresh = {}
        for value in tensors:
            path = self.root / blob_path(name, digests[id(value)])
            if not path.exists():
                fresh[path] = value.numel() * value.element_size()
        return sum(fresh.values())

    def write(
        self,
        name: str,
        inputs: Mapping[str, Any],
        outputs: Mapping[str, torch.Tensor] | None,
        provenance: Mapping[str, Any],
    ) -> str | None:
        """Record one call of definition ``name``; returns its uuid, or None when the size
        budget does not allow it. The call's selection key counts as captured either way."""
        definition = self.definitions.get(name)
        if definition is None:
            raise CaptureError(f"{name}: unknown definition (define it first)")
        if set(inputs) != set(definition.inputs):
            raise CaptureError(
                f"{name}: inputs {sorted(inputs)}, declared {list(definition.inputs)}"
            )
        if outputs is not None and set(outputs) != set(definition.outputs):
            raise CaptureError(
                f"{name}: outputs {sorted(outputs)}, declared {list(definition.outputs)}"
            )
        axes = self._axes(definition, inputs)
        self.captured.add(self.key(name, provenance))
        tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
        tensors += list((outputs or {}).values())
        digests = {id(value): content_hash(value) for value in tensors}  # hashed once each
        needed = self._new_bytes(name, tensors, digests)
        if self.budget_bytes is not None and self.written_bytes + needed > self.budget_bytes:
            self.counts["over_budget"] += 1
            return None
        descriptors = {}
        for input_name in definition.inputs:
            value = inputs[input_name]
            if isinstance(value, torch.Tensor):
                descriptors[input_name] = put(
                    self.root, name, value, BLOB_METADATA, digests[id(value)]
                )
            else:
                descriptors[input_name] = ScalarInput(type="scalar", value=value)
        self.written_bytes += needed
        receipt: dict[str, Any] = {**self.context, **provenance, "definition": name, "axes": axes}
        if outputs is not None:
            stored = {
                output: put(
                    self.root, name, outputs[output], BLOB_METADATA, digests[id(outputs[output])]
                ).model_dump()
                for output in definition.outputs
            }
            # One output: its descriptor itself, as the seed's receipts hold it.
            receipt["expected_output"] = next(iter(stored.values())) if len(stored) == 1 else stored
        identity = {
            key: value for key, value in receipt.items() if key not in ("validation", "uuid")
        }
        identity["inputs"] = {k: v.model_dump() for k, v in descriptors.items()}
        uuid = str(uuids.uuid5(NAMESPACE, _canonical(identity)))
        if uuid in self.receipts:
            self.counts["already_recorded"] += 1
            return uuid
        receipt["uuid"] = uuid
        receipt.setdefault("validation", {"status": "not replayed"})
        CaptureRecord.model_validate(receipt)  # the receipt must be a valid record
        workload = Workload(uuid=uuid, axes=axes, inputs=descriptors)
        line = TraceLine(definition=name, workload=workload)
        self._persist(definition)
        files.append_line(
            self.root / "workloads" / definition.op_type / f"{name}.jsonl",
            line.model_dump(mode="json"),
        )
        files.append_line(
            self.root / "captures.jsonl", json.loads(_canonical(receipt)), sort_keys=True
        )
        self.receipts.add(uuid)
        self.counts["written"] += 1
        return uuid
