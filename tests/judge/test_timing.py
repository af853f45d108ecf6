import time

import torch

from inference_kernels.judge import timing
from inference_kernels.judge.guards import aliased_inputs, make_copies, perturb, poison


def test_schedule_shortens_slow_calls_but_keeps_three_trials():
    task = {"warmup": 10, "iters": 20, "trials": 7}
    cuda = torch.device("cuda")
    assert timing.schedule(task, 1e-5, cuda) == (10, 20, 7)
    assert timing.schedule(task, 0.01, cuda) == (10, 10, 7)
    assert timing.schedule(task, 2.0, cuda) == (1, 1, 3)
    assert timing.schedule(task, 0.5, torch.device("cpu")) == (1, 1, 3)
    assert timing.schedule(task, 5.0, torch.device("cpu")) == (1, 1, 1)


def test_copies_are_fresh_and_perturbed_by_about_one_ulp():
    x = torch.linspace(1, 2, 1000).bfloat16()
    ids = torch.arange(10)
    sets = make_copies([x, ids, 0.5], 3)
    assert torch.equal(sets[0][0], x) and sets[0][0].data_ptr() != x.data_ptr()
    for copy in sets[1:]:
        assert copy[0].data_ptr() != x.data_ptr() and torch.equal(copy[1], ids)
        changed = copy[0].float() != x.float()
        assert changed.float().mean() > 0.95
        assert torch.allclose(copy[0].float(), x.float(), rtol=2**-6)
    assert not torch.equal(sets[1][0], sets[2][0])
    shared = make_copies([x, ids], 2, share_integers=True)
    assert shared[1][1] is ids and shared[1][0] is not x


def test_perturbation_in_chunks_reaches_every_chunk(monkeypatch):
    from inference_kernels.judge import guards

    monkeypatch.setattr(guards, "_CHUNK", 64)  # 1000 elements: 16 chunks, the last partial
    x = torch.linspace(1, 2, 1000).bfloat16().reshape(10, 100)
    moved = perturb(x, 1)
    assert moved.shape == x.shape and moved.dtype == torch.bfloat16
    ulps = (moved.view(torch.int16).int() - x.view(torch.int16).int()).abs()
    assert int(ulps.max()) <= 2  # a relative move of 2^-7: one or two bf16 ulps
    for chunk in ulps.view(-1).split(64):
        assert chunk.float().mean() > 0.9  # every chunk moved, not only the first


def test_integer_inputs_are_never_perturbed():
    values = torch.tensor([1, -1, 7], dtype=torch.int32)
    assert torch.equal(perturb(values, 5), values)


def test_aliasing_finds_views_of_inputs():
    a, b = torch.zeros(8), torch.zeros(4)
    assert aliased_inputs([a[2:4]], [a, b], ["a", "b"]) == ["a"]
    assert aliased_inputs([a.clone()], [a, b], ["a", "b"]) == []


def test_poison_marks_every_output():
    f, i, flags = (
        torch.zeros(3),
        torch.zeros(3, dtype=torch.int32),
        torch.zeros(2, dtype=torch.bool),
    )
    poison([f, i, flags])
    assert torch.isnan(f).all() and (i == -1).all() and flags.all()


def test_suspect_when_the_host_waited_far_longer_than_the_stream():
    honest = timing.Measurement("cuda-events", 100.0, 90, 110, 5, 20, host_median_us=105.0)
    hidden = timing.Measurement("cuda-events", 5.0, 4, 6, 1, 20, host_median_us=100.0)
    assert not timing.suspect(honest) and timing.suspect(hidden)


def test_preheat_loads_only_a_cuda_device():
    began = time.perf_counter()
    assert timing.preheat(torch.device("cpu"), seconds=5.0) == 0.0
    assert time.perf_counter() - began < 0.5
