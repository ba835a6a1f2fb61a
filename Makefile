# Two commands set everything up on a bare machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-full clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/cherenkov demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

# Everything, including the full OpInfo sweep (slow).
test-full: $(STAMP)
	CHERENKOV_SLOW_TESTS=1 $(PY) -m pytest -q -n 2 tests

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
