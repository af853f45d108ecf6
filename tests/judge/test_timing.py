import time

import pytest
import torch

from inference_kernels.judge import timing
from inference_kernels.judge.fresh import MIN_SPAN, Fresh
from inference_kernels.judge.guards import aliased_inputs
from inference_kernels.judge.schedule import MAX_CALLS, SAMPLE_MIN_SECONDS, plan
from inference_kernels.judge.sets import InputSets
from inference_kernels.judge.shared import SharedBuffer

TASK = {"warmup": 10, "iters": 20, "trials": 7}
CUDA, CPU = torch.device("cuda"), torch.device("cpu")


def test_plan_shortens_slow_calls_lengthens_fast_ones_and_keeps_three_trials():
    assert plan(TASK, 0.01, CUDA, 1000, False).__dict__ == {"warmup": 10, "iters": 10, "trials": 7}
    assert plan(TASK, 2.0, CUDA, 1000, False).__dict__ == {"warmup": 1, "iters": 1, "trials": 3}
    # A 5 us call: samples long enough that the outside check's allowance is small in them.
    assert plan(TASK, 5e-5, CUDA, 10_000, False).iters * 5e-5 >= SAMPLE_MIN_SECONDS["cuda"]
    assert plan(TASK, 5e-6, CUDA, 10_000, False).iters == MAX_CALLS
    assert plan(TASK, 5e-6, CUDA, 64, False).iters == 64  # no more calls than input sets
    assert plan(TASK, 1e-4, CUDA, 1000, True).iters == 1  # cold L2: one call per sample
    assert plan(TASK, 0.5, CPU, 1000, False).__dict__ == {"warmup": 1, "iters": 1, "trials": 3}
    assert plan(TASK, 5.0, CPU, 1000, False).__dict__ == {"warmup": 1, "iters": 1, "trials": 1}


def test_fresh_windows_stay_in_range_differ_everywhere_and_keep_integers():
    x = torch.linspace(-2, 3, 5000).bfloat16().reshape(50, 100)
    ids = torch.arange(10)
    fresh = Fresh([x, ids, 0.5])
    assert set(fresh.pools) == {0}  # only the floating input gets a pool
    first, second = fresh.draw(2)
    a, b = fresh.inputs(first), fresh.inputs(second)
    assert a[1] is ids and a[2] == 0.5
    assert a[0].shape == x.shape and a[0].dtype == torch.bfloat16
    assert float(a[0].float().min()) >= -2 and float(a[0].float().max()) <= 3
    if first != second:
        assert (a[0] != b[0]).float().mean() > 0.9
    assert (a[0] != x).float().mean() > 0.9  # nothing like the pristine values
    assert torch.equal(fresh.inputs(first)[0], a[0])  # a window is what its offsets say


def test_windows_are_drawn_over_every_offset_alike():
    fresh = Fresh([torch.randn(64), torch.arange(3), torch.randn(400000)])
    assert fresh.spans == {0: MIN_SPAN, 2: 100000}
    windows = fresh.draw(20000)
    assert len(windows) == 20000 and all(set(w) == {0, 2} for w in windows)
    for index, span in fresh.spans.items():
        for which in range(3):  # first, second, chooser: each uniform, each its own
            drawn = [w[index][which] for w in windows]
            assert 0 <= min(drawn) and max(drawn) <= span
            quarters = [sum(q * span <= 4 * d < (q + 1) * span for d in drawn) for q in range(4)]
            assert all(4500 < n < 5500 for n in quarters), quarters  # (5,000 each, sd 61)
    assert len({w[0] for w in windows}) > 19990  # windows, not one repeated
    assert len({w[0][0] - w[0][1] for w in windows}) > 15000  # independent offsets (~18,000)
    assert [w[0] for w in windows[:50]] != [w[0] for w in fresh.draw(50)]  # never the same
    assert Fresh([torch.arange(3)]).draw(2) == [{}, {}]  # no floating input: no offsets


def _runs(values: torch.Tensor, length: int) -> set[bytes]:
    raw = values.reshape(-1).view(torch.uint8).numpy().tobytes()
    width = values.element_size() * length
    step = values.element_size()
    return {raw[at : at + width] for at in range(0, len(raw) - width + 1, step)}


def test_no_window_holds_a_run_of_another_or_of_the_pool():
    """The red team's table attack (99ea315) placed each window it saw in the pool by a run
    of 16 of its values, and answered a timed call by finding its window so. A window now
    picks each element from one of two slices by secret bits: runs of 32 of a window's
    values are in no other window and nowhere in the pool, at any shift (a run of 16 all
    from one slice has a chance of 2^-16 at each element)."""
    x = torch.randn(2000).bfloat16()  # (bfloat16: a value repeats in the pool by chance)
    fresh = Fresh([x])
    pool = _runs(fresh.pools[0], 32)
    seen: set[bytes] = set()
    for window in fresh.draw(40):
        runs = _runs(fresh.window(0, window[0]), 32)
        assert not runs & pool
        assert not runs & seen
        seen |= runs
    first, second, chooser = fresh.draw(1)[0][0]
    values = fresh.window(0, (first, second, chooser))
    slices = fresh.pools[0][first : first + 2000], fresh.pools[0][second : second + 2000]
    from_first = (values.view(torch.int16) == slices[0].view(torch.int16)).float().mean()
    from_second = (values.view(torch.int16) == slices[1].view(torch.int16)).float().mean()
    assert 0.4 < from_first < 0.6 and 0.4 < from_second < 0.6  # about half from each


def test_two_workloads_never_share_pools():
    x = torch.randn(1000)
    assert not torch.equal(Fresh([x]).pools[0], Fresh([x]).pools[0])


def test_sets_are_refreshed_and_writes_into_any_of_them_are_seen():
    x = torch.randn(4, 8).bfloat16()
    ids = torch.arange(4, dtype=torch.int32)
    fresh = Fresh([x, ids, 2.0])
    sets = InputSets([x, ids, 2.0], ["x", "ids", "s"], 3, CPU)
    slots = fresh.draw(3)
    sets.refresh(slots, fresh)
    for j, offsets in enumerate(slots):
        assert torch.equal(sets.views[0][j], fresh.window(0, offsets[0]))
        assert torch.equal(sets.views[1][j], ids)
    assert sets.changed(slots, fresh) == []
    sets.views[1][2][0] = 99  # an integer input written in set 2
    sets.views[0][1].view(-1)[5] += 1  # a floating one in set 1
    assert sets.changed(slots, fresh) == ["ids", "x"]
    assert sets.changed(slots[:1], fresh) == []
    message, fds = sets.message("sets")
    assert message["count"] == 3 and message["shared"] == [False, False, False]
    assert message["inputs"][2] == {"value": 2.0} and len(fds) == 2


def test_shared_integer_inputs_are_one_copy_for_all_sets():
    x, ids = torch.randn(16), torch.arange(1000)
    sets = InputSets([x, ids], ["x", "ids"], 4, CPU, share_integers=True)
    assert sets.views[1].shape[0] == 1 and sets.views[0].shape[0] == 4
    assert sets.changed([{}] * 4, None) == []  # every set holds the pristine values
    sets.views[1][0][999] = -1  # the one shared copy of ids
    assert sets.changed([{}], None) == ["ids"]
    message, _ = sets.message("sets")
    assert message["shared"] == [False, True]


def test_aliasing_finds_views_of_inputs():
    a, b = torch.zeros(8), torch.zeros(4)
    assert aliased_inputs([a[2:4]], [a, b], ["a", "b"]) == ["a"]
    assert aliased_inputs([a.clone()], [a, b], ["a", "b"]) == []


def test_cpu_samples_time_each_slot_once_and_keep_their_outputs():
    calls = []
    us, host, outputs = timing.sample([lambda i=i: calls.append(i) or i for i in range(4)], CPU)
    assert calls == [0, 1, 2, 3] and outputs == [0, 1, 2, 3]
    assert us >= 0 and host is None


def test_the_gpu_load_runs_only_on_a_cuda_device():
    began = time.perf_counter()
    assert timing.load(CPU, seconds=5.0) == 0.0
    assert time.perf_counter() - began < 0.5


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float32, torch.float16])
def test_pools_of_every_floating_dtype(dtype):
    x = (torch.rand(300) * 4 - 2).to(dtype)
    window = Fresh([x]).inputs({0: (7, 300, 11)})[0]
    assert window.dtype == dtype and torch.isfinite(window.float()).all()


@pytest.mark.gpu
def test_sets_have_landed_on_the_device_before_anyone_is_told_of_them():
    """A worker reads its input sets from another process the moment it is told of them;
    a buffer lent again still holds the last case's bytes (on the H200 a worker read half
    written integer inputs as page indices: a device-side assert). Read here on a second
    stream, with no synchronization of our own, the sets are complete."""
    device = torch.device("cuda")
    pages = torch.arange(1 << 20, dtype=torch.int32, device=device)
    stale = SharedBuffer.create(4000 * pages.numel() * 4, device)
    stale.tensor.fill_(0xFF)
    torch.cuda.synchronize(device)
    sets = InputSets([pages], ["pages"], 4000, device, allocate=lambda size, _: stale)
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        last = sets.views[0][-1].clone()
    side.synchronize()
    assert torch.equal(last, pages)
    stale.release()


@pytest.mark.parametrize("row_bytes", [1, 2, 6, 8, 24, 36])
@pytest.mark.parametrize("offset", [0, 1, 2, 8])
def test_set_comparison_finds_any_one_byte_changed_at_any_width_and_offset(row_bytes, offset):
    # The sets are compared as the widest integers their rows divide into; every byte
    # still counts, wherever the rows start (a mis-sized view would skip a tail or raise).
    from inference_kernels.judge.sets import _differs

    raw = torch.randint(0, 256, (offset + 5 * row_bytes,), dtype=torch.uint8)
    actual = raw[offset:].view(5, row_bytes)
    assert not bool(_differs(actual, actual.clone()))
    for row in range(5):
        for byte in range(row_bytes):
            expected = actual.clone()
            expected[row, byte] ^= 0x01
            assert bool(_differs(actual, expected)), (row, byte)


@pytest.mark.parametrize("copy_bytes", [1, 1 << 40])  # each window copied alone; one kernel
@pytest.mark.parametrize("check_bytes", [100, 1 << 28])  # chunks of a few sets; of CHECK_CHUNK
def test_large_and_small_windows_are_written_and_compared_alike(
    monkeypatch, copy_bytes, check_bytes
):
    from inference_kernels.judge import fresh as fresh_module
    from inference_kernels.judge import sets as sets_module

    monkeypatch.setattr(fresh_module, "COPY_BYTES", copy_bytes)
    monkeypatch.setattr(sets_module, "CHECK_BYTES", check_bytes)
    x, y = torch.randn(6, 10).bfloat16(), torch.randn(5)
    fresh = Fresh([x, y])
    sets = InputSets([x, y], ["x", "y"], 70, CPU)  # more sets than one compared chunk
    windows = fresh.draw(70)
    sets.refresh(windows, fresh)
    for j, window in enumerate(windows):
        assert torch.equal(sets.views[0][j], fresh.window(0, window[0]))
        assert torch.equal(sets.views[1][j], fresh.window(1, window[1]))
    assert sets.changed(windows, fresh) == []
    for index, name in ((0, "x"), (1, "y")):
        raw = sets.views[index][69].view(-1).view(torch.uint8)
        raw[1] ^= 0x01  # one bit of one byte, in the last set
        assert sets.changed(windows, fresh) == [name]
        assert sets.changed(windows[:69], fresh) == []  # the sets the sample did not use
        raw[1] ^= 0x01
