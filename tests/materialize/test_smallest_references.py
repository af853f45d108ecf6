"""The acceptance run on the CPU: every definition's smallest workload, end to end."""

from inference_kernels.dataset.selection import select
from inference_kernels.materialize.reference_runs import run_case


def test_smallest_workload_of_every_definition_runs_its_reference_on_the_cpu(bundled):
    cases = select(bundled, suite="first")
    assert len(cases) == 25
    for definition, workload in cases:
        run = run_case(
            definition,
            workload,
            data_root=bundled.root,
            device="cpu",
            capture=bundled.captures.get(workload.uuid),
        )
        assert run.status == "passed", (definition.name, run.problems)
        captured = definition.name.startswith("dense_gemm_bf16_nt_bias")
        captured = captured or definition.name == "noncausal_dense_attention_h12_d32"
        assert run.inputs == ("captured" if captured else "stand-in")
        assert [o["name"] for o in run.outputs] == list(definition.outputs)
