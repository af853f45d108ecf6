"""Run one of our Triton kernels in Triton's interpreter and print its verdicts as JSON
(``tests/solutions/test_kernels.py``). A process of its own: ``TRITON_INTERPRET`` must be
set before triton is first imported (triton.language's own jit functions are decorated
then).

    TRITON_INTERPRET=1 python tests/solutions/kernel_check.py NAME [--wrong-scale] [--uuid U]
        [--smallest] [--edges] [--axes T=13,Y=12,X=14] [--reversed] [--poison] [--pdl]
        [--set NAME=VALUE ...]
    TRITON_INTERPRET=1 python tests/solutions/kernel_check.py - --pdl --pdl-selftest

``--edges`` checks hand-made inputs instead: the sparse MLA's corner cases, small grouped
GEMMs, the QSA index's ties at the cut, image blocks across tiles of the block-causal
attention (and text tiles before an image that runs to the end), the mixed MLA decode's
pages and empty requests, the dense attention's split keys, GDN prefill's empty and uneven
sequences.

``--reversed`` runs each kernel's programs in reverse order (the interpreter runs them one
after another, first to last): a kernel whose programs write where others still read
passes in one order only, as it might on a GPU, where they run together.

``--poison`` fills what ``torch.empty`` and ``torch.empty_like`` return (a kernel's
scratch, the outputs) with NaN, or -1 for integers: on the CPU they often come back as
zeros, which hides a kernel that reads memory it never wrote; a GPU's caching allocator
hands back whatever was there.

``--pdl`` emulates programmatic dependent launch, which the interpreter lacks (``emulate_pdl``):
a kernel launched with ``launch_pdl`` reads what the kernel ahead of it wrote as poison in
each of its programs until its gdc_wait, as it may on a GPU (a solution shipped with its
``PDL`` True is always checked so); ``--pdl-selftest`` checks the emulation on two kernels
of its own.

``--set`` gives one of the solution's module constants (a tile size) another value: a
real-size workload checked with wider tiles takes the interpreter fewer programs, while
the edges check the tiles the solution ships with.

``--axes`` checks the kernel on one fabricated workload instead: the smallest one with
those var axes replaced (stand-in inputs), for definitions whose workloads are all too
large for the interpreter.
"""

from __future__ import annotations

import inspect
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl
from test_baselines import DATASET_INDEX, gdn_prefill_uneven, load_entry_point, same_bytes

from inference_kernels.dataset.selection import input_bytes, select
from inference_kernels.judge.loader import set_constants
from inference_kernels.materialize.inputs import materialize
from inference_kernels.materialize.references import rejections, run_reference


def run_programs_reversed() -> None:
    """The interpreter's grid loop, last program first: its ``range`` (used there for the
    grid alone) swapped for a reversed one in a copy of the function."""
    import builtins
    import types

    from triton.runtime.interpreter import GridExecutor

    call = GridExecutor.__call__
    scope = {**call.__globals__, "range": lambda n: reversed(builtins.range(n))}
    GridExecutor.__call__ = types.FunctionType(
        call.__code__, scope, call.__name__, call.__defaults__, call.__closure__
    )


def _poison(tensor: torch.Tensor) -> torch.Tensor:
    """NaN in a float tensor, -1 in an integer one, True in a boolean one (in place)."""
    if tensor.dtype == torch.bool:
        return tensor.fill_(True)
    return tensor.fill_(float("nan") if tensor.is_floating_point() else -1)


def _storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``tensor``, as bytes (a view)."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


def emulate_pdl() -> None:
    """Programmatic dependent launch, which the interpreter lacks (its gdc_wait raises). On
    a GPU a kernel launched with ``launch_pdl`` may run before the kernel ahead of it has
    ended, up to its griddepcontrol.wait. Here each of its programs starts with what the
    kernel ahead wrote (the tensors of its arguments whose storage that kernel changed)
    poisoned, restored at the program's gdc_wait (or at its end): a program that reads the
    kernel ahead's output before its wait reads NaN (or -1). gdc_launch_dependents does
    nothing. With --poison, scratch starts as NaN, so what a kernel writes changes it."""
    import triton.language.extra.cuda as cuda
    from triton.runtime import interpreter

    state = {"written": set(), "scratch": [], "saved": None}

    def restore() -> None:
        if state["saved"] is not None:
            for tensor, saved in zip(state["scratch"], state["saved"], strict=True):
                tensor.copy_(saved)
            state["saved"] = None

    builder = interpreter.interpreter_builder
    set_grid_idx = builder.set_grid_idx

    def program(x, y, z):  # (the interpreter's grid loop calls it before each program)
        restore()
        if state["scratch"]:
            state["saved"] = [tensor.clone() for tensor in state["scratch"]]
            for tensor in state["scratch"]:
                _poison(tensor)
        set_grid_idx(x, y, z)

    builder.set_grid_idx = program
    cuda.gdc_wait = restore
    cuda.gdc_launch_dependents = lambda: None

    call = interpreter.GridExecutor.__call__

    def launched(self, *args, **kwargs):
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        storages = {t.untyped_storage().data_ptr(): t for t in tensors}
        before = {at: _storage_bytes(t).clone() for at, t in storages.items()}
        if kwargs.get("launch_pdl"):
            written = state["written"]
            state["scratch"] = [t for t in tensors if t.untyped_storage().data_ptr() in written]
        try:
            call(self, *args, **kwargs)
        finally:
            restore()
            state["scratch"] = []
        state["written"] = {
            at for at, t in storages.items() if not torch.equal(_storage_bytes(t), before[at])
        }

    interpreter.GridExecutor.__call__ = launched


@triton.jit
def _pdl_first(buffer_ptr, N: tl.constexpr):
    at = tl.arange(0, N)
    tl.store(buffer_ptr + at, (at + 1).to(tl.float32))


@triton.jit
def _pdl_second(buffer_ptr, out_ptr, N: tl.constexpr, WAIT_FIRST: tl.constexpr):
    if WAIT_FIRST:
        tl.extra.cuda.gdc_wait()
    read = tl.load(buffer_ptr + tl.arange(0, N))
    if not WAIT_FIRST:  # (too late: the read above may see the kernel ahead unfinished)
        tl.extra.cuda.gdc_wait()
    tl.store(out_ptr + tl.arange(0, N), read)


def pdl_selftest() -> dict:
    """The emulation itself (``emulate_pdl``, installed): a second kernel launched with PDL
    after one that writes 1..16 reads them where it waits first; where it reads first it
    reads poison; the first kernel's values are back after each."""
    expected = torch.arange(1, 17, dtype=torch.float32)
    found = {}
    for name, wait_first in (("waits", True), ("reads_early", False)):
        buffer, out = torch.zeros(16), torch.zeros(16)
        _pdl_first[(1,)](buffer, N=16)
        _pdl_second[(1,)](buffer, out, N=16, WAIT_FIRST=wait_first, launch_pdl=True)
        found[name] = {
            "read_the_values": torch.equal(out, expected),
            "read_poison": bool(out.isnan().all()),
            "restored": torch.equal(buffer, expected),
        }
    return found


def poison_empty() -> None:
    """torch.empty and torch.empty_like return tensors filled with NaN (-1 for integers,
    True for booleans) instead of whatever the allocator had."""

    def filled(make):
        def made(*args, **kwargs):
            return _poison(make(*args, **kwargs))

        return made

    torch.empty = filled(torch.empty)
    torch.empty_like = filled(torch.empty_like)


def check_bounds() -> None:
    """Every load, store and atomic the interpreter runs, checked to stay inside the span of
    one of its kernel's tensor arguments (from a tensor's first element to its last; in
    tuples, reinterpreted tensors and descriptors too): an unmasked lane's address outside
    every span raises, naming the access and where it fell. On a GPU such an access is
    undefined (an illegal address at best); the interpreter would read or write the host's
    memory there without a word. What it cannot see: an access into the gaps of a
    non-contiguous view (inside its span), or an overrun that lands in another argument
    (adjacent on the host's heap, or another view of the same storage)."""
    import inspect

    import numpy as np
    from triton.runtime import interpreter
    from triton.runtime.jit import TensorWrapper
    from triton.tools.tensor_descriptor import TensorDescriptor

    spans = [np.zeros((0, 2), np.uint64)]  # [starts, ends] of the kernel's tensors, merged

    init = interpreter.GridExecutor._init_args_hst

    def init_and_record(self, args_dev, kwargs):
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        found = []

        def record(arg):
            if isinstance(arg, tuple):
                for item in arg:
                    record(item)
            elif isinstance(arg, (TensorDescriptor, TensorWrapper)):
                record(arg.base)
            elif isinstance(arg, torch.Tensor) and arg.numel():
                last = sum((n - 1) * step for n, step in zip(arg.shape, arg.stride(), strict=True))
                found.append((arg.data_ptr(), arg.data_ptr() + (last + 1) * arg.element_size()))

        for arg in [*args_hst, *kwargs_hst.values()]:
            record(arg)
        merged: list[list[int]] = []
        for start, end in sorted(found):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        spans[:] = [np.array(merged, dtype=np.uint64).reshape(-1, 2)]
        return args_hst, kwargs_hst

    def checked(method, pointers: str, mask: str | None):
        names = list(inspect.signature(method).parameters)[1:]

        def run(self, *args, **kwargs):
            bound = dict(zip(names, args, strict=False)) | kwargs  # (fewer given: defaults)
            ptrs = bound[pointers]
            lanes = bound[mask].data if mask is not None else True
            addresses = ptrs.data[np.broadcast_to(lanes, ptrs.data.shape)].astype(np.uint64)
            size = interpreter._get_np_dtype(ptrs.get_element_ty()).itemsize
            table = spans[0]
            at = np.searchsorted(table[:, 0], addresses, side="right").astype(np.int64) - 1
            ends = table[np.maximum(at, 0), 1] if len(table) else np.zeros_like(addresses)
            inside = (at >= 0) & (addresses + np.uint64(size) <= ends)
            if not inside.all():
                bad = int(addresses[~inside][0])
                start, end = min(
                    ((int(a), int(b)) for a, b in table),
                    key=lambda span: min(abs(bad - span[0]), abs(bad - span[1])),
                    default=(bad, bad),
                )
                raise IndexError(
                    f"{method.__name__}: {int((~inside).sum())} of {addresses.size} addresses "
                    f"outside every tensor argument of the kernel, the first at byte "
                    f"{bad - start} of the nearest, a {end - start}-byte tensor"
                )
            return method(self, *args, **kwargs)

        return run

    builder = type(interpreter.interpreter_builder)
    interpreter.GridExecutor._init_args_hst = init_and_record
    for name, pointers, mask in (  # (the methods' own argument names)
        ("create_masked_load", "ptrs", "mask"),
        ("create_masked_store", "ptrs", "mask"),
        ("create_atomic_rmw", "ptr", "mask"),
        ("create_atomic_cas", "ptr", None),
    ):
        setattr(builder, name, checked(getattr(builder, name), pointers, mask))


def cases(name: str):
    """The definition's smallest workload and its next-smallest dev one: the interpreter
    runs every program of a kernel in Python (a GDN prefill of 600 tokens takes minutes)."""
    definition = DATASET_INDEX.definitions[name]
    (_, smallest), *_ = select(DATASET_INDEX, [name], "first")
    dev = [w for _, w in select(DATASET_INDEX, [name], "dev") if w.uuid != smallest.uuid]
    dev.sort(key=lambda w: (input_bytes(definition, w), w.uuid))
    return definition, [smallest, *dev[:1]]


def verdicts(entry, definition, inputs, tolerance, called=None) -> list[bool]:
    """Each output's acceptance against the reference of ``inputs`` (as the judge checks
    it: the task's ambiguous rows left out, then held to its accept function); the kernel
    is called on ``called`` (default: the same inputs), destination passing."""
    expected = run_reference(definition, inputs)
    outputs = [torch.empty_like(e) for e in expected]
    entry(*(called or inputs), *outputs)
    return [not why for why in rejections(definition, tolerance, inputs, outputs, expected)]


def sparse_mla_edges(definition) -> list:
    """Inputs of four tokens that the stand-ins rarely reach: every slot listed and valid;
    topk_length 0 (no valid key: zeros, whatever the sink); indices that are negative or
    past the KV rows among valid ones; one valid key only."""
    g = torch.Generator().manual_seed(5)
    top_k, kv_rows = definition.const_axes()["TOPK"], 50
    Q = (torch.randn(4, 64, 512, generator=g) * 0.5).bfloat16()
    KV = torch.randn(kv_rows, 1, 512, generator=g).bfloat16()
    indices = torch.randint(0, kv_rows, (4, 1, top_k), generator=g, dtype=torch.int32)
    indices[2, 0, ::3] = -1
    indices[2, 0, 1::7] = kv_rows + 3
    indices[3, 0, 0] = 7
    lengths = torch.tensor([top_k, 0, top_k - 5, 1], dtype=torch.int32)
    sink = torch.randn(64, generator=g)
    return [Q, KV, indices, lengths, sink, 512**-0.5]


def qsa_index_edges() -> list:
    """Four rows that the stand-ins rarely reach: cuts inside runs of exact zeros (every
    dot negative; dots of exactly 0 and negative ones), where the lowest ids must win in
    any summation order (no row is ambiguous: a tie of positive scores would be); exactly
    512 blocks (unscored); 40 blocks. Pages shuffled, pages nobody maps."""
    g = torch.Generator().manual_seed(6)
    page, counts = 16, [600, 700, 512, 40]
    Q = torch.zeros(4, 4, 128)
    Q[:, :, :4] = torch.eye(4)  # head h reads dim h of a key
    width = -(-max(counts) // page)
    pages = torch.randperm(4 * width + 1, generator=g)
    Kc = torch.randint(-3, 4, (4 * width + 1, page, 1, 128), generator=g).float()
    table = torch.full((4, width + 1), -1, dtype=torch.int32)
    for row, n in enumerate(counts):
        mine = pages[row * width : row * width + -(-n // page)]
        table[row, : len(mine)] = mine.to(torch.int32)
        for j in range(n):
            key = Kc[mine[j // page], j % page, 0]
            tied = j % 3 == 0  # 200 of 600, 234 of 700: more than the 88 and 188 cut off
            if row == 0:
                key[:4] = torch.tensor([-1.0, -2.0, -1.0, -3.0]) if tied else 2.0 + j % 3
            elif row == 1:
                key[:4] = torch.tensor([0.0, -1.0, 0.0, -2.0]) if tied else 1.0 + j % 4
    return [Q.bfloat16(), Kc.bfloat16(), table, torch.tensor(counts, dtype=torch.int32)]


def qsa_index_wide_edges() -> list:
    """Rows wider than one selecting program's 4,096 ids (the kernel keeps each segment's
    top 512, then theirs): 9,000 blocks whose cut falls in a run of exact zeros spread over
    three segments (392 positives); 8,300 with the cut among 639 distinct positive
    integer scores, the last segment 108 blocks; 4,200 with 30 positives; 300 (all kept).
    Scores are exact (integer dots, FP32), so no row is ambiguous."""
    g = torch.Generator().manual_seed(8)
    page, counts = 16, [9000, 8300, 4200, 300]
    Q = torch.zeros(4, 4, 128)
    Q[:, :, :4] = torch.eye(4)
    width = -(-max(counts) // page)
    Kc = torch.randn(4 * width, page, 1, 128, generator=g)
    Kc[:, :, :, :4] = -1.0  # every dot negative: a score of exactly zero
    pages = torch.randperm(4 * width, generator=g)
    table = torch.full((4, width), -1, dtype=torch.int32)
    for row, (n, every) in enumerate(zip(counts, (23, 13, 140, 7), strict=True)):
        mine = pages[row * width : row * width + -(-n // page)]
        table[row, : len(mine)] = mine.to(torch.int32)
        positive = range(0, n, every)
        ranks = torch.randperm(len(positive), generator=g).tolist()
        for rank, j in zip(ranks, positive, strict=True):
            key = Kc[mine[j // page], j % page, 0]
            key[0], key[1] = 1.0 + rank % 255, 256.0 * (rank // 255)  # distinct, exact
    return [Q.bfloat16(), Kc.bfloat16(), table, torch.tensor(counts, dtype=torch.int32)]


def block_causal_edges() -> list:
    """300 tokens over three query tiles of 128 (four heads; the reference takes any H):
    text, an image block across a tile boundary, text, a second image, text. A text query
    sees only earlier keys; an image query also sees its whole block, later keys included."""
    g = torch.Generator().manual_seed(7)
    Q, K, V = (torch.randn(1, 300, 4, 128, generator=g).bfloat16() for _ in range(3))
    ids = torch.full((300,), -1, dtype=torch.int32)
    ids[20:160] = 0
    ids[180:290] = 1
    return [Q, K, V, ids]


def block_causal_text_then_image() -> list:
    """300 tokens: two query tiles of 64 all text, then one image to the end (128-299), so
    that an image query tile's keys past its first query fill whole tiles (128-191 sees
    192-255 whole) and the run reaches the last key."""
    g = torch.Generator().manual_seed(9)
    Q, K, V = (torch.randn(1, 300, 4, 128, generator=g).bfloat16() for _ in range(3))
    ids = torch.full((300,), -1, dtype=torch.int32)
    ids[128:] = 0
    return [Q, K, V, ids]


def mixed_mla_edges() -> list:
    """Five requests over caches of several pages (the stand-ins small enough for the
    interpreter have one page of each): no valid token (zeros); FP8 tokens only; one FP4
    token on the last page; both caches across every page with padding in between (-1, one
    past the cache and further, as the reference takes them; where the FP8 keys, scaled up
    to 2^4, take nearly all the weight); FP4 tokens only, all 512
    positions but a run of padding, so that every FP4 split counts."""
    g = torch.Generator().manual_seed(8)
    n8, p8, n4, p4 = 2, 256, 5, 128

    def pages(count, size, data_bytes, data, scales):
        cache = torch.empty(count, size * (data_bytes + scales.shape[-1]), dtype=torch.int8)
        cache[:, : size * data_bytes] = data.reshape(count, -1)
        cache[:, size * data_bytes :] = scales.reshape(count, -1)
        return cache.reshape(count, size, 1, -1)

    fp8 = torch.randn(n8, p8, 512, generator=g).to(torch.float8_e4m3fn).view(torch.int8)
    ue8m0 = torch.randint(122, 132, (n8, p8, 16), generator=g).to(torch.uint8).view(torch.int8)
    fp4 = torch.randint(0, 256, (n4, p4, 256), generator=g).to(torch.uint8).view(torch.int8)
    e4m3 = (torch.rand(n4, p4, 32, generator=g) + 0.1).to(torch.float8_e4m3fn).view(torch.int8)
    KV8, KV4 = pages(n8, p8, 512, fp8, ue8m0), pages(n4, p4, 256, fp4, e4m3)
    ids8 = torch.full((5, 1, 128), -1, dtype=torch.int32)
    ids4 = torch.full((5, 1, 512), -1, dtype=torch.int32)
    ids8[1, 0] = torch.randperm(n8 * p8, generator=g)[:128].to(torch.int32)
    ids4[2, 0, 7] = (n4 - 1) * p4 + 5
    ids8[3, 0] = torch.randperm(n8 * p8, generator=g)[:128].to(torch.int32)
    ids4[3, 0] = torch.randperm(n4 * p4, generator=g)[:512].to(torch.int32)
    ids8[3, 0, 40:50] = -1
    ids4[3, 0, 100:300:3] = -1
    ids8[3, 0, 60:62] = torch.tensor([n8 * p8, n8 * p8 + 1000])  # past the cache: padding too
    ids4[3, 0, 301:303] = torch.tensor([n4 * p4, 2**31 - 1])
    ids4[4, 0] = torch.randperm(n4 * p4, generator=g)[:512].to(torch.int32)
    ids4[4, 0, 200:260] = -1
    Q = torch.randn(5, 1, 64, 512, generator=g).bfloat16()
    return [Q, KV8, KV4, ids8, ids4, torch.randn(64, generator=g), 512**-0.5]


def dense_attention_edges(definition) -> list[list]:
    """Random inputs that split the keys (few query tiles, more than 128 keys): 5 queries
    over 300 keys (5 splits of 64), two batches of 70 queries over 1,000 (6 splits of 192,
    the last part-filled, and a part-filled query tile); the captured workloads small
    enough for the interpreter never split."""
    g = torch.Generator().manual_seed(9)
    heads, dim = definition.axes["H"].value, definition.axes["D"].value
    found = []
    for batch, queries, keys in ((1, 5, 300), (2, 70, 1000)):
        q, k, v = (
            torch.randn(batch, n, heads, dim, generator=g).bfloat16() for n in (queries, keys, keys)
        )
        found.append([q, k, v])
    return found


def grouped_gemm_shapes() -> list[list]:
    """Small hand-made grouped GEMMs (the definition's reference takes any E, N, K): rows of
    several experts in one row tile, rows of one expert across tiles, an expert between
    two others with no rows, and the smallest K of one step."""
    g = torch.Generator().manual_seed(0)
    found = []
    for rows, experts, width, depth in ((20, 4, 128, 256), (5, 6, 128, 128), (70, 3, 256, 256)):
        Aq = torch.randn(rows, depth, generator=g).to(torch.float8_e4m3fn)
        scale_a = torch.randint(120, 130, (rows, depth // 32), generator=g, dtype=torch.int32)
        packed = torch.randint(0, 256, (experts, width, depth // 2), generator=g, dtype=torch.int32)
        scale_w = torch.randint(
            119, 123, (experts, width, depth // 32), generator=g, dtype=torch.int32
        )
        expert_id = torch.sort(
            torch.randint(0, experts, (rows,), generator=g, dtype=torch.int32)
        ).values
        expert_id[0] = 0
        as_int8 = [x.to(torch.uint8).view(torch.int8) for x in (packed, scale_a, scale_w)]
        found.append([Aq, as_int8[0], as_int8[1], as_int8[2], expert_id])
    return found


def main() -> None:
    name, wrong = sys.argv[1], "--wrong-scale" in sys.argv
    check_bounds()
    if "--reversed" in sys.argv:
        run_programs_reversed()
    if "--poison" in sys.argv:
        poison_empty()
    if "--pdl-selftest" in sys.argv:
        emulate_pdl()
        print(json.dumps(pdl_selftest()))
        return
    solution = DATASET_INDEX.solutions[name]
    _, entry = load_entry_point(solution, Path(tempfile.mkdtemp()))
    # --set NAME=VALUE (repeatable): a module constant that run() reads when called
    settings = dict(sys.argv[at + 1].split("=") for at, f in enumerate(sys.argv) if f == "--set")
    try:
        set_constants(entry, settings, name)
    except ValueError as error:
        raise SystemExit(f"--set: {error}") from None
    if "--pdl" in sys.argv or inspect.unwrap(entry).__globals__.get("PDL") is True:
        emulate_pdl()  # (a solution shipped with PDL on is checked as a GPU may run it)
    definition, workloads = cases(solution.definition)
    if "--uuid" in sys.argv:  # a workload that takes another path through the kernel
        uuid = sys.argv[sys.argv.index("--uuid") + 1]
        workloads = [w for w in DATASET_INDEX.workloads[solution.definition] if w.uuid == uuid]
    tolerance = DATASET_INDEX.tasks[solution.definition].tolerance
    if "--edges" in sys.argv:
        if definition.op_type == "grouped_gemm":
            shapes = grouped_gemm_shapes()
        elif definition.op_type == "qsa_index":
            shapes = [qsa_index_edges(), qsa_index_wide_edges()]
        elif definition.op_type == "block_causal_attention":
            shapes = [block_causal_edges(), block_causal_text_then_image()]
        elif definition.op_type == "mixed_mla":
            shapes = [mixed_mla_edges()]
        elif definition.op_type == "dense_attention":
            shapes = dense_attention_edges(definition)
        elif definition.name.startswith("gdn_prefill"):
            shapes = [gdn_prefill_uneven(with_state) for with_state in (True, False)]
        else:
            shapes = [sparse_mla_edges(definition)]
        found = [{"verdicts": verdicts(entry, definition, x, tolerance)} for x in shapes]
        print(json.dumps(found))
        return
    if "--axes" in sys.argv:  # e.g. T=13,Y=12,X=14: the smallest workload, resized
        given = dict(a.split("=") for a in sys.argv[sys.argv.index("--axes") + 1].split(","))
        axes = {**workloads[0].axes, **{k: int(v) for k, v in given.items()}}
        workloads = [workloads[0].model_copy(update={"axes": axes})]
    if "--smallest" in sys.argv:  # the interpreter would take minutes on the next one
        workloads = workloads[:1]
    found = []
    for workload in workloads[:1] if wrong else workloads:
        capture = DATASET_INDEX.captures.get(workload.uuid)
        inputs = materialize(
            definition, workload, data_root=DATASET_INDEX.root, capture=capture
        ).values
        if wrong:  # asked for 1/sqrt(64), called with 0 (the kernel's 1/sqrt(128))
            names = list(definition.inputs)
            inputs[names.index("scale")] = 0.125
            called = list(inputs)
            called[names.index("scale")] = 0.0
            found.append({"verdicts": verdicts(entry, definition, inputs, tolerance, called)})
            continue
        before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        passed = verdicts(entry, definition, inputs, tolerance)
        same = all(
            not isinstance(x, torch.Tensor) or same_bytes(x, y)
            for x, y in zip(inputs, before, strict=True)
        )
        found.append({"axes": workload.axes, "verdicts": passed, "inputs_unchanged": same})
    print(json.dumps(found))


if __name__ == "__main__":
    main()
