import os
import shutil
import tempfile
from pathlib import Path

import pytest

BUNDLED = Path(__file__).resolve().parents[1] / "dataset"
# The judge's signing key lives in a folder of the test session, not the user's config
# (subprocesses of the tests inherit it).
os.environ["INFERENCE_KERNELS_CONFIG"] = tempfile.mkdtemp(prefix="ik-config-")


@pytest.fixture(scope="session")
def bundled():
    from inference_kernels.dataset.layout import load_dataset

    return load_dataset(BUNDLED)


@pytest.fixture
def dataset_copy(tmp_path):
    """A private copy of the bundled dataset (metadata and its 4 MB of captured blobs)."""
    target = tmp_path / "dataset"
    shutil.copytree(BUNDLED, target)
    return target
