"""The statuses a case can end with. Everything but PASSED is a failure."""

PASSED = "passed"

# The solution could not be loaded or called as the definition requires.
LOAD_FAILED = "load_failed"
# The solution raised, the worker process died, or it ran past the case timeout.
RUNTIME_ERROR = "runtime_error"
CRASHED = "crashed"
TIMEOUT = "timeout"
# Output checks (acceptance.compare adds shape/dtype/device/type mismatch, nonfinite, mismatch,
# trivial_output and reference_nonfinite).
WRONG_OUTPUT_COUNT = "wrong_output_count"
TYPE_MISMATCH = "type_mismatch"
DEVICE_MISMATCH = "device_mismatch"
OUTPUT_ALIASES_INPUT = "output_aliases_input"
INPUT_MUTATED = "input_mutated"
# Timed calls must return what the checked call returned.
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
