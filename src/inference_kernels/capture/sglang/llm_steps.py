"""Step tracking shared by the LLM hook sets: wraps a model's forward to count prefill
and decode steps and expose the batch state to the hooks below it."""

from __future__ import annotations

from ._runtime import Patches, bind, track_forward


def track_steps(patches: Patches, context, model_class) -> None:
    """Wrap the model's forward: count prefill / decode steps and expose the batch state."""

    def state_of(original, model, args, kwargs) -> dict | None:
        batch = bind(original, (model, *args), kwargs).get("forward_batch")
        if batch is None:
            return None
        mode = "decode" if batch.forward_mode.is_decode() else "prefill"
        lengths = batch.seq_lens.tolist()
        return {
            "step": patches.next_step(mode),
            "scheduler_mode": mode,
            "scheduler_sequence_lengths": lengths,
            "tokens": getattr(batch, "extend_num_tokens", None) or len(lengths),
            "prefix_lengths": getattr(batch, "extend_prefix_lens_cpu", None),
        }

    track_forward(patches, context, model_class, state_of)
