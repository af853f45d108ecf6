"""Deterministic, constraint-honouring stand-in inputs, one generator per definition family.

``generate`` returns every input of a workload, generated on the CPU from streams
seeded by the workload uuid and the input name (a model parameter's: by the definition);
the caller keeps those whose descriptor is ``random``. Every result that uses them is
labelled a stand-in.
"""

from __future__ import annotations

from collections.abc import Callable

from ...schema import CaptureRecord, Definition, Workload
from . import dense, gdn, generic, mla, moe, qsa
from .context import StandinContext, parameter_on
from .streams import STANDIN_VERSION

Generator = Callable[[StandinContext], dict[str, object]]

# Definition-name prefix -> generator. The first match wins.
GENERATORS: list[tuple[str, Generator]] = [
    ("dense_gemm_bf16_nt_", dense.gemm),
    ("noncausal_dense_attention_", dense.attention),
    ("prefix_cached_block_causal_h32_d128_prefix0", dense.prefix0),
    ("prefix_cached_block_causal_", dense.attention),
    ("neighborhood_attention_3d_", dense.neighborhood),
    ("gdn_decode_", gdn.decode),
    ("gdn_prefill_", gdn.prefill),
    ("grouped_gemm_fp8_fp4_", moe.grouped_gemm),
    ("moe_router_gemm_topk_", moe.router),
    ("sparse_mla_prefill_", mla.sparse_prefill),
    ("mixed_mla_decode_", mla.mixed_decode),
    ("qsa_index_topk_decode_", qsa.index),
    ("qsa_sparse_gqa_decode_", qsa.sparse_gqa),
]


# The generators whose stand-ins include a model parameter (``StandinContext.parameter``):
# kept by the process that made them, with a copy on each device (``parameter_on``), so
# only that process should make them (judge/prefetch.py leaves these to the referee).
MODEL_PARAMETERS = {"moe.grouped_gemm"}


def generator_for(definition: Definition) -> tuple[str, Generator]:
    """The generator's label (``module.function``) and the function itself."""
    for prefix, function in GENERATORS:
        if definition.name.startswith(prefix):
            return f"{function.__module__.rsplit('.', 1)[-1]}.{function.__name__}", function
    return "generic.generic", generic.generic


def generate(
    definition: Definition, workload: Workload, capture: CaptureRecord | None = None
) -> tuple[str, dict[str, object]]:
    label, function = generator_for(definition)
    return label, function(StandinContext(definition, workload, capture))


__all__ = ["MODEL_PARAMETERS", "STANDIN_VERSION", "generate", "generator_for", "parameter_on"]
