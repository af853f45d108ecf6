"""What the judge trusts outside a run is authenticated: the sandbox it needs, the files it
was pinned to, the rows it wrote, the references it cached."""

import ctypes
import json
import subprocess
import sys

import pytest
import torch
from candidates import DEFINITION, ROOT, SOLUTIONS, candidates_request, write_candidate

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.errors import DatasetError
from inference_kernels.judge.manifest import Manifest
from inference_kernels.judge.reference_cache import ReferenceCache
from inference_kernels.judge.results import earlier_rows
from inference_kernels.judge.scheduler import Job, Options, run_jobs
from inference_kernels.judge.session import NoSandbox, judge
from inference_kernels.signing import key, sign_row

HONEST = (SOLUTIONS / "honest_main.py").read_text()


def test_without_bwrap_the_run_refuses_and_touches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERENCE_KERNELS_BWRAP", str(tmp_path / "no-bwrap"))
    report = tmp_path / "results.jsonl"
    report.write_text("earlier\n")
    request = candidates_request(tmp_path, [write_candidate(tmp_path, "honest", HONEST)])
    with pytest.raises(NoSandbox, match="pass --no-sandbox"):
        judge(load_dataset(ROOT / "dataset"), request)
    assert report.read_text() == "earlier\n"
    command = [sys.executable, "-m", "inference_kernels.cli", "run", "-d", DEFINITION,
               "--report", str(report), "--cache", str(tmp_path / "cache"),
               "--overwrite"]  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "no sandbox:" in refused.stderr and "bubblewrap" in refused.stderr
    ran = subprocess.run(
        [*command, "--no-sandbox", "--validation-only"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-1000:]
    environment = json.loads(report.read_text().splitlines()[0])
    assert environment["isolation"]["sandbox"] == "none"


def test_the_environment_row_says_how_workers_were_isolated(tmp_path):
    request = candidates_request(
        tmp_path, [write_candidate(tmp_path, "honest", HONEST)], validation_only=True
    )
    rows = judge(load_dataset(ROOT / "dataset"), request)
    isolation = rows[0]["isolation"]
    assert isolation["sandbox"].startswith("bubblewrap")
    assert isolation["identity"].endswith("no capabilities")
    assert {"pid", "ipc", "net"} <= set(isolation["namespaces"])
    assert isolation["syscalls"].startswith("refused: setsid, sched_setattr")
    assert "setpgid done in name only" in isolation["syscalls"]
    assert set(rows[0]["manifest"]) == {"dataset", "judge"}


def test_resume_refuses_a_report_written_under_other_files(dataset_copy, tmp_path):
    request = candidates_request(
        tmp_path, [write_candidate(tmp_path, "honest", HONEST)], validation_only=True
    )
    judge(load_dataset(dataset_copy), request)
    captures = dataset_copy / "captures.jsonl"
    captures.write_text(captures.read_text() + "\n")  # no case changes, but a pinned file does
    request.resume = True
    with pytest.raises(DatasetError, match="the dataset or a candidate.s files changed"):
        judge(load_dataset(dataset_copy), request)


def test_a_file_that_changes_during_a_run_stops_it(dataset_copy, tmp_path):
    dataset = load_dataset(dataset_copy)
    manifest = Manifest.of(dataset, {DEFINITION}, [])
    pinned = manifest.hashes()
    manifest.check(pinned, "here")  # unchanged: nothing to say
    workloads = dataset.workloads[DEFINITION][:2]
    jobs = [
        Job(dataset.definitions[DEFINITION], w, dataset.tasks[DEFINITION],
            [dataset.solutions[f"torch_{DEFINITION}"]])
        for w in workloads
    ]  # fmt: skip
    options = Options(data_root=dataset_copy, cache=tmp_path / "cache", folder=tmp_path / "run",
                      validation_only=True, timeout=60)  # fmt: skip
    from inference_kernels.judge.results import ResultWriter

    writer = ResultWriter(None)
    checks = []

    def before_job():
        checks.append(1)
        if len(checks) == 2:  # between the two workloads, a task is edited
            path = dataset_copy / f"tasks/{DEFINITION}.json"
            path.write_text(path.read_text() + " ")
        manifest.check(pinned, "run")

    with pytest.raises(DatasetError, match="changed since this run began"):
        run_jobs(jobs, ["cpu"], options, writer, before_job=before_job)
    assert [row["uuid"] for row in writer.rows] == [workloads[0].uuid]  # the first row is kept


def test_rows_that_fail_their_mac_are_dropped_on_resume_and_the_file_rewritten(tmp_path):
    path = tmp_path / "results.jsonl"
    environment = sign_row(
        {"type": "environment", "started_at": "t", "devices": [], "versions": {}}
    )
    good = sign_row(
        {"type": "case", "definition": "d", "solution": "s", "uuid": "u1", "status": "passed"}
    )
    forged = {**sign_row({"type": "case", "definition": "d", "solution": "s", "uuid": "u2",
                          "status": "mismatch"}), "status": "passed"}  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in (environment, good, forged)))
    earlier = earlier_rows(path)
    assert earlier.dropped == 1 and set(earlier.cases) == {("d", "s", "u1")}
    assert len(path.read_text().splitlines()) == 2  # the forged row is gone from the file
    path.write_text(json.dumps({**environment, "started_at": "edited"}) + "\n")
    with pytest.raises(DatasetError, match="not signed by this judge's key"):
        earlier_rows(path)


@pytest.fixture(params=["read", "uploaded"])
def cache_path(request, monkeypatch):
    """Both ways a cached reference is loaded: read into memory (CPU) and sent through
    pinned buffers, hashed there (CUDA; here into CPU memory, the same code)."""
    from inference_kernels.judge import reference_cache

    monkeypatch.setattr(reference_cache, "_uploads", lambda device: request.param == "uploaded")
    return request.param


def test_a_cached_reference_that_fails_its_mac_is_recomputed_not_trusted(tmp_path, cache_path):
    cache = ReferenceCache(tmp_path, key())
    outputs = [torch.arange(6.0).reshape(2, 3), torch.tensor([1, 2], dtype=torch.int32)]
    cache.store("k", outputs)
    loaded = cache.load("k", torch.device("cpu"))
    assert all(torch.equal(a, b) for a, b in zip(loaded, outputs, strict=True))
    data = (tmp_path / "k.safetensors").read_bytes()
    changed = data.replace(torch.arange(6.0).numpy().tobytes(), bytes(24))
    assert changed != data
    (tmp_path / "k.safetensors").write_bytes(changed)
    assert cache.load("k", torch.device("cpu")) is None
    assert not (tmp_path / "k.safetensors").exists()  # gone, to be computed again
    cache.store("k", outputs)
    assert ReferenceCache(tmp_path, bytes(32)).load("k", torch.device("cpu")) is None  # other key


def test_cached_references_load_as_views_of_the_authenticated_bytes(
    tmp_path, monkeypatch, cache_path
):
    from inference_kernels.judge import reference_cache

    monkeypatch.setattr(reference_cache, "CHUNK", 64)  # several chunks, hashed on threads
    cache = ReferenceCache(tmp_path, key())
    outputs = [  # an odd bf16 count first: the next tensor's offset is not 4-byte aligned
        torch.arange(3, dtype=torch.bfloat16),
        torch.linspace(-1, 1, 40).reshape(5, 8),
        torch.tensor([[True, False]]),
        torch.empty(0, 4, dtype=torch.int64),
        torch.tensor([7, -2], dtype=torch.int64),
    ]
    cache.store("k", outputs)
    loaded = cache.load("k", torch.device("cpu"))
    assert [o.dtype for o in loaded] == [o.dtype for o in outputs]
    assert all(torch.equal(a, b) for a, b in zip(loaded, outputs, strict=True))
    data = bytearray((tmp_path / "k.safetensors").read_bytes())
    if cache_path == "read":
        begin = ctypes.addressof((ctypes.c_char * len(data)).from_buffer(data))
        views = reference_cache.views(data)  # no copies: each non-empty tensor in the buffer
        inside = [begin <= v.data_ptr() < begin + len(data) for v in views.values() if v.numel()]
        assert inside == [True] * 4
    else:  # one buffer on the device
        uploaded, digests = reference_cache._uploaded(
            tmp_path / "k.safetensors", torch.device("cpu")
        )
        assert bytes(uploaded.numpy()) == bytes(data)
        assert digests == reference_cache.chunk_digests(data) and len(digests) > 32
        views = reference_cache.views(uploaded)
        begin = uploaded.data_ptr()
        inside = [begin <= v.data_ptr() < begin + len(data) for v in views.values() if v.numel()]
        assert inside == [True] * 4
    for index in range(len(data) - 1, len(data) - 200, -37):  # a byte in a later chunk
        changed = bytearray(data)
        changed[index] ^= 1
        (tmp_path / "k.safetensors").write_bytes(changed)
        assert cache.load("k", torch.device("cpu")) is None
        cache.store("k", outputs)


MARKUP = """from .honest import decode


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    raise RuntimeError("bad [/] input [red]")
"""


def test_text_a_solution_controls_is_printed_as_text(tmp_path):
    """A failure whose message held a closing tag ("[/]") once made Rich raise in the run's
    row printer, and the run died after the first workload with a traceback."""
    from typer.testing import CliRunner

    from inference_kernels.cli import app

    candidate = write_candidate(tmp_path, "markup[b]", MARKUP)
    first, second = json.loads((ROOT / f"dataset/tasks/{DEFINITION}.json").read_text())["dev"][:2]
    result = CliRunner().invoke(
        app,
        ["run", "-d", DEFINITION, "--only-candidates", "--candidate", str(candidate), "-w", first,
         "-w", second, "--validation-only", "--report", str(tmp_path / "r.jsonl"),
         "--cache", str(tmp_path / "cache")],
        terminal_width=300,
    )  # fmt: skip
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "bad [/] input [red]" in result.output
    rows = map(json.loads, (tmp_path / "r.jsonl").read_text().splitlines())
    cases = [r for r in rows if r.get("type") == "case" and r["solution"] == "markup[b]"]
    assert [r["status"] for r in cases] == ["runtime_error"] * 2


@pytest.mark.gpu
def test_a_cached_reference_reaches_the_gpu_authenticated(tmp_path):
    """The CUDA path: mapped, hashed in pinned buffers, sent from there; one flipped bit in
    a later chunk of a 200 MB entry and it is refused."""
    device = torch.device("cuda", 0)
    cache = ReferenceCache(tmp_path, key())
    outputs = [torch.randn(50_000_000), torch.arange(3, dtype=torch.bfloat16)]
    cache.store("k", outputs)
    loaded = cache.load("k", device)
    assert [o.device.type for o in loaded] == ["cuda", "cuda"]
    assert all(torch.equal(a.cpu(), b) for a, b in zip(loaded, outputs, strict=True))
    data = bytearray((tmp_path / "k.safetensors").read_bytes())
    data[150_000_000] ^= 1
    (tmp_path / "k.safetensors").write_bytes(data)
    assert cache.load("k", device) is None
