"""Candidate solutions for the judge's tests, and a request that judges only them."""

import json
from pathlib import Path

from inference_kernels.judge.session import Request

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "tests/exploits/solutions"
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"


def write_candidate(tmp_path: Path, name: str, main: str) -> Path:
    """A solution JSON of ``main`` as main.py, with the exploits' honest.py beside it."""
    candidate = tmp_path / f"{name}.json"
    candidate.write_text(
        json.dumps(
            {
                "name": name,
                "definition": DEFINITION,
                "author": "tests",
                "spec": {
                    "language": "python",
                    "target_hardware": ["cpu"],
                    "entry_point": "main.py::run",
                    "destination_passing_style": False,
                },
                "sources": [
                    {"path": "main.py", "content": main},
                    {"path": "honest.py", "content": (SOLUTIONS / "honest.py").read_text()},
                ],
            }
        )
    )
    return candidate


def candidates_request(tmp_path: Path, candidates: list[Path], **options) -> Request:
    """Judge only ``candidates`` on DEFINITION (first suite unless told), reporting to
    tmp_path/results.jsonl."""
    return Request(
        definitions=[DEFINITION],
        solutions=[],
        candidates=candidates,
        report=tmp_path / "results.jsonl",
        cache=tmp_path / "cache",
        **{"timeout": 30, **options},
    )
