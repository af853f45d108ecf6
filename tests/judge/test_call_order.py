"""A captured graph's calls one after another (call_order.py), on a stand-in for the
driver's graph functions: what the worker does to a capture before it is instantiated.

The property is checked by its own rule here, from what each edge means: a full edge lets
its node start once the node ahead has ended; a partial one (programmatic dependent launch,
launch completion) once the node ahead has started and let it. Every node of a call must
end before any node of a later call starts."""

import ctypes
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from inference_kernels.judge.call_order import Calls, CudaGraphs, GraphOrderError

FULL = 0
PROGRAMMATIC = 0x010001  # from_port CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC, type PROGRAMMATIC
LAUNCH_ORDER = 0x000002  # from_port CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER


class Graphs:
    """The driver's graph functions over one graph (handle 7) held in Python."""

    def __init__(self):
        self.order: list[int] = []  # nodes, in the order listed
        self.data: dict[tuple[int, int], int] = {}  # (from, to) -> edge data
        self.next = 100

    def launch(self, *after: int, data: int = FULL) -> int:
        node, self.next = self.next, self.next + 1
        self.order.append(node)
        for ahead in after:
            self.data[(ahead, node)] = data
        return node

    def capturing(self, stream: int) -> int:
        assert stream == 3
        return 7

    def nodes(self, graph: int) -> list[int]:
        assert graph == 7
        return list(self.order)

    def edges(self, graph: int) -> list[tuple[int, int, int]]:
        return [(a, b, d) for (a, b), d in self.data.items()]

    def empty(self, graph: int, after) -> int:
        return self.launch(*after)

    # (no edge is ever removed: the driver refuses to remove one from a graph that holds
    # memory nodes, and this stand-in has no way to)

    def add(self, graph: int, pairs) -> None:
        for pair in pairs:
            assert pair not in self.data  # one edge per pair of nodes
            self.data[pair] = FULL


def topological(graphs: Graphs) -> list[int]:
    """Every node, each after all that have an edge to it; fails on a cycle."""
    waiting = {node: 0 for node in graphs.order}
    for _, b in graphs.data:
        waiting[b] += 1
    ready = [node for node, count in waiting.items() if count == 0]
    order = []
    while ready:
        node = ready.pop()
        order.append(node)
        for a, b in graphs.data:
            if a == node:
                waiting[b] -= 1
                if waiting[b] == 0:
                    ready.append(b)
    assert len(order) == len(graphs.order), "the edges make a cycle"
    return order


def in_order(graphs: Graphs, calls: list[list[int]]) -> bool:
    """Does every node of each call end before any node of a later call starts?"""
    starts_after: dict[int, set[int]] = {}  # nodes that start only after this one started
    ends_before: dict[int, set[int]] = {}  # nodes that start only after this one ended
    for node in reversed(topological(graphs)):
        later = [(b, d) for (a, b), d in graphs.data.items() if a == node]
        starts_after[node] = set().union(*([{b} | starts_after[b] for b, _ in later] or [set()]))
        ends_before[node] = set().union(
            *([{b} | starts_after[b] for b, d in later if d == FULL] or [set()])
        )
    return all(
        set(later_call) <= ends_before[a]
        for k, call in enumerate(calls)
        for a in call
        for later_call in calls[k + 1 :]
    )


def captured(graphs: Graphs, build) -> Calls:
    """Run ``build``'s calls as a capture would, marking after each."""
    calls = Calls(graphs, 3)
    for call in build:
        call()
        calls.mark()
    return calls


def test_plain_calls_one_after_another_are_left_as_captured():
    graphs = Graphs()
    tail = []

    def call():
        first = graphs.launch(*tail[-1:])
        tail.append(graphs.launch(first))

    calls = captured(graphs, [call] * 3)
    before = dict(graphs.data)
    assert in_order(graphs, calls.calls)
    assert calls.serialize(7) == (0, 0)
    assert graphs.data == before


def test_a_call_launched_with_pdl_after_the_call_before_waits_for_all_of_it():
    """The attack: each call's one kernel launched with PDL, never waiting."""
    graphs = Graphs()
    tail = []

    def call():
        tail.append(graphs.launch(*tail[-1:], data=PROGRAMMATIC))

    calls = captured(graphs, [call] * 4)
    assert not in_order(graphs, calls.calls)  # as captured, the calls may run together
    # between two calls an empty node, after the kernel ahead, before the next
    assert calls.serialize(7) == (6, 3)
    assert in_order(graphs, calls.calls)
    assert list(graphs.data.values()).count(PROGRAMMATIC) == 3  # (kept: none is removed)


def test_a_call_whose_last_kernel_ends_early_is_waited_for_whole():
    """A call's second kernel launched with PDL and never waiting may end before the
    first: the next call must wait for the first too."""
    graphs = Graphs()
    tail = []

    def call():
        first = graphs.launch(*tail[-1:])
        tail.append(graphs.launch(first, data=LAUNCH_ORDER))

    calls = captured(graphs, [call] * 3)
    assert not in_order(graphs, calls.calls)
    assert calls.serialize(7) == (2, 0)  # each first kernel to the next call's
    assert in_order(graphs, calls.calls)
    assert list(graphs.data.values()).count(LAUNCH_ORDER) == 3  # within a call: as captured


def test_work_left_on_another_stream_and_a_call_that_depends_on_nothing():
    graphs = Graphs()
    left: list[int] = []

    def leaves_work():  # a side kernel nothing after it waits for
        main = graphs.launch()
        left.append(graphs.launch(main))

    def depends_on_nothing():
        graphs.launch()

    calls = captured(graphs, [leaves_work, depends_on_nothing, leaves_work])
    assert not in_order(graphs, calls.calls)
    assert calls.serialize(7) == (2, 0)  # the side kernel, and the second call's node
    assert in_order(graphs, calls.calls)


def test_a_call_that_added_no_node_is_passed_over():
    graphs = Graphs()
    calls = captured(graphs, [lambda: graphs.launch(), lambda: None, lambda: graphs.launch()])
    assert [len(c) for c in calls.calls] == [1, 0, 1]
    assert calls.serialize(7) == (1, 0)
    assert in_order(graphs, calls.calls)


def test_nodes_listed_in_another_order_are_still_told_apart_by_call():
    graphs = Graphs()
    listed = graphs.nodes
    graphs.nodes = lambda graph: list(reversed(listed(graph)))
    made = []
    calls = captured(graphs, [lambda: made.append([graphs.launch(), graphs.launch()])] * 3)
    assert calls.calls == [sorted(c, reverse=True) for c in made]


def test_a_graph_with_a_node_no_call_added_is_refused():
    graphs = Graphs()
    calls = captured(graphs, [lambda: graphs.launch()] * 2)
    graphs.launch()  # (after the last call's mark)
    with pytest.raises(GraphOrderError, match="1 nodes no call added"):
        calls.serialize(7)


def test_honest_pdl_calls_with_memory_nodes_are_put_in_order_without_removing_an_edge():
    """A call's first kernel launched with PDL (it waits before reading), a scratch
    buffer of cudaMallocAsync for the next kernel, freed, and a last kernel: the next
    call's first kernel has a programmatic edge from that last one. The driver refuses to
    remove an edge from a graph with memory nodes (cuda.h, CUDA 13.0; a helper's review)."""
    graphs = Graphs()
    tail: list[int] = []

    def call():
        first = graphs.launch(*tail[-1:], data=PROGRAMMATIC)
        scratch = graphs.launch(first)  # (an allocation node)
        freed = graphs.launch(graphs.launch(scratch))  # (a kernel, then a free node)
        tail.append(graphs.launch(freed))

    calls = captured(graphs, [call] * 3)
    assert not in_order(graphs, calls.calls)
    assert calls.serialize(7) == (4, 2)
    assert in_order(graphs, calls.calls)


def test_many_unordered_nodes_wait_through_one_empty_node():
    """Three independent nodes a call, each waited for by three independent nodes of the
    next: through one empty node, 6 edges rather than 9."""
    graphs = Graphs()
    calls = captured(graphs, [lambda: [graphs.launch() for _ in range(3)]] * 2)
    assert calls.serialize(7) == (6, 1)
    assert in_order(graphs, calls.calls)


def test_calls_captured_into_another_graph_are_refused():
    graphs = Graphs()
    calls = captured(graphs, [lambda: graphs.launch()])
    graphs.capturing = lambda stream: 8  # (a capture ended, another begun)
    with pytest.raises(GraphOrderError, match="more than one graph"):
        calls.mark()


@pytest.mark.parametrize("seed", range(40))
def test_any_capture_comes_out_in_order(seed):
    """Random calls of several kernels: edges within a call and to the calls before, full
    or partial, some nodes depending on nothing, some left unwaited for."""
    rng = random.Random(seed)
    graphs = Graphs()

    def call():
        made: list[int] = []
        for _ in range(rng.randint(0, 4)):
            pool = graphs.order[-8:]
            after = rng.sample(pool, rng.randint(0, min(2, len(pool))))
            made.append(graphs.launch(*after, data=rng.choice([FULL, FULL, PROGRAMMATIC])))

    calls = captured(graphs, [call] * rng.randint(2, 6))
    added, empties = calls.serialize(7)
    assert in_order(graphs, calls.calls)  # (and no cycle: topological() holds)
    assert added >= 2 * empties >= 0


STUB = Path(__file__).parent / "data/graph_driver_stub.c"


def _build(library: Path, *flags: str) -> Path:
    """STUB built as ``library``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler (the README's test setup installs g++ and its gcc)"
    command = [compiler, *flags, "-shared", "-fPIC", "-O1", "-o", str(library), str(STUB)]
    subprocess.run(command, check=True)
    return library


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """The driver's six functions as a C stand-in (data/graph_driver_stub.c), built here:
    (its path, the library, with the tests' own stub_* functions)."""
    built = _build(tmp_path_factory.mktemp("driver") / "libcuda-stand-in.so")
    library = ctypes.CDLL(str(built))  # (the same library CudaGraphs loads: one state)
    library.stub_node.restype = ctypes.c_uint64
    library.stub_edge.argtypes = [ctypes.c_uint64] * 3
    library.stub_reset()
    yield str(built), library
    library.stub_reset()


def _held(api: CudaGraphs, graph: int) -> Graphs:
    """What the stand-in driver holds, read back through ``api``."""
    held = Graphs()
    held.order = list(api.nodes(graph))
    held.data = {(a, b): d for a, b, d in api.edges(graph)}
    return held


def test_what_crosses_to_the_driver_is_what_it_expects(driver):
    """Through ctypes to a C stand-in of the driver: the PDL attack (an empty node a
    boundary) and a call whose first kernel ends unwaited for (direct edges), with node
    handles of pointers' size."""
    path, stub = driver
    stub.stub_reset()
    api = CudaGraphs(path)
    calls = Calls(api, stream=0x5A5A)
    tail: list[int] = []
    for _ in range(4):  # each call's one kernel, with a programmatic edge from the last
        node = stub.stub_node()
        if tail:
            assert stub.stub_edge(tail[-1], node, PROGRAMMATIC) == 0
        tail.append(node)
        calls.mark()
    assert all(node > 2**40 for call in calls.calls for node in call)
    assert calls.serialize(calls.graph) == (6, 3)
    held = _held(api, calls.graph)
    assert len(held.order) == 4 + 3
    assert list(held.data.values()).count(PROGRAMMATIC) == 3  # none removed
    assert in_order(held, calls.calls)

    stub.stub_reset()
    calls = Calls(api, stream=0x5A5A)
    tail = []
    for _ in range(3):  # two kernels a call, the second launch-ordered after the first
        first = stub.stub_node()
        if tail:
            stub.stub_edge(tail[-1], first, FULL)
        tail.append(stub.stub_node())
        stub.stub_edge(first, tail[-1], LAUNCH_ORDER)
        calls.mark()
    assert calls.serialize(calls.graph) == (2, 0)
    held = _held(api, calls.graph)
    assert len(held.order) == 6 and in_order(held, calls.calls)


def test_what_the_driver_refuses_ends_the_graph(driver):
    path, stub = driver
    stub.stub_reset()
    api = CudaGraphs(path)
    node = stub.stub_node()
    calls = Calls(api, stream=0x5A5A)
    calls.mark()
    with pytest.raises(GraphOrderError, match="CUDA_ERROR_INVALID_VALUE"):
        api.add(calls.graph, [(node, node + 1)])  # no such node
    stub.stub_reset()
    ctypes.c_int.in_dll(stub, "stub_capturing").value = 0
    with pytest.raises(GraphOrderError, match="not capturing"):
        Calls(api, stream=0x5A5A).mark()
    with pytest.raises(GraphOrderError, match="cannot order"):
        CudaGraphs(str(STUB.parent / "no-such-library.so"))


def test_a_driver_without_the_older_capture_info_is_asked_the_newer(driver, tmp_path):
    path, stub = driver
    only_v3 = _build(tmp_path / "libcuda-v3.so", "-DONLY_V3")
    assert not hasattr(ctypes.CDLL(str(only_v3)), "cuStreamGetCaptureInfo_v2")
    api = CudaGraphs(str(only_v3))
    calls = Calls(api, stream=0x5A5A)
    calls.mark()
    assert calls.graph is not None and calls.calls == [[]]


@pytest.mark.gpu
def test_the_workers_capture_of_pdl_calls_times_them_one_after_another():
    """On sm_90: calls of one 20 us spin, each launched with PDL and letting the next launch
    start at once (the attack of benchmarks/pdl_fence.py, 0.62 us a call in a plain graph on
    an H100), captured as the worker captures: every edge full, each call its 20 us."""
    import torch
    import triton
    import triton.language as tl

    from inference_kernels.judge import call_order, timing

    @triton.jit
    def spin(out_ptr, SPIN_NS: tl.constexpr):
        tl.extra.cuda.gdc_launch_dependents()  # the next call may start; never waits
        start = tl.extra.cuda.globaltimer()
        now = start
        while now - start < SPIN_NS:
            now = tl.extra.cuda.globaltimer()
        tl.store(out_ptr, (now - start).to(tl.int32))

    device, calls = torch.device("cuda"), 50
    out = torch.zeros(calls, dtype=torch.int32, device=device)

    def slot(i):
        def call():
            spin[(1,)](out[i:], SPIN_NS=20_000, launch_pdl=True)
            return [out[i : i + 1]]

        return call

    graph, _ = timing.capture([slot(i) for i in range(calls)], 2, device)
    driver, raw = call_order.CudaGraphs(), graph.raw_cuda_graph()
    # each programmatic edge kept, beside an empty node between the two calls
    assert len(driver.nodes(raw)) == 2 * calls - 1
    partial = [data != 0 for _, _, data in driver.edges(raw)]
    assert (partial.count(True), partial.count(False)) == (calls - 1, 2 * (calls - 1))
    us, _ = timing.replay(graph, calls, device)
    assert us > 19.0, us
