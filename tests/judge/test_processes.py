"""The inbox's wait: an answer that overtakes another is kept, not lost."""

import queue

from inference_kernels.judge.processes import Inbox


class _Alive:
    def is_alive(self) -> bool:
        return True


class _Handle:
    process = _Alive()


def test_a_verifier_answer_arriving_before_the_worker_message_is_kept_for_its_wait():
    inbox = Inbox(results=queue.Queue())
    # The verifier's "verified" overtakes the worker's "timed" of the same case.
    inbox.results.put({"op": "verified", "case_id": "cpu#1", "status": "passed"})
    inbox.results.put({"op": "timed", "case_id": "cpu#1", "timing": {}})
    watch = [_Handle()]
    timed = inbox.wait(lambda m: m["case_id"] == "cpu#1" and m["op"] == "timed", 2, watch)
    assert timed["op"] == "timed"
    verified = inbox.wait(lambda m: m["case_id"] == "cpu#1" and m["op"] == "verified", 2, watch)
    assert verified == {"op": "verified", "case_id": "cpu#1", "status": "passed"}
    assert inbox.early == []
    inbox.results.put({"op": "hello"})  # messages of no case are not kept
    assert inbox.wait(lambda m: m["op"] == "loaded", 0.6, watch) == ("timeout", watch[0])
    assert inbox.early == []
