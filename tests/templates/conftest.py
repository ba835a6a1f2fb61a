"""CPU tests for cherenkov.templates: kernels run in Triton's interpreter, shapes stay tiny.

Each test writes template sources and the autotune table under a fresh cache directory."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHERENKOV_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(0)
