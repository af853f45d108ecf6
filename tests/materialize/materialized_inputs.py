"""The inputs of a workload of a dataset, materialized as the judge would (with its
capture, where it has one): shared by the first suite's pass and the stand-in tests."""

from inference_kernels.materialize.inputs import materialize


def made(dataset, definition, workload):
    return materialize(
        definition, workload, data_root=dataset.root, capture=dataset.captures.get(workload.uuid)
    )
