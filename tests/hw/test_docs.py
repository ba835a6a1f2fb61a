"""The examples in the hw and cost docstrings run and print what they say."""
import doctest
import importlib

import pytest

MODULES = ["cherenkov.hw", "cherenkov.hw.spec", "cherenkov.hw.catalog", "cherenkov.cost",
           "cherenkov.cost.record"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
