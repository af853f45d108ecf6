"""Every status a case can end with: one closed vocabulary, used by the acceptance policy,
the judge, the result rows (``schema.CaseRow.status`` accepts nothing else) and the
reports. Everything but PASSED is a failure."""

from typing import Literal

PASSED = "passed"

# The solution could not be loaded or called as the definition requires.
LOAD_FAILED = "load_failed"
# A cpp or cuda solution's sources did not compile (the row holds the compiler's first
# error lines).
COMPILE_ERROR = "compile_error"
# The solution raised, the worker process died, or it ran past the case timeout.
RUNTIME_ERROR = "runtime_error"
CRASHED = "crashed"
TIMEOUT = "timeout"
# Output checks of one output (acceptance.py), in the order they are made.
WRONG_OUTPUT_COUNT = "wrong_output_count"
TYPE_MISMATCH = "type_mismatch"
SHAPE_MISMATCH = "shape_mismatch"
DTYPE_MISMATCH = "dtype_mismatch"
DEVICE_MISMATCH = "device_mismatch"
REFERENCE_NONFINITE = "reference_nonfinite"  # the case cannot be judged
NONFINITE = "nonfinite"
TRIVIAL_OUTPUT = "trivial_output"  # all zeros where the reference is not
MISMATCH = "mismatch"
OUTPUT_ALIASES_INPUT = "output_aliases_input"
INPUT_MUTATED = "input_mutated"
# Timed calls, checked after the fact, must be right too.
TIMED_OUTPUT_MISMATCH = "timed_output_mismatch"
GRAPH_OUTPUT_MISMATCH = "graph_output_mismatch"
# The timed calls raised (the checked call had passed): no timing, no re-verified output.
TIMING_ERROR = "timing_error"
# The time the worker reported is not what the referee saw from outside the sandbox, or
# work was still running when the worker said a sample had ended.
TIMING_SUSPECT = "timing_suspect"
# The worker sent a message outside the protocol (a forged kind, field or status).
PROTOCOL_VIOLATION = "protocol_violation"
# The reference could not produce the expected outputs: the case cannot be judged.
REFERENCE_ERROR = "reference_error"
INPUT_ERROR = "input_error"

ALL = (
    PASSED,
    LOAD_FAILED,
    COMPILE_ERROR,
    RUNTIME_ERROR,
    CRASHED,
    TIMEOUT,
    WRONG_OUTPUT_COUNT,
    TYPE_MISMATCH,
    SHAPE_MISMATCH,
    DTYPE_MISMATCH,
    DEVICE_MISMATCH,
    REFERENCE_NONFINITE,
    NONFINITE,
    TRIVIAL_OUTPUT,
    MISMATCH,
    OUTPUT_ALIASES_INPUT,
    INPUT_MUTATED,
    TIMED_OUTPUT_MISMATCH,
    GRAPH_OUTPUT_MISMATCH,
    TIMING_ERROR,
    TIMING_SUSPECT,
    PROTOCOL_VIOLATION,
    REFERENCE_ERROR,
    INPUT_ERROR,
)
Status = Literal[ALL]  # type: ignore[valid-type]
