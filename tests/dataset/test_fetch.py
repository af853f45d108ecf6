"""`fetch` against a fake hub: a local HTTP server speaking the endpoints huggingface_hub
calls, serving a small repository cut from the bundled dataset (two MiniLM GEMM
definitions, their captured tensors and engine outputs). No network."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from typer.testing import CliRunner

from inference_kernels.cli import app
from inference_kernels.dataset.fetch import FetchError, fetch
from inference_kernels.errors import DatasetError

BUNDLED = Path(__file__).resolve().parents[2] / "dataset"
REPO = "humanfia-lab/inference-kernels"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
A = "dense_gemm_bf16_nt_bias_n384_k384"  # two workloads in the fake repository
B = "dense_gemm_bf16_nt_bias_n1536_k384"  # one workload


def _lines(path: Path, uuids: list[str], uuid) -> bytes:
    """The JSON lines of ``path`` whose ``uuid(record)`` is one of ``uuids``."""
    lines = path.read_text().splitlines()
    return "".join(
        f"{line}\n" for line in lines if line.strip() and uuid(json.loads(line)) in uuids
    ).encode()


def _repository() -> dict[str, bytes]:
    """Path -> content: metadata and blobs of A (2 workloads) and B (1), from dataset/."""
    files: dict[str, bytes] = {
        "README.md": b"# inference-kernels (a slice, for tests)\n",
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
    }
    uuids: list[str] = []
    for name, count in ((A, 2), (B, 1)):
        for path in (f"definitions/gemm/{name}.json", f"solutions/gemm/torch_{name}.json"):
            files[path] = (BUNDLED / path).read_bytes()
        task = json.loads((BUNDLED / "tasks" / f"{name}.json").read_text())
        task["dev"] = task["dev"][:count]
        files[f"tasks/{name}.json"] = json.dumps(task, indent=2).encode()
        workloads = f"workloads/gemm/{name}.jsonl"
        files[workloads] = _lines(BUNDLED / workloads, task["dev"], lambda r: r["workload"]["uuid"])
        uuids += task["dev"]
    files["captures.jsonl"] = _lines(BUNDLED / "captures.jsonl", uuids, lambda r: r["uuid"])
    for path in _tensor_paths(files, (A, B)):
        files[path] = (BUNDLED / path).read_bytes()
    return files


def _tensor_paths(files: dict[str, bytes], names) -> set[str]:
    """Every tensor path the workloads of ``names`` and their captures name."""
    paths, uuids = set(), set()
    for name in names:
        for line in files[f"workloads/gemm/{name}.jsonl"].decode().splitlines():
            workload = json.loads(line)["workload"]
            uuids.add(workload["uuid"])
            paths |= {d["path"] for d in workload["inputs"].values() if d["type"] == "safetensors"}
    for line in files["captures.jsonl"].decode().splitlines():
        record = json.loads(line)
        if record["uuid"] in uuids:
            paths.add(record["expected_output"]["path"])
    return paths


class FakeHub:
    """The hub's HTTP layout, enough for huggingface_hub's dataset_info, list_repo_tree and
    hf_hub_download: files under blob/ are LFS files (X-Linked-Etag/-Size), and GET answers
    Range requests. ``serve`` replaces what a GET sends, ``cut`` drops the connection after
    that many bytes (once), ``refuse`` answers GET with 500; ``log`` records requests."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.commit = COMMIT
        self.serve: dict[str, bytes] = {}
        self.cut: dict[str, int] = {}
        self.refuse: set[str] = set()
        self.log: list[tuple[str, str, str | None]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def entry(self, path: str) -> dict:
        data = self.files[path]
        oid = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
        entry = {"type": "file", "path": path, "size": len(data), "oid": oid}
        if path.startswith("blob/"):
            sha256 = hashlib.sha256(data).hexdigest()
            entry["lfs"] = {"oid": sha256, "size": len(data), "pointerSize": 134}
        return entry

    def tree(self, folder: str, recursive: bool) -> list[dict] | None:
        prefix = f"{folder}/" if folder else ""
        below = [path for path in self.files if path.startswith(prefix)]
        if folder and not below:
            return None
        entries, folders = [], set()
        for path in sorted(below):
            rest = path[len(prefix) :].split("/")
            for depth in range(1, len(rest) if recursive else min(len(rest), 2)):
                folders.add(prefix + "/".join(rest[:depth]))
            if recursive or len(rest) == 1:
                entries.append(self.entry(path))
        return [
            {"type": "directory", "path": f, "oid": "0" * 40} for f in sorted(folders)
        ] + entries

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._resolve(body=False)

            def do_GET(self):
                url = urlsplit(self.path)
                api = f"/api/datasets/{REPO}/"
                if url.path.startswith(api + "revision/"):
                    revision = unquote(url.path[len(api + "revision/") :])
                    if revision not in ("main", hub.commit):
                        return self._send(404, b"{}", {"X-Error-Code": "RevisionNotFound"})
                    siblings = [{"rfilename": path} for path in sorted(hub.files)]
                    info = {"id": REPO, "sha": hub.commit, "siblings": siblings}
                    return self._json(info)
                if url.path.startswith(api + "tree/"):
                    revision, _, folder = url.path[len(api + "tree/") :].partition("/")
                    recursive = parse_qs(url.query).get("recursive", ["false"])[0] == "true"
                    listing = hub.tree(unquote(folder), recursive)
                    if listing is None:
                        return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"})
                    return self._json(listing)
                self._resolve(body=True)

            def _resolve(self, body: bool):
                match = re.fullmatch(rf"/datasets/{REPO}/resolve/([^/]+)/(.+)", self.path)
                path = unquote(match.group(2)) if match else ""
                hub.log.append((self.command, path, self.headers.get("Range")))
                headers = {"X-Repo-Commit": hub.commit}
                if path not in hub.files:
                    headers["X-Error-Code"] = "EntryNotFound"
                    return self._send(404, b"", headers, body)
                if body and path in hub.refuse:
                    return self._send(500, b"", headers, body)
                entry = hub.entry(path)
                headers["ETag"] = f'"{entry["oid"]}"'
                if "lfs" in entry:
                    headers["X-Linked-Etag"] = f'"{entry["lfs"]["oid"]}"'
                    headers["X-Linked-Size"] = str(entry["size"])
                data = hub.serve.get(path, hub.files[path])
                start = 0
                if body and (
                    wanted := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                ):
                    start = int(wanted.group(1))
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                cut = hub.cut.pop(path, None) if body else None
                self._send(206 if start else 200, data[start:], headers, body, cut)

            def _json(self, value):
                self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

            def _send(self, status, data, headers, body=True, cut=None):
                self.send_response(status)
                for key, value in {**headers, "Content-Length": str(len(data))}.items():
                    self.send_header(key, value)
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if not body:
                    return
                if cut is None:
                    self.wfile.write(data)
                    return
                self.wfile.write(data[:cut])  # then the connection drops mid-body
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

        return Handler


@pytest.fixture
def hub():
    server = FakeHub(_repository())
    yield server
    server.close()


def _fetch(hub: FakeHub, into: Path, *definitions: str):
    return fetch(REPO, "main", into, list(definitions), "dev", endpoint=hub.url)


def _files(root: Path) -> set[str]:
    """What a fetch left in ``root``, less huggingface_hub's bookkeeping and our receipt."""
    found = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    return {p for p in found if not p.startswith(".cache/") and p != "FETCHED.json"}


def test_fetch_downloads_the_metadata_and_only_the_selected_tensors(hub, tmp_path):
    into = tmp_path / "data"
    fetched = _fetch(hub, into, A)
    metadata = {path for path in hub.files if not path.startswith("blob/")}
    tensors = _tensor_paths(hub.files, [A])
    assert _files(into) == metadata | tensors
    assert not _tensor_paths(hub.files, [B]) & _files(into)  # B's tensors stay on the hub
    assert fetched.commit == COMMIT and fetched.workloads == 2
    assert fetched.tensor_files == len(tensors) and fetched.definitions == [A]
    for path in _files(into):
        assert (into / path).read_bytes() == hub.files[path]
    receipt = json.loads((into / "FETCHED.json").read_text())
    assert receipt["commit"] == COMMIT and receipt["revision"] == "main"
    assert receipt["selections"][0]["definitions"] == [A]

    # What was fetched is a dataset: replay reads the captured inputs and engine outputs.
    report = tmp_path / "replay.jsonl"
    result = CliRunner().invoke(
        app, ["replay", "--dataset", str(into), "-d", A, "--report", str(report), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["replayed"] == 2

    # Again: everything is there at the same etag, so nothing is downloaded.
    hub.log.clear()
    _fetch(hub, into, A)
    assert not [entry for entry in hub.log if entry[0] == "GET"]


def test_a_dropped_download_is_resumed_with_a_range_request(hub, tmp_path, monkeypatch):
    import huggingface_hub.constants

    # Chunks of 256 bytes instead of 10 MB, so that a small blob is written in several (what
    # is written before the drop is what the Range request skips).
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 256)
    path = sorted(_tensor_paths(hub.files, [A]))[0]
    hub.cut[path] = 4096
    into = tmp_path / "data"
    _fetch(hub, into, A)
    ranges = [entry[2] for entry in hub.log if entry[:2] == ("GET", path)]
    assert ranges == [None, "bytes=4096-"]
    assert (into / path).read_bytes() == hub.files[path]


def test_an_interrupted_fetch_leaves_nothing_partial_and_runs_again(hub, tmp_path):
    path = sorted(_tensor_paths(hub.files, [A]))[-1]
    hub.refuse.add(path)
    into = tmp_path / "data"
    with pytest.raises(FetchError, match=re.escape(path)):
        _fetch(hub, into, A)
    assert not (into / path).exists()
    assert not [p for p in into.rglob("*.incomplete")]
    hub.refuse.clear()
    _fetch(hub, into, A)
    assert (into / path).read_bytes() == hub.files[path]


@pytest.mark.parametrize("how", ["in transit", "in the repository"])
def test_a_corrupted_blob_is_refused_and_removed(hub, tmp_path, how):
    path = sorted(_tensor_paths(hub.files, [A]))[0]
    data = bytearray(hub.files[path])
    data[-1] ^= 0xFF  # the last byte of the tensor: the file stays a valid safetensors file
    if how == "in transit":  # the hub's listing has the right sha256, the bytes are wrong
        hub.serve[path] = bytes(data)
        expected = "differs from the hub's"
    else:  # the repository holds the wrong bytes: only the content hash can tell
        hub.files[path] = bytes(data)
        expected = "content hash .* differs from its name"
    into = tmp_path / "data"
    with pytest.raises(DatasetError, match=re.escape(path) + f".*{expected}.*removed"):
        _fetch(hub, into, A)
    assert not (into / path).exists()
    for fetched in _files(into):  # whatever stays is intact
        if fetched.startswith("blob/"):
            assert (into / fetched).read_bytes() == hub.files[fetched]


def test_a_folder_of_another_commit_is_refused(hub, tmp_path):
    into = tmp_path / "data"
    _fetch(hub, into, A)
    hub.commit = "f" * 40  # main moved on
    with pytest.raises(DatasetError, match=f"FETCHED.json: commit: holds {COMMIT}"):
        _fetch(hub, into, B)


def test_cli_names_an_unknown_definition_with_a_suggestion(hub, tmp_path):
    result = CliRunner().invoke(
        app, ["fetch", "-d", A[:-1], "--into", str(tmp_path / "data"), "--endpoint", hub.url]
    )
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()  # off a terminal: progress lines, then the error
    assert [line for line in lines if line.startswith("error:")] == lines[-1:]
    assert f"did you mean {A}" in lines[-1] and "Traceback" not in result.stderr


def test_cli_fetches_and_says_how_to_run(hub, tmp_path):
    into = tmp_path / "data"
    result = CliRunner().invoke(
        app, ["fetch", "-d", B, "--into", str(into), "--endpoint", hub.url, "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["commit"] == COMMIT and summary["workloads"] == 1
    assert summary["next"] == f"inference-kernels run --dataset {into} -d {B} --suite dev"


def test_cli_unreachable_hub_is_one_line(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = CliRunner().invoke(
        app, ["fetch", "--into", str(tmp_path / "data"), "--endpoint", f"http://127.0.0.1:{port}"]
    )
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "cannot reach" in result.stderr
