"""The acceptance run on the CPU: every definition's smallest workload, end to end (run in
the first suite's pass, conftest.py)."""


def test_smallest_workload_of_every_definition_runs_its_reference_on_the_cpu(first_suite):
    assert len(first_suite) == 25
    for case in first_suite:
        definition, run = case.definition, case.reference
        assert run.status == "passed", (definition.name, run.problems)
        captured = definition.name.startswith("dense_gemm_bf16_nt_bias")
        captured = captured or definition.name == "noncausal_dense_attention_h12_d32"
        assert run.inputs == ("captured" if captured else "stand-in")
        assert [o["name"] for o in run.outputs] == list(definition.outputs)
