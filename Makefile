# Two commands on a fresh machine: `make serve` runs the service, `make test` runs the tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test lint install

$(BIN)/margin: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

install: $(BIN)/margin

serve: install
	$(BIN)/margin serve --demo $(ARGS)

lint: install
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest $(ARGS)
