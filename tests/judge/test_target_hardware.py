"""Which dataset solutions a run judges by default: a solution whose target_hardware does
not name the CPU (a Triton or CUDA kernel) is not judged on the CPU unless named with -s,
so the bundled dataset's GPU kernels do not turn the CPU main job into load failures."""

from pathlib import Path

import pytest

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.session import Request, _solutions, runs_on

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"


@pytest.mark.parametrize(
    ("targets", "cpu", "cuda"),
    [
        (["cpu", "cuda"], True, True),
        (["cuda"], False, True),
        (["NVIDIA_B200"], False, True),  # the seed's spelling of a GPU
        (["CPU"], True, False),
        ([], True, True),
    ],
)
def test_runs_on(targets, cpu, cuda):
    dataset = load_dataset(ROOT / "dataset")
    baseline = dataset.solutions[dataset.tasks[DEFINITION].baseline]
    solution = baseline.model_copy(
        update={"spec": baseline.spec.model_copy(update={"target_hardware": targets})}
    )
    assert runs_on(solution, "cpu") is cpu
    assert runs_on(solution, "cuda") is cuda


def test_a_gpu_kernel_is_judged_on_the_cpu_only_when_named():
    dataset = load_dataset(ROOT / "dataset")
    baseline = dataset.solutions[dataset.tasks[DEFINITION].baseline]
    kernel = baseline.model_copy(
        update={
            "name": "a_triton_kernel",
            "spec": baseline.spec.model_copy(
                update={"language": "triton", "target_hardware": ["cuda"]}
            ),
        }
    )
    dataset.solutions[kernel.name] = kernel

    def chosen(**options):
        request = Request(definitions=[DEFINITION], **options)
        return sorted(s.name for s in _solutions(dataset, request)[0])

    ours = {s.name for s in dataset.solutions.values() if s.definition == DEFINITION}
    assert chosen() == [baseline.name]  # neither this kernel nor the dataset's own
    assert chosen(devices=["cuda:0"]) == sorted(ours)  # the baseline and every kernel
    assert {baseline.name, kernel.name} < ours
    assert chosen(solutions=[kernel.name]) == [kernel.name]  # asked for: judged anyway
