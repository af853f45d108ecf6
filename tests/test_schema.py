import pytest
from pydantic import ValidationError

from inference_kernels.schema import Definition, Solution, Task, TraceLine

DEFINITION = {
    "name": "d",
    "op_type": "x",
    "axes": {"M": {"type": "var"}, "K": {"type": "const", "value": 4}},
    "inputs": {"A": {"shape": ["M", "K"], "dtype": "bfloat16"}},
    "outputs": {"C": {"shape": ["M"], "dtype": "float32"}},
    "reference": "def run(A):\n    return A.sum(-1).float()\n",
}


def test_definition_round_trips_and_knows_its_axes():
    definition = Definition.model_validate(DEFINITION)
    assert definition.const_axes() == {"K": 4} and definition.var_axes() == ["M"]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["inputs"]["A"].update(shape=["M", "N"]), "undeclared axis 'N'"),
        (
            lambda d: d["outputs"].update(A={"shape": None, "dtype": "int32"}),
            "both input and output",
        ),
        (lambda d: d["axes"]["K"].pop("value"), "Field required"),
        (lambda d: d["inputs"]["A"].update(dtype="half"), "unknown dtype"),
        (lambda d: d.update(extra=1), "Extra inputs are not permitted"),
    ],
)
def test_definition_errors(change, message):
    data = {
        **DEFINITION,
        "inputs": {"A": dict(DEFINITION["inputs"]["A"])},
        "axes": {k: dict(v) for k, v in DEFINITION["axes"].items()},
        "outputs": dict(DEFINITION["outputs"]),
    }
    change(data)
    with pytest.raises(ValidationError, match=message):
        Definition.model_validate(data)


def test_workload_descriptors_are_discriminated_by_type():
    line = TraceLine.model_validate(
        {
            "definition": "d",
            "workload": {
                "uuid": "u",
                "axes": {"M": 2},
                "inputs": {
                    "A": {
                        "type": "safetensors",
                        "path": "blob/x.safetensors",
                        "tensor_key": "tensor",
                    },
                    "s": {"type": "scalar", "value": 0.5},
                    "r": {"type": "random"},
                },
            },
            "solution": None,
            "evaluation": None,
        }
    )
    assert [d.type for d in line.workload.inputs.values()] == ["safetensors", "scalar", "random"]
    with pytest.raises(ValidationError):
        TraceLine.model_validate(
            {
                "definition": "d",
                "workload": {
                    "uuid": "u",
                    "axes": {},
                    "inputs": {"A": {"type": "random", "path": "x"}},
                },
            }
        )


SOLUTION = {
    "name": "s",
    "definition": "d",
    "author": "a",
    "spec": {"language": "python", "target_hardware": ["H200"], "entry_point": "main.py::run"},
    "sources": [{"path": "main.py", "content": "def run(A): ..."}],
}


@pytest.mark.parametrize(
    "sources, entry, message",
    [
        ([{"path": "../escape.py", "content": ""}], "main.py::run", "stay inside"),
        ([{"path": "/abs.py", "content": ""}], "main.py::run", "stay inside"),
        ([{"path": "main.py", "content": ""}], "main.py", "file.py::function"),
        ([{"path": "other.py", "content": ""}], "main.py::run", "not among the sources"),
    ],
)
def test_solution_sources_are_checked(sources, entry, message):
    data = {**SOLUTION, "sources": sources, "spec": {**SOLUTION["spec"], "entry_point": entry}}
    with pytest.raises(ValidationError, match=message):
        Solution.model_validate(data)


def test_solution_defaults_follow_flashinfer_bench():
    solution = Solution.model_validate(SOLUTION)
    assert solution.spec.destination_passing_style is True and solution.spec.dependencies == []


def test_task_limits():
    task = {
        "definition": "d",
        "workloads": ["w.jsonl"],
        "tolerance": {"atol": 0, "rtol": 0},
        "dev": ["a"],
        "timing": {"warmup": 1, "iters": 1, "trials": 1},
    }
    assert Task.model_validate(task).baseline is None
    with pytest.raises(ValidationError):
        Task.model_validate({**task, "dev": [str(i) for i in range(11)]})
    with pytest.raises(ValidationError):
        Task.model_validate({**task, "tolerance": {"atol": 0, "rtol": 0, "comparison": "relative"}})
    with pytest.raises(ValidationError):
        Task.model_validate(
            {**task, "tolerance": {"atol": 0, "rtol": 0, "required_matched_ratio": 1.5}}
        )
