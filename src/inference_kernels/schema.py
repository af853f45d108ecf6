"""Pydantic models of every file in a dataset: the one place that knows field names.

The layout is the FlashInfer Trace layout. Our files are strict: an unknown key is an
error. Keys that flashinfer-bench's own trace tree uses are part of the schema, so a
peer dataset loads; the loader (``dataset.layout``) reports anything else without
crashing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from .dtypes import TORCH_DTYPES
from .statuses import Status


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _known_dtype(name: str) -> str:
    if name not in TORCH_DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(TORCH_DTYPES)}")
    return name


DType = Annotated[str, AfterValidator(_known_dtype)]


# ----------------------------------------------------------------------------- definition


class ConstAxis(Strict):
    type: Literal["const"]
    value: int
    description: str | None = None


class VarAxis(Strict):
    type: Literal["var"]
    description: str | None = None


Axis = Annotated[ConstAxis | VarAxis, Field(discriminator="type")]


class TensorSpec(Strict):
    """An input or output. ``shape`` lists axis names; ``None`` means a Python scalar."""

    shape: list[str] | None
    dtype: DType
    description: str | None = None
    optional: bool = False


class Definition(Strict):
    name: str
    op_type: str
    description: str | None = None
    tags: list[str] = []
    axes: dict[str, Axis]
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    constraints: list[str] = []
    reference: str

    @model_validator(mode="after")
    def _shapes_use_declared_axes(self) -> Definition:
        shared = set(self.inputs) & set(self.outputs)
        if shared:
            raise ValueError(f"names used as both input and output: {sorted(shared)}")
        for group in ("inputs", "outputs"):
            for name, spec in getattr(self, group).items():
                for axis in spec.shape or []:
                    if axis not in self.axes:
                        raise ValueError(f"{group}.{name}.shape names undeclared axis {axis!r}")
        return self

    def const_axes(self) -> dict[str, int]:
        return {k: a.value for k, a in self.axes.items() if isinstance(a, ConstAxis)}

    def var_axes(self) -> list[str]:
        return [k for k, a in self.axes.items() if isinstance(a, VarAxis)]


# ----------------------------------------------------------------------------- workload


class RandomInput(Strict):
    type: Literal["random"]


class ScalarInput(Strict):
    type: Literal["scalar"]
    value: int | float | bool | None


class SafetensorsInput(Strict):
    type: Literal["safetensors"]
    path: str
    tensor_key: str


InputDescriptor = Annotated[
    RandomInput | ScalarInput | SafetensorsInput, Field(discriminator="type")
]


class Workload(Strict):
    uuid: str
    axes: dict[str, int]
    inputs: dict[str, InputDescriptor]


class TraceLine(Strict):
    """One line of ``workloads/<op_type>/<definition>.jsonl``.

    ``solution`` and ``evaluation`` are null in a workload file; result traces written
    by flashinfer-bench fill them, and we keep what they hold verbatim.
    """

    definition: str
    workload: Workload
    solution: str | None = None
    evaluation: dict[str, Any] | None = None


# ----------------------------------------------------------------------------- solution


class SourceFile(Strict):
    path: str = Field(min_length=1)
    content: str

    @model_validator(mode="after")
    def _relative_inside(self) -> SourceFile:
        parts = self.path.replace("\\", "/").split("/")
        if self.path.startswith(("/", "\\")) or ".." in parts:
            raise ValueError(f"source path {self.path!r} must be relative and stay inside")
        return self


class BuildSpec(Strict):
    language: Literal["python", "triton", "cpp", "cuda", "tilelang"]
    target_hardware: list[str]
    entry_point: str
    dependencies: list[str] = []
    # flashinfer-bench's default: outputs are passed as trailing arguments.
    destination_passing_style: bool = True
    binding: Literal["tvm-ffi", "torch"] | None = None

    @model_validator(mode="after")
    def _entry_point_shape(self) -> BuildSpec:
        file, _, symbol = self.entry_point.partition("::")
        if not file or not symbol:
            raise ValueError(f"entry_point {self.entry_point!r} is not 'file.py::function'")
        return self


class Solution(Strict):
    name: str
    definition: str
    author: str
    description: str | None = None
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)

    @model_validator(mode="after")
    def _entry_file_is_a_source(self) -> Solution:
        paths = [source.path for source in self.sources]
        if len(set(paths)) != len(paths):
            raise ValueError("duplicate source paths")
        entry_file = self.spec.entry_point.partition("::")[0]
        if entry_file not in paths:
            raise ValueError(f"entry point file {entry_file!r} is not among the sources")
        return self


# ----------------------------------------------------------------------------- task


class Ambiguity(Strict):
    """Rows of some outputs that no kernel can be held to: a top-k selection whose k-th and
    next scores lie within the tolerance of each other (a different FP32 summation order,
    which the definition allows, may pick either). ``function`` is a function of the
    definition's reference source, called as the reference is, with the inputs and then
    ``atol`` and ``rtol``; it returns a bool per row (the outputs' first dimension). Those
    rows of ``outputs`` are left out of the element-wise comparison, and each verdict counts
    them. ``accept`` names a second function of the reference source, called with the
    inputs, then the produced ``outputs`` (in that order), then ``rows`` (the marked rows:
    only those need an answer), ``atol`` and ``rtol``; it returns a bool per row: whether the
    produced row is one the definition allows (a top-k that some allowed summation order
    selects, with its values). A marked row it does not accept fails the comparison;
    without ``accept``, marked rows go unchecked."""

    function: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    outputs: list[str] = Field(min_length=1)
    accept: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class Tolerance(Strict):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    comparison: Literal["absolute_or_relative"] | None = None
    required_matched_ratio: float | None = Field(default=None, gt=0, le=1)
    ambiguity: Ambiguity | None = None


class Timing(Strict):
    warmup: int = Field(ge=0)
    iters: int = Field(ge=1)
    trials: int = Field(ge=1)


class Task(Strict):
    """How a candidate for one definition is judged: tolerance, dev set, timing, baseline."""

    definition: str
    description: str | None = None
    workloads: list[str]
    baseline: str | None = None
    tolerance: Tolerance
    dev: list[str] = Field(max_length=10)
    timing: Timing
    sources: list[str] = []


class Roofline(Strict):
    """The least work a definition's workload needs (``dataset/rooflines.py``): FLOPs and
    bytes moved as expressions over its axes and, for sparse and paged definitions, its
    inputs' values (the constraint language, ``dataset/constraints.py``), with named steps
    in ``let`` evaluated in order. ``bytes`` left out: every input read once and every
    output written once, from the definition's shapes."""

    definition: str
    math: Literal["bf16", "fp8", "fp8xfp4", "fp32"]  # the peak its FLOPs are held to
    let: dict[str, str] = {}
    flops: str
    bytes: str | None = None
    note: str | None = None


class Hardware(Strict):
    """A device's measured peaks (``benchmarks/peaks.py --write``), what a workload's least
    work is held to: TFLOP/s per ``Roofline.math``, memory bandwidth, one empty kernel in a
    CUDA graph, and how they were measured."""

    device: str  # as torch names it, e.g. "NVIDIA H200"
    tflops: dict[Literal["bf16", "fp8", "fp8xfp4", "fp32"], Annotated[float, Field(gt=0)]]
    memory_tb_s: float = Field(gt=0)
    empty_kernel_us: float = Field(gt=0)
    provenance: dict[str, Any]  # command, date, torch, CUDA, clocks, method, sizes


class Versus(Strict):
    """The preferred solution against another measured one: paired speedup (their time over
    its time), the 95% interval and the verdict (``report/compare.py``)."""

    solution: str
    speedup: float | None
    interval: list[float] | None
    verdict: str | None


class PreferredChoice(Strict):
    """A definition's preferred solution on one device, and what it was held to."""

    definition: str
    solution: str
    time_us: float = Field(gt=0)
    workloads: int = Field(ge=1)
    speedup_over_baseline: float | None
    speedup_interval: list[float] | None
    inputs: str  # the inputs' origins, e.g. "stand-in" or "captured, stand-in"
    scope: str
    versus: list[Versus] = []


class Undecided(Strict):
    definition: str
    reason: str


class Preferred(Strict):
    """``preferred/<device>.json``: one measured choice per definition on one GPU (the
    ``preferred`` command over a results file), and the run it came from."""

    written_at: str
    device: str | None  # the GPU's name as torch gives it; None: the rows named none, or two
    source: dict[str, Any] = {}  # suite, regime, GPUs, versions, the judge's hash
    definitions: list[PreferredChoice]
    undecided: list[Undecided] = []


# ----------------------------------------------------------------------------- capture


class CaptureRecord(BaseModel):
    """A line of ``captures.jsonl``: provenance of one workload.

    uuid, definition, axes and validation are required; every other field is kept
    verbatim (captures record whatever their engine and adapters need).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    uuid: str
    definition: str
    axes: dict[str, int]
    validation: dict[str, Any]


# ----------------------------------------------------------------------------- results


class _Row(BaseModel):
    # Rows of older judges carry fields since dropped (timing.copies, eager.suspect): kept
    # as read, so that their reports still compare; what the judge writes now is declared
    # (tests/judge/test_graph_stand_in.py holds it to that).
    model_config = ConfigDict(extra="allow")


class OutsideTime(_Row):
    """The referee's own time of a phase's samples, from outside the sandbox."""

    median_us: float
    samples_us: list[float]
    resolution_us: float  # per call: what the outside check cannot resolve
    tolerance: float


class PhaseClocks(_Row):
    """NVML readings right after each sample (judge/clocks.py)."""

    sm_mhz: list[int]
    mem_mhz: list[int]
    power_w: list[float]
    median_sm_mhz: float
    median_power_w: float
    throttle_reasons: list[str]
    median_cycles: int  # per call: median time x median SM clock


class PhaseTiming(_Row):
    """One timed phase (eager, prepared launch, or graph replay) of a case. Times in
    microseconds per call. Fields added later are optional: older rows still read."""

    method: str  # the clock: cuda-events, cuda-graph, cpu-wall-clock (+ ", cold L2")
    median_us: float = Field(gt=0)
    median_interval_us: tuple[float, float] | None = None  # 95%, order statistics
    median_interval_coverage: float | None = None
    min_us: float
    max_us: float
    stdev_us: float
    calls_per_sample: int = Field(ge=1)
    samples_us: list[float]
    host_median_us: float | None = None
    launch: str | None = None  # a graph's: what it replays ("run" or "prepared")
    outside: OutsideTime | None = None
    rounds: int | None = None  # samples taken (adaptive repetition)
    stopped: Literal["converged", "time_cap", "max_rounds"] | None = None
    median_half_width: float | None = None  # of the 95% interval, relative to the median
    resampled: bool | None = None  # sampled again with more calls, alone
    clocks: PhaseClocks | None = None
    # rounds whose sample did not count: the GPU was busy after the one before; and samples
    # (positions in samples_us) the GPU was busy after, which count as the phase's slowest
    # (judge/sampling.py PROBE_RETAKES)
    not_counted: list[int] | None = None
    ranked_slowest: list[int] | None = None
    # samples (positions) whose referee time was over the outside check's limit (on a GPU
    # by over 5 ms beyond the worker's time), ranked slowest too (judge/sampling.py, late
    # samples)
    late: list[int] | None = None
    # the outside check cannot resolve the time (its resolution_us over its median): shown,
    # never ranked on (judge/outside.py RESOLVED_WITHIN)
    unresolved: bool | None = None


class PhaseError(_Row):
    error: str  # why the phase has no time (a graph that cannot be captured)


class KernelTimes(_Row):
    """The device's own durations of a case's kernels over one eager sample (CUPTI, in
    the worker; ``run --kernel-times`` on CUDA): comparable with Nsight Compute's kernel
    times, as the judged times (which include the gap between one call's kernels and the
    next's) are not. In the burst regime each call runs alone after ``rest_ms`` of device
    rest, as ncu runs a kernel; in the sustained regime back to back. The worker's report:
    shown, never ranked on."""

    us: float | None = None  # kernels, per call
    copies_us: float | None = None  # memory copies and sets, per call
    launches: float | None = None  # kernels per call
    top: dict[str, float] | None = None  # the heaviest kernels by name, us per call
    calls: int | None = None
    rest_ms: float | None = None  # device rest before each call (0: back to back)
    error: str | None = None  # why there are none (a profiler that would not start)


class SetsUsed(_Row):
    count: int = Field(ge=1)  # input sets the samples rotate through
    integers_shared: bool  # integer inputs shared by all sets (to fit in memory)


REGIMES = ("sustained", "burst")
# What a case times (``run --methods``): plain calls, the solution's prepared launches (when
# it has ``prepare``), a CUDA graph of its calls. An audit times only the graph.
METHODS = ("eager", "prepared", "graph")
Regime = Literal[REGIMES]  # type: ignore[valid-type]


class TimingRecord(_Row):
    """The timing part of a case row."""

    regime: Regime | None = None  # None: a row from before regimes
    schedule: Timing | None = None  # warmup, calls per sample, trials (the time budget)
    # least ms from one sample's end to the next's start (a GPU's; None: the CPU, or a row
    # from before the gap was the judge's constant)
    sample_gap_ms: float | None = Field(default=None, ge=0)
    eager: PhaseTiming | None = None
    prepared: PhaseTiming | PhaseError | None = None
    graph: PhaseTiming | PhaseError | None = None
    sets: SetsUsed | None = None
    kernels: KernelTimes | None = None
    busy_after: list[str] | None = None  # samples the GPU was still busy after, and how long
    error: str | None = None  # rows from before the timing_error status


class LeastWork(_Row):
    """The workload's least work by its definition's roofline (``dataset/rooflines.py``),
    counted by the referee from the pristine inputs, or why it could not be."""

    flops: int | None = None
    bytes: int | None = None
    math: str | None = None  # the peak the FLOPs are held to (Roofline.math)
    error: str | None = None


class CaseRow(BaseModel):
    """One line of a results file: a (solution, workload) case and its verdict.

    ``status`` is ``passed`` or a failure status (see ``judge.statuses``). Timings are
    in microseconds per call; ``inputs`` says whether the case ran on captured
    tensors or on stand-ins.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    type: Literal["case"] = "case"
    definition: str
    solution: str
    uuid: str | None = None  # None: a solution that could not be loaded (no workload ran)
    status: Status
    error: str | None = None
    axes: dict[str, int] = {}
    device: str | None = None
    inputs: str | None = None
    generator: str | None = None
    outputs: dict[str, dict[str, Any]] = {}
    timing: TimingRecord = TimingRecord()
    work: LeastWork | None = None  # None: the dataset has no roofline for the definition
    hashes: dict[str, str] = {}
    seconds: float = 0.0
    # Where ``seconds`` went (judge/stopwatch.py): referee (its start), inputs and reference
    # (the workload's, on its first row), worker, call, device_load, sizing, setup, refresh,
    # samples, compare, checks, other.
    breakdown: dict[str, float] = {}
    # why the worker was ended after the case (it held more device memory than a worker
    # may keep between its cases: judge/device_memory.py), if it was
    retired: str | None = None
    mac: str | None = None  # HMAC of the row with the judge's key (signing.py)


class EnvironmentRow(BaseModel):
    """The first line of a results file (and of each resumed run)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["environment"] = "environment"
    started_at: str
    devices: list[dict[str, Any]]
    versions: dict[str, str]
