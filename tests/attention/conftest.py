"""CPU tests for cherenkov.attention: kernels run in Triton's interpreter (numpy).

TRITON_INTERPRET must be set before triton is imported anywhere; shapes stay tiny."""
import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
