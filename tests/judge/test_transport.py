"""What crosses from a worker to the referee is bounded, validated data: frames, buffers
and tensor references that do not hold up end as errors, never as reads out of bounds,
faults or unpickled objects."""

import fcntl
import os
import subprocess
import threading
import time
from unittest import mock

import pytest
import torch

from inference_kernels.judge import cuda_ipc, protocol
from inference_kernels.judge.channel import Channel, ChannelTimeout, ProtocolError, pair
from inference_kernels.judge.shared import Inbox, Outbox, TransportError
from inference_kernels.judge.workers import WorkerHandle

CPU = torch.device("cpu")


def test_tensors_round_trip_through_a_sealed_memfd_arena():
    outbox, inbox = Outbox(CPU), Inbox(CPU)
    tensors = [torch.arange(10, dtype=torch.int32), torch.randn(3, 4).bfloat16()[:, 1:]]
    refs = outbox.add(tensors)
    inbox.announce(outbox.new, outbox.fds)
    copies = inbox.read(refs)
    assert all(torch.equal(a, b) for a, b in zip(copies, tensors, strict=True))
    outbox.sent()
    again = outbox.add([torch.ones(2)])  # the same arena, announced once
    assert outbox.new == [] and again[0]["buffer"] == refs[0]["buffer"]
    assert torch.equal(inbox.read(again)[0], torch.ones(2))
    inbox.close()


def _memfd(size: int, seals: int = 0) -> int:
    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: _memfd(4096), "not sealed against shrinking"),  # could fault the reader
        (lambda tmp: os.open(tmp / "file", os.O_RDWR | os.O_CREAT), "not a sealable memfd"),
        (lambda tmp: os.pipe()[0], "not a shared-memory file"),
    ],
)
def test_buffers_the_referee_could_fault_on_are_refused(tmp_path, make, message):
    fd = make(tmp_path)
    with pytest.raises(TransportError, match=message):
        Inbox(CPU).announce([{"id": 0, "kind": "memfd", "fd": 0, "size": 4096}], [fd])


@pytest.mark.parametrize(
    "ref",
    [
        {"offset": 4000, "dtype": "float32", "shape": [100], "stride": [1]},  # past the end
        {"offset": 0, "dtype": "float32", "shape": [10, 10], "stride": [1000, 1]},
        {"offset": 2, "dtype": "float32", "shape": [1], "stride": [1]},  # misaligned
        {"offset": 0, "dtype": "complex_thing", "shape": [1], "stride": [1]},
    ],
)
def test_references_outside_their_buffer_are_refused(ref):
    inbox = Inbox(CPU)
    fd = _memfd(4096, fcntl.F_SEAL_SHRINK)
    inbox.announce([{"id": 3, "kind": "memfd", "fd": 0, "size": 4096}], [fd])
    with pytest.raises(TransportError):
        inbox.read([{"buffer": 3, **ref}])
    with pytest.raises(TransportError, match="never announced"):
        inbox.read([{"buffer": 4, "offset": 0, "dtype": "int8", "shape": [1], "stride": [1]}])
    with pytest.raises(TransportError, match="not new"):  # an id cannot be pointed elsewhere
        inbox.announce([{"id": 3, "kind": "memfd", "fd": 0, "size": 4096}], [_memfd(64, 1)])


def test_a_descriptor_is_announced_as_one_buffer_only():
    """(A reply that announced one small memfd 4,096 times had the referee map it as often
    after the reply had arrived: 60 ms the worker ran on unseen; red team at 3cbba3c.)"""
    fd = _memfd(4096, fcntl.F_SEAL_SHRINK)
    twice = [{"id": i, "kind": "memfd", "fd": 0, "size": 4096} for i in range(2)]
    with pytest.raises(TransportError, match="two buffers name one descriptor"):
        Inbox(CPU).announce(twice, [fd])
    inbox = Inbox(CPU)
    inbox.announce(twice[:1], [fd])
    assert inbox.read([{"buffer": 0, "offset": 0, "dtype": "int8", "shape": [4], "stride": [1]}])
    inbox.close()


def test_frames_are_bounded_and_must_be_json_objects():
    ours, theirs = pair()
    channel = Channel(ours)
    theirs.sendall(b"\xff\xff\xff\x7f\x00\x00\x00\x00")  # 2 GB announced
    with pytest.raises(ProtocolError, match="at most"):
        channel.recv()
    for body in (b"\x80\x04K\x01.", b"[1, 2]"):  # a pickle; JSON that is not an object
        theirs.sendall(len(body).to_bytes(4, "little") + b"\0\0\0\0" + body)
        with pytest.raises(ProtocolError):
            channel.recv()
    with pytest.raises(ChannelTimeout):
        channel.recv(deadline=0)


def test_a_frame_cut_short_times_out_instead_of_hanging():
    ours, theirs = pair()
    theirs.sendall((100).to_bytes(4, "little") + b"\0\0\0\0" + b'{"op": ')
    began = time.monotonic()
    with pytest.raises(ChannelTimeout):
        Channel(ours).recv(deadline=time.monotonic() + 0.5)
    assert time.monotonic() - began < 5


def test_descriptors_travel_with_their_frame():
    ours, theirs = pair()
    fd = _memfd(64, fcntl.F_SEAL_SHRINK)
    sender = threading.Thread(target=Channel(theirs).send, args=({"op": "x"}, [fd]))
    sender.start()
    message, fds = Channel(ours).recv()
    sender.join()
    assert message == {"op": "x"} and len(fds) == 1 and os.fstat(fds[0]).st_size == 64


@pytest.mark.parametrize(
    "message",
    [
        {"op": "checked", "seconds": 1.0, "outputs": [], "buffers": [], "status": "passed"},
        {"op": "failed", "status": "passed", "error": ""},
        {"op": "sample", "method": "eager", "index": 0, "us": -1.0, "outputs": [], "buffers": []},
        {"op": "sample", "method": "turbo", "index": 0, "us": 1.0, "outputs": [], "buffers": []},
        {
            "op": "checked",
            "seconds": 1.0,
            "outputs": [
                {
                    "buffer": 0,
                    "offset": 0,
                    "dtype": "float32",
                    "shape": [1],
                    "stride": [1],
                    "verdict": "passed",
                }
            ],
            "buffers": [],
        },
    ],  # fmt: skip
)
def test_the_protocol_refuses_anything_it_does_not_define(message):
    with pytest.raises(protocol.Violation):
        protocol.parse(message, protocol.Checked, protocol.Sample)


def test_a_worker_can_report_only_failures():
    assert (
        protocol.parse(
            {"op": "failed", "status": "runtime_error", "error": "x"}, protocol.Checked
        ).status
        == "runtime_error"
    )
    assert "passed" not in protocol.WORKER_FAILURES


def test_an_unexpected_kind_is_refused_even_when_well_formed():
    with pytest.raises(protocol.Violation, match="where checked was due"):
        protocol.parse({"op": "ended"}, protocol.Checked)


def test_a_worker_lends_its_arena_case_after_case_and_frees_it_only_once_dead(tmp_path):
    """Input buffers stay mapped by a live worker, so they are never freed while it runs;
    each case borrows slices of the same arena again instead of allocating more (on the
    H200 a worker's buffers once piled up until cuMemAlloc failed, and later made the
    referee replace a worker every third case of an audit)."""
    process = subprocess.Popen(["sleep", "60"])
    worker = WorkerHandle(None, process, None, tmp_path / "log", False, 1.0, Inbox(CPU))
    worker.arena_bytes = 8192
    first = [worker.lend(size, CPU) for size in (1000, 5000)]  # 256-byte aligned slices
    arena = first[0].arena
    assert [(s.arena, s.start, s.size) for s in first] == [(arena, 0, 1024), (arena, 1024, 5120)]
    assert worker.pooled() == 8192 and worker.pooled(idle_only=True) == 8192 - 1024 - 5120
    with pytest.raises(ValueError, match="past the end"):
        first[0].view(0, torch.float32, [257])
    worker.release()  # the case ended; the worker lives on
    assert arena.tensor is not None
    again = worker.lend(6000, CPU)  # the next case starts at the arena's beginning again
    assert (again.arena, again.start) == (arena, 0)
    over = worker.lend(4000, CPU)  # 2,048 bytes left: a second arena, of just that size
    assert over.arena is not arena and over.arena.size == 4096 and len(worker.pool) == 2
    process.kill()
    process.wait()
    worker.release()
    assert worker.pool == [] and arena.tensor is None and over.arena.tensor is None


def test_sets_replaced_within_a_case_give_their_place_back(tmp_path):
    """Timing sets replaced by more of them (calibration, then the graph's own size) go
    back to the arena when they are its top, so that the larger sets fit where the smaller
    ones were instead of in a new arena (which made the worker be replaced next case)."""
    process = subprocess.Popen(["sleep", "60"])
    worker = WorkerHandle(None, process, None, tmp_path / "log", False, 1.0, Inbox(CPU))
    worker.arena_bytes = 8192
    call = worker.lend(1000, CPU)  # the checked call's set
    small = [worker.lend(1000, CPU), worker.lend(1000, CPU)]
    worker.take_back([call])  # below the top: stays lent
    assert worker.pooled(idle_only=True) == 8192 - 3 * 1024
    worker.take_back(small)
    assert worker.pooled(idle_only=True) == 8192 - 1024
    larger = worker.lend(7000, CPU)
    assert (larger.arena, larger.start) == (call.arena, 1024) and len(worker.pool) == 1
    process.kill()
    process.wait()
    worker.release()


def test_outputs_in_a_segment_already_named_cost_no_driver_call(monkeypatch):
    """A sample's outputs mostly share a few device segments: the driver is asked once per
    segment, and again after the allocator freed any (an address can then be another
    allocation's)."""
    asked, freed = [], [0]
    segments = {1 << 40: 1 << 20, 1 << 41: 1 << 21}

    def segment_at(address):
        asked.append(address)
        return next((b, n) for b, n in segments.items() if b <= address < b + n)

    monkeypatch.setattr(cuda_ipc, "segment_at", segment_at)
    monkeypatch.setattr(cuda_ipc, "handle_of", lambda base: f"{base:0128x}")
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device: {"segment.all.freed": freed[0]})
    outbox = Outbox(torch.device("cuda"))
    tensors = []
    for base in segments:
        for offset in (0, 4096, 8192):
            tensor = mock.Mock(dtype=torch.float32, shape=torch.Size([4]))
            tensor.data_ptr.return_value = base + offset
            tensor.stride.return_value = (1,)
            tensors.append(tensor)
    refs = outbox.add(tensors)
    assert len(asked) == 2 and [b["size"] for b in outbox.new] == [1 << 20, 1 << 21]
    assert [r["buffer"] for r in refs] == [0, 0, 0, 1, 1, 1]
    assert [r["offset"] for r in refs] == [0, 4096, 8192] * 2
    outbox.sent()
    freed[0] = 1  # a segment went back to the driver: everything is named anew
    again = outbox.add(tensors[:1])
    assert len(asked) == 3 and again[0]["buffer"] == 2 and len(outbox.new) == 1


def test_timing_sets_on_a_large_gpu_stay_within_the_cap_whatever_the_job(monkeypatch):
    """On the H200 a quarter of the free memory is 35 GB, and kernels reading inputs from a
    35 GB arena ran up to 1.5x slower (docs/measurements/h200-regimes.md, sixth session):
    however much memory is free, a case's timing sets fit in SETS_BUDGET_CUDA_MAX. The
    cap is each worker's whole, not divided among a job's solutions: with 1/N of it the
    SDPA of five copies got 43 sets and ran 21% slower, kernel time included (fifteenth
    session). The referee no longer knows how many solutions the job has when it sizes."""
    from types import SimpleNamespace

    from inference_kernels.judge import referee

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (120 << 30, 141 << 30))
    monkeypatch.setattr(referee, "SETS_BUDGET_CUDA_MAX", 16 << 30)  # whatever the environment
    one_set = [torch.empty(5 << 20, dtype=torch.bfloat16)]  # 10 MiB, as the 26 us SDPA's k
    job = SimpleNamespace(pristine=one_set, expected=[torch.empty(1)], timing={"warmup": 10})
    fake = SimpleNamespace(device=torch.device("cuda"), current=job)  # no job size to read
    worker = SimpleNamespace(pooled=lambda idle_only=False: 0)
    fit, share, _ = referee.Referee._fit(fake, worker)
    assert not share
    assert fit == referee.SETS_BUDGET_CUDA_MAX // (10 << 20) == 1638  # not 3,000, nor 327


def test_weights_that_would_outgrow_the_arena_are_shared_by_the_sets(monkeypatch):
    # The grouped GEMM: 4.5 GB of expert weights (int8) and 0.3 GB of their scales, small
    # activations. Unshared, the 16 GiB budget holds three sets; beside the call's inputs
    # (4.8 GB of the arena already lent) they outgrew the arena and the worker was replaced
    # before every next case. Shared, the 11.4 GiB left in the arena hold 64 sets.
    from types import SimpleNamespace

    from inference_kernels.judge import referee

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (100 << 30, 141 << 30))
    weights = torch.empty(4_800_000_000, dtype=torch.int8, device="meta")  # no memory
    activations = torch.empty(100_000_000, dtype=torch.float8_e4m3fn, device="meta")
    job = SimpleNamespace(
        pristine=[weights, activations],
        expected=[torch.empty(50_000_000, dtype=torch.bfloat16, device="meta")],
        timing={"warmup": 10},
    )
    fake = SimpleNamespace(device=torch.device("cuda"), current=job)
    room = (16 << 30) - 4_900_000_000  # the arena, less the call's inputs
    worker = SimpleNamespace(pooled=lambda idle_only=False: room if idle_only else 16 << 30)
    fit, share, spare = referee.Referee._fit(fake, worker)
    assert share and fit == spare == (room - 4_800_000_000) // 100_000_000 - 10 == 64
    # a float-only workload keeps its own sets, as before: within the arena when it can
    job.pristine = [activations]
    fit, share, spare = referee.Referee._fit(fake, worker)
    assert not share and fit == spare == room // 100_000_000 - 10


def test_a_graphs_headroom_never_takes_a_new_arena(monkeypatch):
    """The sets a graph sized after its capture may need (GRAPH_HEADROOM) are made only
    where the worker's arena holds them. The 11x11x11 neighborhood attention (B 1, T 49,
    112 x 192: 1.6 GB a set, one call a sample) got ten sets at 7829dc8, more than its
    16 GiB arena held: a new arena, and a new worker before the next case, 5-6 s, in 7 of
    its 9 cases on the H200."""
    from types import SimpleNamespace

    from inference_kernels.judge import referee

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (100 << 30, 141 << 30))
    monkeypatch.setattr(referee, "SETS_BUDGET_CUDA_MAX", 16 << 30)
    q = torch.empty(1 * 49 * 112 * 192 * 4 * 64, dtype=torch.bfloat16, device="meta")
    per = 3 * q.numel() * 2  # Q, K and V: 1.62 GB
    job = SimpleNamespace(pristine=[q, q, q], expected=[q], timing={"warmup": 10})
    fake = SimpleNamespace(device=torch.device("cuda"), current=job)
    room = (16 << 30) - per  # the first arena, less the call's inputs
    worker = SimpleNamespace(pooled=lambda idle_only=False: room if idle_only else 16 << 30)
    fit, share, spare = referee.Referee._fit(fake, worker)
    # its sets may go outside the arena (the plan's one set stays inside), the headroom not
    assert not share and fit == (16 << 30) // per == 10 and spare == 0
    # a set of a tenth the size: the arena holds the sets, and the headroom may take them
    job.pristine = job.expected = [q[: q.numel() // 10]] * 3
    fit, share, spare = referee.Referee._fit(fake, worker)
    assert not share and fit == spare == (room - 10 * per // 10) // (per // 10) > 10
