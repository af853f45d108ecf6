"""The SGLang hook modules import without SGLang and refuse clearly to install without it."""

import sys

import pytest

from inference_kernels.capture import sglang as hooks


class NoWriter:
    def wants(self, name, provenance):  # pragma: no cover - never reached
        raise AssertionError("a hook set installed without SGLang")


def test_hook_sets_name_the_four_models():
    assert set(hooks.HOOK_SETS) == {"qwen-image", "ltx", "qwen-next", "deepseek"}
    assert hooks.HOOK_SETS["deepseek"] is hooks.install_deepseek


@pytest.mark.parametrize("key", ["qwen-image", "ltx", "qwen-next", "deepseek"])
def test_install_without_sglang_raises_import_error(monkeypatch, key):
    monkeypatch.setitem(sys.modules, "sglang", None)  # makes `import sglang` fail
    with pytest.raises(ImportError, match="sglang") as caught:
        hooks.HOOK_SETS[key](NoWriter())
    assert isinstance(caught.value, hooks.SGLangUnavailableError)
    assert key in str(caught.value)


def test_track_forward_exposes_the_step_state_during_forward_only():
    from inference_kernels.capture.sglang._runtime import Patches, new_context, track_forward

    class Model:
        def forward(self, x, tracked=True):
            return (x, context.get())

    context, patches = new_context(), Patches("test")
    track_forward(
        patches,
        context,
        Model,
        lambda original, model, args, kwargs: (
            {"step": patches.next_step("m")} if kwargs.get("tracked", True) else None
        ),
    )
    model = Model()
    assert model.forward(1) == (1, {"step": 0})
    assert model.forward(2) == (2, {"step": 1})
    assert model.forward(3, tracked=False) == (3, None)  # untracked: no state set
    assert context.get() is None and patches.steps == {"m": 2}  # reset after each call
    patches.restore()
    assert model.forward(4) == (4, None)
