"""What a run is pinned to: hashes of the dataset files it judges with and of the judge.

``Manifest.of`` hashes, byte for byte, the selected definitions, their tasks, workload
files and solutions, the candidate files, ``captures.jsonl``, and every source file of
the judge itself. The environment row records it; the scheduler checks it again before
each workload and stops the run when anything changed, and ``--resume`` refuses a report
written under another manifest.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..dataset.layout import Dataset
from ..errors import DatasetError


def _hash(paths: list[Path], root: Path | None = None) -> str:
    digest = hashlib.sha256()
    for path in sorted(set(paths)):
        name = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)
        digest.update(name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def judge_files() -> list[Path]:
    package = Path(__file__).resolve().parents[1]
    return sorted(package.rglob("*.py"))


def _stats(paths) -> tuple:
    stats = []
    for path in paths:
        try:
            info = path.stat()
            stats.append((info.st_mtime_ns, info.st_size, info.st_ino))
        except OSError:
            stats.append(None)
    return tuple(stats)


@dataclass
class Manifest:
    dataset_files: tuple[Path, ...]
    root: Path
    _seen: tuple | None = None  # file stats when last hashed
    _hashes: dict[str, str] | None = None  # and what they hashed to

    @classmethod
    def of(cls, dataset: Dataset, definitions: set[str], candidates: list[Path]) -> Manifest:
        files = [dataset.root / "captures.jsonl"]
        for candidate in (Path(c).resolve() for c in candidates):  # a folder: all its files
            files += sorted(p for p in candidate.rglob("*") if p.is_file()) or [candidate]
        for name in definitions:
            files.append(dataset.definition_files[name])
            files.append(dataset.root / "tasks" / f"{name}.json")
            if name in dataset.workload_files:
                files.append(dataset.workload_files[name])
        files += [
            path
            for name, path in dataset.solution_files.items()
            if dataset.solutions[name].definition in definitions
        ]
        return cls(tuple(sorted(set(files))), dataset.root)

    def _all(self) -> list[Path]:
        return [*self.dataset_files, *judge_files()]

    def hashes(self) -> dict[str, str]:
        self._seen = _stats(self._all())
        self._hashes = {
            "dataset": _hash(list(self.dataset_files), self.root),
            "judge": _hash(judge_files(), Path(__file__).resolve().parents[1]),
        }
        return dict(self._hashes)

    def check(self, recorded: dict[str, str], where: Path | str) -> None:
        """Raise DatasetError naming what changed when the files differ from ``recorded``
        (files are hashed again only when their stats changed)."""
        unchanged = self._seen is not None and _stats(self._all()) == self._seen
        now = self._hashes if unchanged else self.hashes()
        changed = [name for name in ("dataset", "judge") if recorded.get(name) != now[name]]
        if changed:
            labels = {"dataset": "dataset or a candidate's files", "judge": "judge"}
            raise DatasetError(
                where,
                "manifest",
                f"the {' and the '.join(labels[c] for c in changed)} changed since this run "
                "began (its files hash "
                "differently now); the rows written so far are kept. Rerun, or start another "
                "--report",
            )
