# corral's entry points; CI and people run the same targets.
# as root, a Python every user can run (their jobs run the venv's commands): scripts/shared_python.py
PYTHON ?= $(shell python3 scripts/shared_python.py || echo python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STATE  ?= $(CURDIR)/.state/demo

.PHONY: venv proto proto-check docs lint typecheck test test-fast demo down bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)  # an existing venv keeps its Python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/corral launchers  # the Slurm commands as python -IS scripts over pip's
	touch $@

venv: $(VENV)/.installed

proto: venv  ## regenerate src/corral/wire from proto/
	$(PY) scripts/genproto.py

proto-check: venv
	$(PY) scripts/genproto.py --check

docs: venv  ## rewrite docs/cli.md's sbatch option table from src/client/jobopts.py
	$(PY) scripts/gendocs.py

lint: venv
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

typecheck: venv
	$(BIN)/mypy

test: venv proto-check lint typecheck  ## everything CI runs
	$(BIN)/pytest -q -p no:cacheprovider

test-fast: venv
	$(BIN)/pytest -q tests/unit

demo: venv  ## a local 2-node cluster running a real sample job
	$(BIN)/python scripts/demo.py --state-dir $(STATE)

down:
	$(BIN)/corral down --state-dir $(STATE)

bench: venv
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .state .mypy_cache .ruff_cache .pytest_cache
