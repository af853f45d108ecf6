"""A ready-to-edit solution for one definition (``inference-kernels new``).

It writes a folder that ``run --candidate FOLDER`` judges as it is: ``solution.json``
(the FlashInfer Trace solution, its sources named by path and read from the folder) and
the source files, whose ``run`` has the definition's signature, with every input's and
output's shape and dtype in comments. The body allocates the outputs and leaves the
kernel to the author: judged unchanged, it fails with a mismatch, never passes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..schema import Definition

LANGUAGES = ("python", "triton", "cuda", "cpp")


def _tensor_line(name: str, spec: dict) -> str:
    shape = spec.get("shape")
    if shape is None:
        return f"{name}: scalar {spec['dtype']}"
    return f"{name}: {spec['dtype']}[{', '.join(shape)}]"


def _comments(definition: Definition, prefix: str) -> list[str]:
    data = definition.model_dump(mode="json")
    lines = [f"{definition.name}: " + (definition.description or "").split(". ")[0] + "."]
    constants = {k: v["value"] for k, v in data["axes"].items() if v.get("type") == "const"}
    if constants:
        lines.append("constant axes: " + ", ".join(f"{k}={v}" for k, v in constants.items()))
    variable = [k for k, v in data["axes"].items() if v.get("type") != "const"]
    if variable:
        lines.append("variable axes (from the workload): " + ", ".join(variable))
    lines.append("inputs:")
    lines += ["  " + _tensor_line(n, s) for n, s in data["inputs"].items()]
    lines.append("outputs (returned, in this order):")
    lines += ["  " + _tensor_line(n, s) for n, s in data["outputs"].items()]
    return [f"{prefix} {line}".rstrip() for line in lines]


def _sizes(definition: Definition, size: str) -> dict[str, str]:
    """An expression for each axis: a dimension of the first input that has it (``size``
    formats it, e.g. "{input}.shape[{dim}]"), else the constant's value."""
    data = definition.model_dump(mode="json")
    sizes: dict[str, str] = {}
    for name, spec in data["inputs"].items():
        for dim, axis in enumerate(spec.get("shape") or []):
            sizes.setdefault(axis, size.format(input=name, dim=dim))
    for axis, spec in data["axes"].items():
        if spec.get("type") == "const":
            sizes.setdefault(axis, str(spec["value"]))
    return sizes


def _first_tensor(definition: Definition) -> str | None:
    return next((n for n, s in definition.inputs.items() if s.shape is not None), None)


def _allocations(definition: Definition) -> tuple[list[str], str]:
    """Python lines that allocate each output from the inputs' sizes, and the return value."""
    sizes, first = _sizes(definition, "{input}.shape[{dim}]"), _first_tensor(definition)
    lines = []
    for name, spec in definition.model_dump(mode="json")["outputs"].items():
        dims = [sizes.get(axis, f"0  # TODO: {axis}") for axis in spec["shape"] or []]
        where = f", device={first}.device" if first else ""
        lines += [
            f"    {name} = torch.empty(",
            f"        ({', '.join(dims)}{',' if len(dims) == 1 else ''}),",
            f"        dtype=torch.{spec['dtype']}{where},",
            "    )",
        ]
    outputs = list(definition.outputs)
    return lines, ", ".join(outputs)


def python_source(definition: Definition, triton: bool) -> str:
    arguments = ", ".join(definition.inputs)
    allocate, returned = _allocations(definition)
    head = ["import torch"]
    kernel: list[str] = []
    if triton:
        head += ["import triton", "import triton.language as tl"]
        kernel = [
            "",
            "",
            "@triton.jit",
            "def _kernel(BLOCK: tl.constexpr):",
            "    # TODO: the kernel. Launch it from run() as _kernel[grid](..., BLOCK=128).",
            "    pass",
        ]
    body = [
        '"""',
        *[line.removeprefix("#").removeprefix(" ") for line in _comments(definition, "#")],
        '"""',
        "",
        *head,
        *kernel,
        "",
        "",
        "@torch.no_grad()",
        f"def run({arguments}):",
        *allocate,
        "    # TODO: compute the outputs into the tensors above (or return new ones).",
        f"    return {returned}",
        "",
    ]
    return "\n".join(body)


def cuda_sources(definition: Definition, cuda: bool = True) -> dict[str, str]:
    """A C++/CUDA extension (binding ``torch``) whose ``run`` returns the outputs; plain
    C++ (``main.cpp``, the CPU's) when not ``cuda``."""
    data = definition.model_dump(mode="json")
    parameters = ", ".join(
        f"torch::Tensor {n}" if s.get("shape") is not None else f"double {n}"
        for n, s in data["inputs"].items()
    )
    outputs = list(data["outputs"])
    returns = "torch::Tensor" if len(outputs) == 1 else "std::vector<torch::Tensor>"
    sizes, first = _sizes(definition, "{input}.size({dim})"), _first_tensor(definition)
    allocations = [
        f"    auto {name} = torch::empty({{{', '.join(sizes[a] for a in spec['shape'] or [])}}}, "
        f"{first}.options().dtype(torch::k{_cxx_dtype(spec['dtype'])}));"
        for name, spec in data["outputs"].items()
    ]
    value = outputs[0] if len(outputs) == 1 else "{" + ", ".join(outputs) + "}"
    comments = _comments(definition, "//")
    source = [
        *comments,
        "#include <torch/extension.h>",
        "",
        "// TODO: the kernel, e.g. __global__ void kernel(...) { ... }"
        if cuda
        else "// TODO: the computation, e.g. loops over A.data_ptr<at::BFloat16>()",
        "",
        f"{returns} run({parameters}) {{",
        *allocations,
        "    // TODO: launch the kernel on at::cuda::getCurrentCUDAStream()."
        if cuda
        else "    // TODO: compute the outputs into the tensors above.",
        f"    return {value};",
        "}",
        "",
        'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }',
        "",
    ]
    return {"kernel.cu" if cuda else "main.cpp": "\n".join(source)}


def _cxx_dtype(dtype: str) -> str:
    return {
        "bfloat16": "BFloat16",
        "float16": "Half",
        "float32": "Float",
        "float64": "Double",
        "int64": "Long",
        "int32": "Int",
        "int8": "Char",
        "uint8": "Byte",
        "bool": "Bool",
        "float8_e4m3fn": "Float8_e4m3fn",
    }.get(dtype, "Float")


def write(definition: Definition, language: str, folder: Path, author: str) -> list[Path]:
    """Write the scaffold into the new or empty ``folder``; the files written."""
    if language in ("cuda", "cpp"):
        sources = cuda_sources(definition, cuda=language == "cuda")
        entry = f"{next(iter(sources))}::run"
    else:
        sources, entry = (
            {"main.py": python_source(definition, language == "triton")},
            "main.py::run",
        )
    solution = {
        "name": f"{definition.name}_{language}_draft",
        "definition": definition.name,
        "author": author,
        "description": f"A {language} solution for {definition.name}.",
        "spec": {
            "language": language,
            "target_hardware": {"python": ["cpu", "cuda"], "cpp": ["cpu"]}.get(language, ["cuda"]),
            "entry_point": entry,
            "destination_passing_style": False,
        },
        "sources": [{"path": path} for path in sources],  # read from this folder
    }
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in {**sources, "solution.json": json.dumps(solution, indent=2) + "\n"}.items():
        (folder / path).write_text(text)
        written.append(folder / path)
    return written
