# Two commands on a fresh machine: `make serve` runs the service, `make test` runs the tests.
# Both install from the lock files (requirements/*.txt, with hashes): `serve` only what the
# service needs, `test` adds the test tools. Regenerate the locks after changing pyproject.toml:
#   uv pip compile pyproject.toml requirements/build.in --extra service --generate-hashes \
#     --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-header -o requirements/service.txt
#   (the same with --extra test -o requirements/test.txt)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pytest-xdist workers of `make test` (0: one process); tests/conftest.py says which tests share one
TEST_WORKERS ?= 2

.PHONY: serve test lint install install-service

$(VENV)/.service: pyproject.toml requirements/service.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements/service.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@echo "compiling the solver kernels once (about a minute on two cores; later starts load them)"
	$(BIN)/margin warm
	touch $@

$(VENV)/.test: $(VENV)/.service requirements/test.txt
	$(BIN)/pip install -q --require-hashes --no-deps -r requirements/test.txt
	touch $@

install-service: $(VENV)/.service

install: $(VENV)/.test

serve: install-service
	$(BIN)/margin serve --demo $(ARGS)

lint: install
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(ARGS)
