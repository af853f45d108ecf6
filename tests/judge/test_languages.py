"""Solutions in triton, cpp and cuda, judged through the real judge (docs/languages.md).

A cpp solution is compiled by its worker, in its sandbox, into the build folder of its key
(``loader.build_key``) under the cache's ``builds/``; a complete build is loaded again
without being built; sources that do not compile give ``compile_error`` with the
compiler's words; a solution cannot write into another key's build, nor beside it. Builds
take about a minute on two cores: the module builds two (the honest solution and the
attack) and one that fails at once, in one cache.
"""

import hashlib
import json
import os
from pathlib import Path

import pytest

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.loader import build_key, extension_name
from inference_kernels.judge.session import Request, judge
from inference_kernels.schema import Solution

ROOT = Path(__file__).resolve().parents[2]
GEMM = "dense_gemm_bf16_nt_bias_n384_k384"
WORKLOADS = json.loads((ROOT / f"dataset/tasks/{GEMM}.json").read_text())["dev"][:2]

# C = A @ W^T + bias, FP32 math, one rounding to BF16 (the reference's), into C (DPS).
HONEST_CPP = r"""
#include <torch/extension.h>

void run(torch::Tensor A, torch::Tensor W, torch::Tensor bias, torch::Tensor C) {
  C.copy_(torch::linear(A.to(torch::kFloat), W.to(torch::kFloat), bias.to(torch::kFloat))
              .to(torch::kBFloat16));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""

SYNTAX_ERROR_CPP = """int broken( { return 0 }\n"""

# Tries, when loaded and when called, to write into another key's build (its extension
# among them), beside it and into the cache: a write that works makes the call raise.
ATTACK_CPP = r"""
#include <torch/extension.h>
#include <cstdio>
#include <string>
#include <vector>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

static std::vector<std::string> wrote;

static void attack() {
  const std::vector<std::string> files = {@FILES@};
  for (const auto& path : files) {
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { wrote.push_back(path); close(fd); }
  }
  const std::vector<std::string> folders = {@FOLDERS@};
  for (const auto& path : folders) {
    if (mkdir(path.c_str(), 0777) == 0) wrote.push_back(path);
  }
  if (rename(@VICTIM@, @VICTIM_ASIDE@) == 0) wrote.push_back("renamed the other build");
  if (chmod(@VICTIM@, 0777) == 0) wrote.push_back("chmod of the other build");
}

static int at_load = (attack(), 0);

void run(torch::Tensor A, torch::Tensor W, torch::Tensor bias, torch::Tensor C) {
  attack();
  if (!wrote.empty()) {
    std::string all;
    for (const auto& path : wrote) all += path + " ";
    throw std::runtime_error("WROTE " + all);
  }
  C.copy_(torch::linear(A.to(torch::kFloat), W.to(torch::kFloat), bias.to(torch::kFloat))
              .to(torch::kBFloat16));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""

TRITON_MAIN = """import torch
import triton  # noqa: F401


def run(A, W, bias):
    return torch.nn.functional.linear(A.float(), W.float(), bias.float()).to(torch.bfloat16)
"""

# A naive CUDA kernel: one thread per element of C, FP32 sums, into C (DPS).
CUDA_KERNEL = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>

__global__ void gemm_bias(const __nv_bfloat16* A, const __nv_bfloat16* W,
                          const __nv_bfloat16* bias, __nv_bfloat16* C, int M, int N, int K) {
  int m = blockIdx.y, n = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= M || n >= N) return;
  float sum = 0.f;
  for (int k = 0; k < K; ++k)
    sum += __bfloat162float(A[m * K + k]) * __bfloat162float(W[n * K + k]);
  C[m * N + n] = __float2bfloat16(sum + __bfloat162float(bias[n]));
}

void run(torch::Tensor A, torch::Tensor W, torch::Tensor bias, torch::Tensor C) {
  int M = A.size(0), K = A.size(1), N = W.size(0);
  auto a = A.contiguous(), w = W.contiguous(), b = bias.contiguous();
  dim3 grid((N + 127) / 128, M);
  gemm_bias<<<grid, 128>>>(
      reinterpret_cast<const __nv_bfloat16*>(a.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(w.data_ptr()),
      reinterpret_cast<const __nv_bfloat16*>(b.data_ptr()),
      reinterpret_cast<__nv_bfloat16*>(C.data_ptr()), M, N, K);
}
"""

CUDA_BINDING = r"""
#include <torch/extension.h>

void run(torch::Tensor A, torch::Tensor W, torch::Tensor bias, torch::Tensor C);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


def solution(name: str, language: str, sources: dict[str, str], entry: str, **spec) -> dict:
    return {
        "name": name,
        "definition": GEMM,
        "author": "tests",
        "spec": {
            "language": language,
            "target_hardware": ["cpu", "cuda"],
            "entry_point": entry,
            "destination_passing_style": True,
            **spec,
        },
        "sources": [{"path": path, "content": text} for path, text in sources.items()],
    }


def judged(folder: Path, cache: Path, candidate: dict, device: str = "cpu") -> list[dict]:
    """The case rows of judging ``candidate`` (validation only) on two workloads."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{candidate['name']}.json"
    path.write_text(json.dumps(candidate))
    request = Request(
        definitions=[GEMM],
        solutions=[],
        candidates=[path],
        workloads=WORKLOADS,
        devices=[device],
        report=folder / f"{candidate['name']}.jsonl",
        cache=cache,
        validation_only=True,
        timeout=400,  # a build on two cores takes about a minute, within the load wait
    )
    rows = judge(load_dataset(ROOT / "dataset"), request)
    rows = [r for r in rows if r.get("solution") == candidate["name"] and r.get("uuid")]
    assert len(rows) == len(WORKLOADS), rows
    return rows


def key_of(candidate: dict, device: str = "cpu") -> str:
    return build_key(Solution.model_validate(candidate), device)


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file of a build folder: inode, mtime and digest."""
    return {
        str(path.relative_to(folder)): (
            path.stat().st_ino,
            path.stat().st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


HONEST = solution("cpp_linear", "cpp", {"main.cpp": HONEST_CPP}, "main.cpp::run")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("language-cache")


@pytest.fixture(scope="module")
def honest(cache, tmp_path_factory):
    """The honest cpp solution, judged once (and built then): its rows and build folder."""
    rows = judged(tmp_path_factory.mktemp("honest"), cache, HONEST)
    return rows, cache / "builds" / key_of(HONEST)


def test_a_cpp_solution_is_built_in_its_sandbox_and_passes(honest):
    rows, folder = honest
    assert [r["status"] for r in rows] == ["passed"] * len(WORKLOADS), rows
    name = extension_name(folder.name)
    assert (folder / f"{name}.so").is_file()
    marker = folder.parent / f"{folder.name}.done"  # written by the referee, outside
    library = (folder / f"{name}.so").read_bytes()
    assert marker.read_text() == hashlib.sha256(library).hexdigest()


def test_a_second_judging_loads_the_cached_build_without_building(honest, cache, tmp_path):
    _, folder = honest
    before = snapshot(folder)
    rows = judged(tmp_path, cache, HONEST)
    assert [r["status"] for r in rows] == ["passed"] * len(WORKLOADS), rows
    # nothing was built, rewritten or added: not the extension, not ninja's log
    assert snapshot(folder) == before
    assert ".ninja_log" in before and f"{extension_name(folder.name)}.so" in before


def test_sources_that_do_not_compile_are_a_compile_error(cache, tmp_path):
    broken = solution("cpp_broken", "cpp", {"main.cpp": SYNTAX_ERROR_CPP}, "main.cpp::run")
    rows = judged(tmp_path, cache, broken)
    assert {r["status"] for r in rows} == {"compile_error"}, rows
    error = rows[0]["error"]
    assert "expected" in error and "error" in error and len(error) < 1000, error
    key = key_of(broken)
    assert not (cache / "builds" / f"{key}.done").exists()  # never taken for complete


def test_a_solution_cannot_write_into_another_build_or_the_cache(honest, cache, tmp_path):
    _, victim = honest
    before = snapshot(victim)
    name = extension_name(victim.name)
    builds = victim.parent
    marker = builds / f"{victim.name}.done"
    recorded = marker.read_text()

    def literal(path: Path) -> str:
        return json.dumps(str(path))

    files = [
        victim / f"{name}.so",  # poison the other solution's extension
        marker,  # or the record that it is complete
        victim / "evil.so",
        builds / "pwned",
        cache / "pwned",
    ]
    folders = [builds / ("0" * 64), builds / "pwned-folder", cache / "pwned-folder"]
    source = (
        ATTACK_CPP.replace("@FILES@", ", ".join(literal(p) for p in files))
        .replace("@FOLDERS@", ", ".join(literal(p) for p in folders))
        .replace("@VICTIM_ASIDE@", literal(builds / "aside"))
        .replace("@VICTIM@", literal(victim))
    )
    attack = solution("cpp_attack", "cpp", {"main.cpp": source}, "main.cpp::run")
    rows = judged(tmp_path, cache, attack)
    # every write failed, at load and at call time (else the call raises, naming them)
    assert [r["status"] for r in rows] == ["passed"] * len(WORKLOADS), rows
    assert snapshot(victim) == before and marker.read_text() == recorded
    assert not any(p.exists() for p in [*files[2:], *folders, builds / "aside"])
    # its own build is there, complete, beside the other
    assert (builds / f"{key_of(attack)}.done").is_file()


def test_the_cpp_folder_that_new_writes_builds_and_is_judged(cache, tmp_path):
    # A newcomer found no cpp scaffold (only python, triton and cuda) and wrote one by hand.
    from inference_kernels.dataset.layout import load_dataset as load
    from inference_kernels.dataset.scaffold import write

    folder = tmp_path / "mine"
    written = write(load(ROOT / "dataset").definitions[GEMM], "cpp", folder, "me")
    assert sorted(p.name for p in written) == ["main.cpp", "solution.json"]
    assert (
        "torch::Tensor run(torch::Tensor A, torch::Tensor W, torch::Tensor bias)"
        in (folder / "main.cpp").read_text()
    )
    request = Request(
        definitions=[GEMM],
        solutions=[],
        candidates=[folder],
        workloads=WORKLOADS[:1],
        report=tmp_path / "r.jsonl",
        cache=cache,
        validation_only=True,
        timeout=400,
    )
    rows = [r for r in judge(load_dataset(ROOT / "dataset"), request) if r["type"] == "case"]
    # built (no compile_error) and run: its outputs are torch::empty's, so it fails
    assert len(rows) == 1 and rows[0]["status"] in ("mismatch", "nonfinite", "trivial_output")


def test_a_triton_solution_loads_like_python(tmp_path):
    triton = solution("triton_linear", "triton", {"main.py": TRITON_MAIN}, "main.py::run")
    triton["spec"]["destination_passing_style"] = False
    rows = judged(tmp_path, tmp_path / "cache", triton)
    try:
        import triton as _  # noqa: F401
    except ImportError:
        assert {r["status"] for r in rows} == {"load_failed"}, rows
        assert "No module named 'triton'" in rows[0]["error"], rows
    else:
        assert {r["status"] for r in rows} == {"passed"}, rows


def test_a_tvm_ffi_binding_is_refused_plainly(tmp_path):
    ffi = solution(
        "cpp_tvm_ffi", "cpp", {"main.cpp": HONEST_CPP}, "main.cpp::run", binding="tvm-ffi"
    )
    rows = judged(tmp_path, tmp_path / "cache", ffi)
    assert {r["status"] for r in rows} == {"load_failed"}, rows
    assert "binding 'tvm-ffi' is not supported yet" in rows[0]["error"]
    assert not (tmp_path / "cache" / "builds").exists()  # refused before any build


@pytest.mark.gpu
def test_a_cuda_solution_is_built_and_passes(tmp_path):
    cuda = solution(
        "cuda_linear",
        "cuda",
        {"kernel.cu": CUDA_KERNEL, "main.cpp": CUDA_BINDING},
        "main.cpp::run",
    )
    rows = judged(tmp_path, tmp_path / "cache", cuda, device="cuda:0")
    assert [r["status"] for r in rows] == ["passed"] * len(WORKLOADS), rows
    key = key_of(cuda, "cuda:0")
    assert (tmp_path / "cache" / "builds" / f"{key}.done").is_file()
    again = judged(tmp_path / "again", tmp_path / "cache", cuda, device="cuda:0")
    assert [r["status"] for r in again] == ["passed"] * len(WORKLOADS), again
    assert os.path.getsize(tmp_path / "cache" / "builds" / key / f"{extension_name(key)}.so")
