import json
from pathlib import Path

import pytest

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.judge.loader import (
    SolutionLoadError,
    load_package,
    module_constants,
    set_constants,
    write_package,
)
from inference_kernels.judge.session import Request, judge
from inference_kernels.schema import Solution

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"
HONEST = (ROOT / "tests/exploits/solutions/honest.py").read_text()

DPS_MAIN = """from .honest import decode


def run(q, k, v, state, A_log, a, dt_bias, b, scale, output, new_state):
    result, updated = decode(q, k, v, state, A_log, a, dt_bias, b, scale)
    output.copy_(result)
    new_state.copy_(updated)
"""


def make(main: str, dps: bool, entry: str = "main.py::run") -> Solution:
    return Solution.model_validate(
        {
            "name": "dps" if dps else "plain",
            "definition": DEFINITION,
            "author": "tests",
            "spec": {
                "language": "python",
                "target_hardware": ["cpu"],
                "entry_point": entry,
                "destination_passing_style": dps,
            },
            "sources": [
                {"path": "main.py", "content": main},
                {"path": "honest.py", "content": HONEST},
            ],
        }
    )


def test_sources_land_in_a_fresh_package_the_sandbox_user_can_read(tmp_path):
    package = write_package(make(DPS_MAIN, True), tmp_path / "fresh")
    assert (package / "main.py").read_text() == DPS_MAIN and (package / "__init__.py").exists()
    assert oct(package.stat().st_mode & 0o777) == "0o755"
    assert oct((package / "main.py").stat().st_mode & 0o777) == "0o644"
    with pytest.raises(FileExistsError):  # never written over: one folder per worker
        write_package(make(DPS_MAIN, True), package)
    escaping = make(DPS_MAIN, True)
    object.__setattr__(escaping.sources[0], "path", "../outside.py")  # past the schema's check
    with pytest.raises(SolutionLoadError, match="escapes the package"):
        write_package(escaping, tmp_path / "other")
    assert not (tmp_path / "outside.py").exists()


def test_a_tools_settings_take_the_type_of_the_constant_they_replace(tmp_path):
    # what the interpreter checks and the GPU's sweeps give a solution's tuning constants
    # (--set NAME=VALUE): a bool from "False" is False, not bool("False")
    definition = load_dataset(ROOT / "dataset").definitions[DEFINITION]
    main = "FLAG, SIZE, WAY = True, 64, 'rows'\n" + DPS_MAIN
    solution = make(main, True)
    run = load_package(solution, definition, write_package(solution, tmp_path / "s")).run
    set_constants(run, {"FLAG": "False", "SIZE": "128", "WAY": "vectors"}, "s")
    assert [module_constants(run)[n] for n in ("FLAG", "SIZE", "WAY")] == [False, 128, "vectors"]
    set_constants(run, {"FLAG": "True"}, "s")
    assert module_constants(run)["FLAG"] is True
    with pytest.raises(ValueError, match="s's FLAG is True or False, not 'no'"):
        set_constants(run, {"FLAG": "no"}, "s")
    with pytest.raises(ValueError, match="s has no module constant NOPE"):
        set_constants(run, {"NOPE": "1"}, "s")


def test_signature_is_checked_against_the_definition(tmp_path):
    definition = load_dataset(ROOT / "dataset").definitions[DEFINITION]
    dps = make(DPS_MAIN, True)
    loaded = load_package(dps, definition, write_package(dps, tmp_path / "dps"))
    assert loaded.prepare is None
    plain = make(DPS_MAIN, False)
    with pytest.raises(
        SolutionLoadError, match="takes 11 positional arguments, the definition passes 9"
    ):
        load_package(plain, definition, write_package(plain, tmp_path / "plain"))


def test_destination_passing_solution_is_judged(tmp_path):
    candidate = tmp_path / "dps.json"
    candidate.write_text(make(DPS_MAIN, True).model_dump_json())
    request = Request(
        definitions=[DEFINITION],
        solutions=[],
        candidates=[candidate],
        report=tmp_path / "r.jsonl",
        cache=tmp_path / "cache",
        timeout=60,
    )
    rows = judge(load_dataset(ROOT / "dataset"), request)
    (row,) = [r for r in rows if r.get("solution") == "dps"]
    assert row["status"] == "passed", row.get("error")
    assert set(row["outputs"]) == {"call", "eager"}  # the checked call and the timed calls checked
    assert json.dumps(row)  # a plain JSON row
