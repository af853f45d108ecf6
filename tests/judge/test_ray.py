"""``run --ray``: the cases of a run as Ray tasks on a local cluster of two CPU-only nodes
(the head takes no task). Every case appears exactly once, signed by the driver, and both
nodes judge; a node killed in the middle of the run costs nothing but time: its tasks run
again on the other node, and no case is written twice."""

import logging
from collections import Counter
from pathlib import Path

import pytest
import ray
from ray.cluster_utils import Cluster

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.dataset.selection import select
from inference_kernels.judge import ray_backend
from inference_kernels.judge.session import Request, judge
from inference_kernels.report.rows import read_rows

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = "gdn_decode_qk4_v8_d128_k_last"


@pytest.fixture
def cluster():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def _request(tmp_path, address, **extra):
    return Request(
        definitions=[DEFINITION],
        suite="dev",
        report=tmp_path / "results.jsonl",
        cache=tmp_path / "cache",
        validation_only=True,
        timeout=60,
        ray=address,
        **extra,
    )


def _nodes(caplog) -> list[str]:
    """The node of each finished task, in the order they came back."""
    return [r.node for r in caplog.records if r.name == ray_backend.__name__ and hasattr(r, "node")]


def _check_report(tmp_path, dataset, rows, address):
    """Each dev workload's case exactly once, passed, in the signed report."""
    workloads = [w.uuid for _, w in select(dataset, [DEFINITION], "dev")]
    assert len(workloads) == 10
    signed, dropped = read_rows(tmp_path / "results.jsonl")  # only rows whose MAC verifies
    assert dropped == 0
    assert signed == rows
    cases = [row for row in signed if row["type"] == "case"]
    assert Counter(row["uuid"] for row in cases) == Counter(workloads)  # each once
    assert {row["status"] for row in cases} == {"passed"}, [row.get("error") for row in cases]
    assert all(row["mac"] for row in signed)
    environment = signed[0]
    assert environment["type"] == "environment"
    assert environment["devices"] == [{"device": "cpu", "ray": address}]
    return workloads


def test_two_nodes_judge_every_case_exactly_once(tmp_path, cluster, caplog):
    caplog.set_level(logging.INFO, logger=ray_backend.__name__)
    dataset = load_dataset(ROOT / "dataset")
    rows = judge(dataset, _request(tmp_path, cluster.address))
    workloads = _check_report(tmp_path, dataset, rows, cluster.address)
    workers = {node.node_id for node in cluster.worker_nodes}
    nodes = Counter(_nodes(caplog))
    assert set(nodes) == workers and len(workers) == 2  # both nodes judged, the head none
    assert sum(nodes.values()) == len(workloads)
    logs = {p.parent.parent.name for p in (tmp_path / "cache").glob("runs/*/ray/*/logs/*.log")}
    assert {name.rsplit("-", 1)[0] for name in logs} == {node[:12] for node in workers}

    # --resume (the cluster may have been restarted: the driver reads the report): a run
    # cut after 4 cases judges the 6 others, and each case is still in the report once
    report = tmp_path / "results.jsonl"
    report.write_text("".join(line + "\n" for line in report.read_text().splitlines()[:5]))
    again = judge(dataset, _request(tmp_path, cluster.address, resume=True))
    cases = [row for row in again if row["type"] == "case"]
    assert Counter(row["uuid"] for row in cases) == Counter(workloads)
    assert {row["status"] for row in cases} == {"passed"}
    assert len(_nodes(caplog)) == len(workloads) + 6
    assert read_rows(report) == (again, 0)


def test_a_node_killed_mid_run_costs_no_case(tmp_path, cluster, caplog):
    caplog.set_level(logging.INFO, logger=ray_backend.__name__)
    dataset = load_dataset(ROOT / "dataset")
    killed = []

    def on_row(row):  # the first row is back: kill the node still working on its task
        if not killed:
            done = _nodes(caplog)[0]
            victim = next(n for n in cluster.worker_nodes if n.node_id != done)
            cluster.remove_node(victim)
            killed.append(victim.node_id)

    rows = judge(dataset, _request(tmp_path, cluster.address), on_row=on_row)
    workloads = _check_report(tmp_path, dataset, rows, cluster.address)
    assert killed
    nodes = _nodes(caplog)
    assert len(nodes) == len(workloads)  # each task's rows came back once
    # the killed node's task in flight (unless it had just finished) ran again elsewhere
    assert nodes.count(killed[0]) <= 1


def test_a_task_failed_for_good_fails_its_cases_once(bundled):
    """What the driver writes for a task that Ray gave up on, and for a node that sent a
    row twice, a row of another case, or none for a case: one row per case of the job."""
    from inference_kernels.judge.ray_backend import RETRIES, _rows
    from inference_kernels.judge.scheduler import Job

    definition, workload = select(bundled, [DEFINITION], "dev")[0]
    solutions = [bundled.solutions[bundled.tasks[DEFINITION].baseline]]
    job = Job(definition, workload, bundled.tasks[DEFINITION], solutions)
    failure = f"ray: NodeDiedError: gone (after up to {RETRIES} retries)"
    rows = _rows(job, None, failure, set())
    assert [(r.solution, r.status, r.error) for r in rows] == [
        (s.name, "reference_error", failure) for s in solutions
    ]
    assert all(set(r.hashes) == {"solution", "definition", "task"} for r in rows)
    assert _rows(job, None, failure, {(DEFINITION, solutions[0].name, workload.uuid)}) == []

    passed = rows[0].model_copy(update={"status": "passed", "error": None}).model_dump()
    other = {**passed, "uuid": "another workload"}
    sent = {"node": "n", "rows": [passed, passed, other]}
    assert [(r.uuid, r.status) for r in _rows(job, sent, None, set())] == [
        (workload.uuid, "passed")
    ]
    sent = {"node": "n", "rows": []}
    assert [r.error for r in _rows(job, sent, None, set())] == [
        "ray: the task returned no row for this case"
    ]
