"""`reference --cache DIR` with the CPU's work beside the device's (judge/reference_fill.py):
the inputs made ahead by the prefetch helper, the outputs stored by a thread of their own.
What it keeps must be what the referee would compute, and a store that fails must stop the
fill with its workload named, not be lost or blamed on another workload."""

import pytest
import torch
from candidates import ROOT
from typer.testing import CliRunner

from inference_kernels.cli import app
from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge import reference_cache
from inference_kernels.judge.reference_cache import ReferenceCache, reference_key
from inference_kernels.judge.reference_fill import Fill
from inference_kernels.materialize.inputs import materialize
from inference_kernels.materialize.reference_runs import run_case
from inference_kernels.materialize.references import run_reference
from inference_kernels.signing import key

DEFINITION = "gdn_decode_qk4_v8_d128_k_last"  # stand-ins drawn on the CPU, a float scalar


def test_a_prefetched_fill_keeps_what_the_referee_would_compute(tmp_path):
    dataset = load_dataset(ROOT / "dataset")
    definition = dataset.definitions[DEFINITION]
    workloads = dataset.workloads[DEFINITION][:3]
    fill = Fill(tmp_path, "cpu", prefetch=True)
    requests = [fill.request(definition, w, None, dataset.root) for w in workloads]
    prefetched = 0
    try:
        fill.ahead(requests[0])
        for index, workload in enumerate(workloads):
            made = fill.inputs(requests[index])
            prefetched += made is not None
            if index + 1 < len(workloads):
                fill.ahead(requests[index + 1])
            run = run_case(
                definition,
                workload,
                data_root=dataset.root,
                device="cpu",
                keep=fill.keeper(definition, workload),
                made=made,
            )
            assert run.status == "passed", run.problems
    finally:
        fill.close()
    assert prefetched == 3 and fill.failed is None
    cache = ReferenceCache(tmp_path / "references", key())
    for workload in workloads:
        kept = cache.load(reference_key(definition, workload, "cpu"), torch.device("cpu"))
        inputs = materialize(definition, workload, data_root=dataset.root)
        expected = run_reference(definition, inputs.values)
        assert kept is not None and len(kept) == len(expected)
        for mine, theirs in zip(kept, expected, strict=True):
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)


@pytest.mark.parametrize(
    "error",
    [OSError(28, "No space left on device"), RuntimeError("Some tensors share memory")],
)
def test_a_store_that_fails_stops_the_fill_naming_its_workload(tmp_path, monkeypatch, error):
    dataset = load_dataset(ROOT / "dataset")
    second = dataset.workloads[DEFINITION][1].uuid
    stored = []
    real = ReferenceCache.store

    def store(self, entry, outputs):
        if len(stored) == 1:
            raise error
        stored.append(entry)
        real(self, entry, outputs)

    monkeypatch.setattr(reference_cache.ReferenceCache, "store", store)
    cache = tmp_path / "cache"
    done = CliRunner().invoke(
        app, ["reference", "-d", DEFINITION, "--suite", "all", "--cache", str(cache)]
    )
    assert done.exit_code == 1, done.output
    assert f"storing the reference of {DEFINITION} {second}" in done.output
    assert f"{type(error).__name__}: {error}" in done.output
    assert "reference_error" not in done.output  # not blamed on the next workload
    assert len(list((cache / "references").glob("*.safetensors"))) == 1  # the first, kept
