"""Fetch the published dataset from the Hugging Face Hub: its metadata, and only the tensors
that a selection of workloads needs (the whole dataset is 146 GB).

1. Every file outside ``blob/`` (definitions, workloads, tasks, captures, solutions: a few
   MB) of one commit is downloaded into ``into``, which becomes a dataset root.
2. That metadata is loaded and validated; the selected workloads (``select``: definitions and
   suite) name their tensor files, and those are downloaded. So are the engine outputs that
   the capture records of workloads with captured inputs name: ``replay`` compares with
   them, and ``check`` requires them wherever captured inputs ship.

Downloads go through ``huggingface_hub.hf_hub_download`` into ``into`` (its ``local_dir``
mode): a file already there at the same etag is not downloaded again, and a dropped
connection is resumed with a Range request. huggingface_hub checks only the size of what
arrives, so every file is checked here against the hub's listing of the commit (the LFS
sha256, or the git blob id of a small file), and every tensor file is then read as the judge
reads it: its content hash must equal its name, its shape and dtype those declared. A file
that fails is deleted, and the error names it.

A branch or tag is resolved to a commit once, and every file comes from that commit;
``FETCHED.json`` in ``into`` records it. A folder holding another commit is refused rather
than mixed: ``revision=<that sha>`` adds to it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import Field

from ..errors import DatasetError, close_names
from ..schema import SafetensorsInput, Strict
from . import blobs, receipts
from .files import write_atomically
from .layout import Dataset, load_dataset, parse, read_json
from .selection import Suite, select

DEFAULT_REPO = "humanfia-lab/inference-kernels"
# The seed names no commit of the published repository: "main" is resolved on each fetch and
# the commit it was is recorded in FETCHED.json; pass that sha as the revision to pin it.
DEFAULT_REVISION = "main"
DEFAULT_INTO = Path("data/inference-kernels")
RECEIPT = "FETCHED.json"
BLOB_FOLDER = "blob"

# (what is being fetched, bytes done, bytes in all)
Progress = Callable[[str, int, int], None]


class FetchError(Exception):
    """The hub could not be reached, or answered with an error. The message is one line."""


class Selection(Strict):
    definitions: list[str] | None  # None: every definition
    suite: Suite
    workloads: int
    tensor_files: int
    finished_at: str


class Receipt(Strict):
    """``FETCHED.json``: which commit of which repository the folder holds, and what of it."""

    repo: str
    revision: str  # as asked for on the first fetch
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    endpoint: str
    selections: list[Selection] = []


@dataclass
class Fetched:
    root: Path
    repo: str
    commit: str
    definitions: list[str]  # those with selected workloads
    workloads: int
    metadata_files: int
    tensor_files: int
    bytes: int  # of every file fetched, or found there and verified


@dataclass
class _Wanted:
    """A tensor file, where it is first named (for errors), and how it is read back."""

    file: str
    field: str
    read: Callable[[Path], Any]


def fetch(
    repo_id: str = DEFAULT_REPO,
    revision: str = DEFAULT_REVISION,
    into: str | Path = DEFAULT_INTO,
    definitions: list[str] | None = None,
    suite: Suite = "dev",
    endpoint: str | None = None,
    progress: Progress | None = None,
) -> Fetched:
    """Fetch the metadata of ``revision`` and the tensors of the selected workloads into
    ``into``. Raises FetchError (the hub) or DatasetError (a file, naming it and the field)."""
    into = Path(into).resolve()
    hub = _Hub(repo_id, endpoint)
    commit = hub.resolve(revision)
    receipt = _open_receipt(into, repo_id, revision, commit, hub.endpoint)
    transfer = _Transfer(hub, commit, into, progress)

    metadata = hub.metadata_files(commit)
    transfer.run("metadata", metadata, {})
    dataset = _load(into)
    _known(dataset, definitions, f"{repo_id}@{commit}")
    cases = select(dataset, definitions, suite)
    wanted = _tensors(dataset, cases)
    listed = hub.files(commit, {str(PurePosixPath(path).parent) for path in wanted})
    for path, want in wanted.items():
        if path not in listed:
            raise DatasetError(want.file, want.field, f"{path} is not in {repo_id}@{commit}")
    tensors = [listed[path] for path in sorted(wanted)]
    transfer.run("tensors", tensors, wanted)

    selection = Selection(
        definitions=sorted(definitions) if definitions else None,
        suite=suite,
        workloads=len(cases),
        tensor_files=len(tensors),
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    selections = [*receipt.selections, selection]
    _write_receipt(into, receipt.model_copy(update={"selections": selections}))
    return Fetched(
        root=into,
        repo=repo_id,
        commit=commit,
        definitions=sorted({definition.name for definition, _ in cases}),
        workloads=len(cases),
        metadata_files=len(metadata),
        tensor_files=len(tensors),
        bytes=transfer.bytes,
    )


class _Hub:
    """The few hub calls a fetch makes, each turning the hub's errors into one line."""

    def __init__(self, repo_id: str, endpoint: str | None):
        from huggingface_hub import HfApi

        self.repo = repo_id
        self.api = HfApi(endpoint=endpoint, library_name="inference-kernels")
        self.endpoint = self.api.endpoint  # huggingface_hub's default reads $HF_ENDPOINT

    def resolve(self, revision: str) -> str:
        with self.errors(f"{self.repo}@{revision}"):
            info = self.api.dataset_info(self.repo, revision=revision)
        if not isinstance(info.sha, str) or len(info.sha) != 40:
            raise FetchError(f"{self.repo}@{revision}: the hub named no commit ({info.sha!r})")
        return info.sha

    def metadata_files(self, commit: str) -> list:
        """Every file of the commit outside ``blob/``, listed without listing ``blob/``."""
        from huggingface_hub.hf_api import RepoFile, RepoFolder

        top = self._list(commit, None, recursive=False)
        files = [entry for entry in top if isinstance(entry, RepoFile)]
        for folder in top:
            if isinstance(folder, RepoFolder) and folder.path != BLOB_FOLDER:
                files += [
                    entry
                    for entry in self._list(commit, folder.path, recursive=True)
                    if isinstance(entry, RepoFile)
                ]
        return sorted(files, key=lambda entry: entry.path)

    def files(self, commit: str, folders: set[str]) -> dict[str, Any]:
        """The files directly in ``folders`` (``.`` is the top), by path; a folder the
        commit lacks lists nothing."""
        from huggingface_hub.hf_api import RepoFile

        listed = {}
        for folder in sorted(folders):
            path = None if folder == "." else folder
            entries = self._list(commit, path, recursive=False, missing_ok=True)
            listed.update({e.path: e for e in entries if isinstance(e, RepoFile)})
        return listed

    def download(self, commit: str, path: str, into: Path, tqdm_class: type) -> Path:
        from huggingface_hub import hf_hub_download

        with self.errors(f"{self.repo}@{commit}: {path}"):
            local = hf_hub_download(
                self.repo,
                path,
                repo_type="dataset",
                revision=commit,
                local_dir=into,
                endpoint=self.endpoint,
                tqdm_class=tqdm_class,
            )
        return Path(local)

    def _list(self, commit: str, folder: str | None, recursive: bool, missing_ok=False) -> list:
        from huggingface_hub.errors import RemoteEntryNotFoundError

        with self.errors(f"{self.repo}@{commit}: {folder or '/'}"):
            try:
                return list(
                    self.api.list_repo_tree(
                        self.repo,
                        path_in_repo=folder,
                        recursive=recursive,
                        revision=commit,
                        repo_type="dataset",
                    )
                )
            except RemoteEntryNotFoundError:
                if missing_ok:
                    return []
                raise

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """The hub's exceptions as a FetchError of one line (the original kept as cause)."""
        import httpx2
        from huggingface_hub import errors

        try:
            yield
        except errors.RepositoryNotFoundError as error:
            message = f"no such dataset repository on {self.endpoint} (or it is private)"
            raise FetchError(f"{what}: {message}") from error
        except errors.RevisionNotFoundError as error:
            raise FetchError(f"{what}: no such revision") from error
        except errors.RemoteEntryNotFoundError as error:
            raise FetchError(f"{what}: not in the repository") from error
        except errors.HfHubHTTPError as error:
            status = error.response.status_code if error.response is not None else "?"
            raise FetchError(f"{what}: the hub answered HTTP {status}") from error
        except (httpx2.HTTPError, errors.LocalEntryNotFoundError) as error:
            raise FetchError(f"{what}: cannot reach {self.endpoint} ({_line(error)})") from error
        except OSError as error:  # a short read huggingface_hub gave up on, a full disk
            raise FetchError(f"{what}: {_line(error)}") from error


class _Transfer:
    """Downloads files into the target, checks each on arrival, reports progress in bytes."""

    def __init__(self, hub: _Hub, commit: str, into: Path, progress: Progress | None):
        self.hub, self.commit, self.into = hub, commit, into
        self.progress = progress or (lambda what, done, total: None)
        self.bytes = 0

    def run(self, what: str, entries: list, wanted: dict[str, _Wanted]) -> None:
        total = sum(_size(entry) for entry in entries)
        done = 0
        self.progress(what, done, total)
        for entry in entries:
            if not _inside(entry.path):
                where = f"{self.hub.repo}@{self.commit}"
                raise FetchError(f"{where}: lists {entry.path!r}, a path outside the repository")
            before = done

            def advance(count: int) -> None:
                nonlocal done
                done += count
                self.progress(what, done, total)

            local = self.hub.download(self.commit, entry.path, self.into, _reporter(advance))
            self._check(local, entry, wanted.get(entry.path))
            done = before + _size(entry)  # whatever was counted, retries included
            self.bytes += _size(entry)
            self.progress(what, done, total)

    def _check(self, local: Path, entry, want: _Wanted | None) -> None:
        """Refuse (delete) a file that is not what the hub lists, or, for a tensor file, not
        what the dataset says it is."""
        problem = _arrival_problem(local, entry)
        if problem:
            local.unlink()
            raise DatasetError(entry.path, "", f"{problem}; removed, fetch again")
        if want is None:
            return
        try:
            want.read(self.into)
        except DatasetError as error:
            local.unlink()
            raise DatasetError(
                entry.path, error.problem.field, f"{error.problem.message}; removed"
            ) from None


def _reporter(advance: Callable[[int], None]) -> type:
    """A tqdm class for huggingface_hub that draws nothing and hands its byte counts on, so
    that the one progress bar is ours."""
    from huggingface_hub.utils import tqdm

    class Reporter(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "disable": True})

        def update(self, n: float | None = 1) -> None:
            advance(int(n or 0))

    return Reporter


def _size(entry) -> int:
    return entry.lfs.size if entry.lfs is not None else entry.size


def _arrival_problem(local: Path, entry) -> str | None:
    """How ``local`` differs from the hub's listing: size, then the LFS sha256 (the git blob
    id for a file not in LFS)."""
    size = local.stat().st_size
    if size != _size(entry):
        return f"{size} bytes, the hub lists {_size(entry)}"
    if entry.lfs is not None:
        digest, expected, kind = hashlib.sha256(), entry.lfs.sha256, "sha256"
    else:
        digest, expected, kind = hashlib.sha1(f"blob {size}\0".encode()), entry.blob_id, "git id"
    with local.open("rb") as stream:
        while chunk := stream.read(1 << 24):
            digest.update(chunk)
    actual = digest.hexdigest()
    if actual != expected:
        return f"{kind} {actual[:12]}... differs from the hub's {expected[:12]}..."
    return None


def _open_receipt(into: Path, repo: str, revision: str, commit: str, endpoint: str) -> Receipt:
    """The folder's receipt, checked against this fetch; written first for a new folder, so
    that an interrupted fetch can be run again."""
    path = into / RECEIPT
    if path.is_file():
        data, problems = read_json(path, str(path))
        receipt, more = parse(Receipt, data, str(path)) if data is not None else (None, [])
        if problems + more:
            first = (problems + more)[0]
            raise DatasetError(first.file, first.field, first.message)
        assert receipt is not None
        if receipt.repo != repo:
            raise DatasetError(path, "repo", f"holds {receipt.repo}, not {repo}")
        if receipt.commit != commit:
            raise DatasetError(
                path,
                "commit",
                f"holds {receipt.commit}, and {revision!r} is {commit} now: pass --revision "
                f"{receipt.commit} to add to this folder, or fetch into another",
            )
        return receipt
    if into.is_dir() and any(into.iterdir()):
        raise DatasetError(into, "", f"not empty and no {RECEIPT}: fetch into a new folder")
    receipt = Receipt(repo=repo, revision=revision, commit=commit, endpoint=endpoint)
    _write_receipt(into, receipt)
    return receipt


def _write_receipt(into: Path, receipt: Receipt) -> None:
    text = json.dumps(receipt.model_dump(mode="json"), indent=2) + "\n"
    write_atomically(into / RECEIPT, text.encode())


def _load(into: Path) -> Dataset:
    """The fetched metadata, which must load without a problem."""
    dataset = load_dataset(into)
    if dataset.problems:
        first, more = dataset.problems[0], len(dataset.problems) - 1
        also = f" (and {more} more: inference-kernels check --dataset {into})" if more else ""
        raise DatasetError(first.file, first.field, first.message + also)
    return dataset


def _known(dataset: Dataset, names: list[str] | None, where: str) -> None:
    for name in names or []:
        if name not in dataset.definitions:
            close = close_names(name, dataset.definitions)
            hint = f"did you mean {', '.join(close)}?" if close else "see `inference-kernels show`"
            raise DatasetError(where, "definition", f"no definition named {name!r}; {hint}")


def _tensors(dataset: Dataset, cases: list) -> dict[str, _Wanted]:
    """The tensor files the selected workloads name, by path: their inputs and, for a workload
    with inputs in files (captured; stand-ins have none), the engine outputs its capture
    record names."""
    wanted: dict[str, _Wanted] = {}

    def want(file: str, field: str, descriptor: SafetensorsInput, read: Callable) -> None:
        if not _inside(descriptor.path):
            raise DatasetError(file, f"{field}.path", "not a relative path inside the dataset")
        wanted.setdefault(descriptor.path, _Wanted(file, field, read))

    for definition, workload in cases:
        file = dataset.relative(dataset.workload_files[definition.name])
        in_files = False
        for name, descriptor in workload.inputs.items():
            if isinstance(descriptor, SafetensorsInput):
                in_files = True
                read = partial(blobs.load_verified, definition, workload, name, descriptor)
                want(file, f"workload {workload.uuid}.inputs.{name}", descriptor, read)
        capture = dataset.captures.get(workload.uuid)
        if not in_files or capture is None:
            continue
        for name, descriptor in (receipts.engine_outputs(definition, capture) or {}).items():
            read = partial(receipts.load_engine_output, definition, workload, name, descriptor)
            field = f"uuid {workload.uuid}.expected_output.{name}"
            want("captures.jsonl", field, descriptor, read)
    return wanted


def _inside(path: str) -> bool:
    """Is ``path`` a relative path that stays inside the folder it is joined to?"""
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and ".." not in parts


def _line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
