"""The environment row says what the times were taken on."""

import os

import torch

from inference_kernels.judge.results import environment_row


def test_a_cpu_run_names_its_processor():
    # CPU times depend on the processor above all: the BF16 GEMM cases of the main job took
    # 5-6x longer on an AVX2-only machine, and no row said which machine a time came from.
    row = environment_row([{"device": "cpu"}, {"device": "cuda:0"}])
    cpu = row.devices[0]["cpu"]
    assert cpu["capability"] == torch.backends.cpu.get_cpu_capability()
    assert cpu["cores"] == os.cpu_count() and cpu["model"]
    assert "cpu" not in row.devices[1]
