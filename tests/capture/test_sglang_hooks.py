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
