"""The GDN prefill reference of a0b58ce against the one before it (old_reference.py, from
f519ece) on a CUDA device: five workloads (the three largest, the longest single sequence,
the smallest), the largest differences of their outputs and the seconds of one call each.
From the repository root:

    PYTHONPATH=src python3 docs/measurements/gdn-reference/check.py   # also $OUT/gdn_check.json
"""

import json
import os
import time
import types
from pathlib import Path

import torch

from inference_kernels.dataset.layout import load_dataset
from inference_kernels.materialize.inputs import materialize
from inference_kernels.materialize.references import full_fp32

NAME = "gdn_prefill_qk4_v8_d128_k_last"
HERE = Path(__file__).parent


def compiled(source: str):
    module = types.ModuleType("reference")
    exec(source, module.__dict__)
    return module.run


def timed(function, values) -> tuple[float, tuple]:
    function(*values)  # warm
    torch.cuda.synchronize()
    began = time.perf_counter()
    result = function(*values)
    torch.cuda.synchronize()
    return round(time.perf_counter() - began, 4), result


def main() -> None:
    dataset = load_dataset(Path("dataset"))
    definition = dataset.definitions[NAME]
    old = compiled((HERE / "old_reference.py").read_text())
    new = compiled(definition.reference)
    ordered = sorted(dataset.workloads[NAME], key=lambda w: tuple(w.axes.values()))
    single = [w for w in ordered if w.axes["num_seqs"] == 1]
    rows = []
    for workload in ordered[-3:] + single[-1:] + ordered[:1]:
        made = materialize(definition, workload, data_root=Path("dataset"), device="cuda")
        with full_fp32():
            old_s, (old_out, old_state) = timed(old, made.values)
            new_s, (new_out, new_state) = timed(new, made.values)
        row = {
            "axes": workload.axes,
            "old": old_s,
            "new": new_s,
            "out_max_abs": (old_out.float() - new_out.float()).abs().max().item(),
            "out_differs": int((old_out != new_out).sum()),
            "out_elems": old_out.numel(),
            "state_max_abs": (old_state - new_state).abs().max().item(),
            "state_max": old_state.abs().max().item(),
        }
        print(json.dumps(row))
        rows.append(row)
    Path(os.environ.get("OUT", "/tmp"), "gdn_check.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
