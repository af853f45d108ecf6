"""SGLang workload capture: hook sets per model, and the pure adapter steps they use.

SGLang (and its CUDA kernels) cannot run in this environment: the hooks are not exercised
here, and each install function raises ``SGLangUnavailableError`` (an ``ImportError``) when
SGLang cannot be imported. The adapters (``adapters.py``, ``scales.py``) are unit-tested.
Each install function takes a capture writer and returns the ``Patches`` it applied
(``restore()`` undoes them, ``reset_steps()`` starts step counting over for a new request).
"""

from ._runtime import Patches, SGLangUnavailableError
from .deepseek import install_deepseek
from .ltx import install_ltx
from .qwen_image import install_qwen_image
from .qwen_next import install_qwen_next

HOOK_SETS = {
    "qwen-image": install_qwen_image,
    "ltx": install_ltx,
    "qwen-next": install_qwen_next,
    "deepseek": install_deepseek,
}

__all__ = [
    "HOOK_SETS",
    "Patches",
    "SGLangUnavailableError",
    "install_deepseek",
    "install_ltx",
    "install_qwen_image",
    "install_qwen_next",
]
