"""Attacks a review of 962fd84 (the sample gap, graph outputs named when captured, late
samples) found or tried, as tests (CPU only): padded replies that would rest the device
past the gap, a number that turned a solution's failure into the judge's, a graph extended
on sets another method replaced, and forged Readies and stale references that hold."""

import json
import socket
import struct
import subprocess
import threading
import time
from types import SimpleNamespace

import pytest
import torch
from test_rounds import REF, ScriptedWorker, Sets, sampler

from inference_kernels.judge import protocol, sampling
from inference_kernels.judge.channel import Channel, pair
from inference_kernels.judge.schedule import Plan
from inference_kernels.judge.shared import Inbox, Outbox
from inference_kernels.judge.workers import CaseEnded, WorkerHandle

CPU = torch.device("cpu")


def send_raw(channel: Channel, body: bytes, fds=()) -> None:
    """A frame as Channel.send makes it, of a body the worker wrote itself."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
    channel.sock.sendmsg([struct.pack("<II", len(body), len(fds))], ancillary if fds else [])
    channel.sock.sendall(body)


def handle(tmp_path):
    """A WorkerHandle whose worker is a thread of this test on the other end (the process
    is a stand-in that sleeps)."""
    ours, theirs = pair()
    process = subprocess.Popen(["sleep", "120"])
    worker = WorkerHandle(
        None, process, Channel(ours), tmp_path / "log", False, 30.0, Inbox(CPU), ["out"]
    )
    return worker, Channel(theirs), process


# ---------------------------------------------------------------- padded replies


PADS = {
    "plain": b"",
    "repeated_key": b',"us":5000.0' * 120_000,  # 1.4 MB; the last "us" would count
    "whitespace": b" " * (1 << 20),
    "long_number": b',"host_us":' + b"5" * 40,
}


@pytest.mark.parametrize("pad", list(PADS))
def test_a_padded_reply_ends_the_case_before_it_can_rest_the_device(tmp_path, pad):
    """The referee reads a reply after it has arrived, outside any sample's time, and the
    device rests meanwhile: a worker padding each reply (a key repeated 120,000 times took
    50-95 ms to parse) rested the device that long past the gap before every sample,
    neither late nor suspect. A reply that is not compact JSON is refused unread."""
    worker, theirs, process = handle(tmp_path)
    # (no halt and wake of the stand-in process: without a uid of its own each is three
    # scans of /proc, some 5 ms on this machine, and what is measured here is the padding)
    worker.halt = worker.thaw = lambda: None
    outbox = Outbox(CPU)
    gone, came = [], []  # when each reply was sent whole; when each go came

    def serve():
        while True:
            try:
                message, _ = theirs.recv()
            except Exception:
                return
            came.append((message.get("index"), time.perf_counter()))
            if message["op"] == "method":
                reply = {"op": "ready", "method": message["method"], "buffers": []}
            else:
                time.sleep(0.0052 * message["calls"])  # the calls: 5 ms each, as reported
                index = message["index"]
                refs = outbox.add([torch.full((1,), float(index))] * message["calls"])
                reply = {
                    "op": "sample",
                    "method": message["method"],
                    "index": index,
                    "us": 5000.0,
                    "outputs": [[r] for r in refs] if index >= 0 else [],
                    "buffers": outbox.new,
                }
            body = json.dumps(reply, separators=(",", ":")).encode()
            if reply["op"] == "sample":
                body = body[:-1] + PADS[pad] + b"}"
            send_raw(theirs, body, outbox.fds)
            outbox.sent()
            gone.append((reply.get("index"), time.perf_counter()))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        made = sampling.Sampler(
            worker, Sets(), SimpleNamespace(draw=lambda count: [{}] * count), CPU, Plan(1, 4, 7)
        )
        made.fit, made.shapes = 4, [torch.zeros(1)]
        made.gap = sampling.SAMPLE_GAP_SECONDS  # as on a GPU
        if pad != "plain":
            with pytest.raises(CaseEnded) as ended:
                made.time_methods(["eager"], None)
            assert ended.value.status == "protocol_violation"
            return
        entry = made.time_methods(["eager"], None)["eager"]
    finally:
        theirs.close()
        worker.channel.close()
        process.kill()
        process.wait()
    assert "late" not in entry and made.suspect == []
    timed_gone = [t for index, t in gone if index is not None and index >= 0]
    timed_came = [t for index, t in came if index is not None and index >= 1]
    rests = [go - reply for reply, go in zip(timed_gone, timed_came, strict=False)]
    assert len(rests) >= 5
    # the device's rest before each sample is the judge's gap
    assert max(rests) < sampling.SAMPLE_GAP_SECONDS + 0.010, [round(r * 1e3, 1) for r in rests]


def test_a_sample_is_timed_to_its_whole_reply_not_to_a_header_sent_early(tmp_path):
    """A worker that sends its reply's frame header at once and the body after its calls
    made the referee's time of a sample nil while the referee timed to the header (red
    team, ninth session): the sample is timed to the whole body's arrival."""
    worker, theirs, process = handle(tmp_path)

    def serve():
        message, _ = theirs.recv()
        body = json.dumps(
            {
                "op": "sample",
                "method": "eager",
                "index": 0,
                "us": 1.0,
                "outputs": [[]],
                "buffers": [],
            },
            separators=(",", ":"),
        ).encode()
        theirs.sock.sendall(struct.pack("<II", len(body), 0))
        time.sleep(0.05)  # the calls
        theirs.sock.sendall(body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        made = sampling.Sampler(
            worker, Sets(), SimpleNamespace(draw=lambda count: [{}] * count), CPU, Plan(1, 1, 1)
        )
        worker.names = []
        _, reply, seen = made.go("eager", 0, [{}])
    finally:
        theirs.close()
        worker.channel.close()
        process.kill()
        process.wait()
    assert reply.us == 1.0
    assert seen >= 0.05


# ---------------------------------------------------------------- a graph extended on replaced sets


def test_a_graph_is_not_extended_after_another_method_replaced_the_sets():
    """time_methods resamples methods one after another. Eager's resample may grow the sets
    (new sets, mapped by the worker in place of the old ones); the graph's resample after it
    then finds ``needed <= sets.count``, so its ``_ready`` says not grown and the graph is
    set up with extend=True: the worker keeps the calls it captured on the old sets (and the
    old sets' DPS buffers) and captures only the new calls. Those old calls read memory the
    referee no longer refreshes (given back to the arena, reused by the new sets): an honest
    graph fails its checks, and its Ready names outputs of calls on inputs that are gone.
    It is captured whole on the new sets."""
    events = []

    def times(method, index):
        if index == -1:
            return 8000.0  # each method's sizing sample: 8 calls a sample
        return 100.0  # rounds: too short for the CPU's allowance, resampled longer

    worker = ScriptedWorker(times)
    ask = worker.ask

    def logged(message, fds, *kinds):
        if message["op"] == "method":
            events.append(("method", message["method"], message["calls"], message.get("extend")))
        return ask(message, fds, *kinds)

    worker.ask = logged

    class Grown(Sets):
        def __init__(self, count):
            self.count = count

    made = sampler(worker)
    made.sets, made.fit = Grown(16), 512

    def grow(count, old):
        events.append(("sets", count))
        return Grown(count)

    made.grow = grow
    entries = made.time_methods(["eager", "graph"], None)
    assert entries["eager"].get("resampled") and entries["graph"].get("resampled"), events
    replaced = max(i for i, e in enumerate(events) if e[0] == "sets")
    graph_after = [e for e in events[replaced:] if e[:2] == ("method", "graph")]
    assert graph_after, events
    assert not graph_after[0][3], events  # a graph on new sets must be captured whole


# ---------------------------------------------------------------- a 5,000-digit integer


def test_an_integer_of_5000_digits_in_a_reply_is_a_protocol_violation(tmp_path):
    """json.loads raises a plain ValueError for an integer of more than 4,300 digits
    (Python's int-string limit); Channel.recv turned only JSONDecodeError, UnicodeDecodeError
    and RecursionError into ProtocolError: the ValueError left the referee's judge() and the
    lane answered reference_error (the judge's fault) for what a solution sent."""
    worker, theirs, process = handle(tmp_path)

    def serve():
        theirs.recv()
        body = b'{"op":"ready","method":"graph","buffers":[],"x":' + b"1" * 5000 + b"}"
        send_raw(theirs, body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(CaseEnded) as ended:
            worker.ask({"op": "method", "method": "graph"}, [], protocol.Ready)
        assert ended.value.status == "protocol_violation"
    finally:
        theirs.close()
        worker.channel.close()
        process.kill()
        process.wait()


BIGINT = """import struct

import torch

from .honest import decode, find_worker


def run(q, k, v, state, A_log, a, dt_bias, b, scale):
    channel = find_worker().channel
    body = b'{"op":"checked","seconds":' + b"1" * 5000 + b'}'
    channel.sock.sendall(struct.pack("<II", len(body), 0) + body)
    out, new_state = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    return torch.zeros_like(out), torch.zeros_like(new_state)
"""


def test_a_solution_cannot_turn_its_case_into_the_judges_reference_error(tmp_path):
    """End to end (the forged-message harness): a wrong solution (zeros) that sends one
    such message got reference_error ("the case cannot be judged"); it is a
    protocol_violation."""
    from candidates import write_candidate
    from test_forged_messages import _judge

    candidate = write_candidate(tmp_path, "bigint", BIGINT)
    status, error = _judge(tmp_path, [candidate], validation_only=True)["bigint"]
    assert status == "protocol_violation", (status, error)


# ---------------------------------------------------------------- checks that hold


def test_a_ready_for_eager_naming_outputs_is_ignored_and_same_needs_a_sample_first():
    """A Ready for eager (or prepared) that names outputs is not used: the first eager
    sample answering "same" ends the case (no references were ever set for eager)."""
    worker = ScriptedWorker(lambda method, index: 5000.0)
    ask = worker.ask

    def forged(message, fds, *kinds):
        if message["op"] == "method":
            return protocol.Ready(op="ready", method=message["method"], outputs=[[REF]] * 4)
        reply = ask(message, fds, *kinds)
        if message["op"] == "go" and message["index"] >= 0:
            return reply.model_copy(update={"outputs": "same"})
        return reply

    worker.ask = forged
    with pytest.raises(CaseEnded) as ended:
        sampler(worker).time_methods(["eager"], None)
    assert ended.value.error == "outputs the same as none"


def test_stale_graph_references_do_not_survive_a_longer_resample():
    """The graph's Readies named its 4 and then 8 calls (sized by a slow sizing sample);
    its resample is captured again for 64, and a Ready that names nothing then leaves no
    references (``_setup`` pops them): "same" ends the case."""

    def graph_named(calls):
        return [[REF]] * calls if calls < 64 else None

    def times(method, index):
        return 8000.0 if index == -1 else 100.0  # rounds too short: resampled longer

    worker = ScriptedWorker(times, graph_named=graph_named)
    made = sampler(worker)
    made.fit = 64
    with pytest.raises(CaseEnded) as ended:
        made.time_methods(["graph"], None)
    assert ended.value.error == "outputs the same as none"
    setups = [(op, m) for op, m, _ in worker.log if op == "method"]
    assert len(setups) == 3  # 4 calls, 8, then the resample's 64
