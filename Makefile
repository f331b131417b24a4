# The two commands the README opens with: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench clean

$(VENV)/.installed: requirements.txt requirements-test.txt pyproject.toml
	@echo "Setting up $(VENV): TensorFlow, tensorflow-text, tf-models-official and the test oracles (~3 min)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar off -r requirements-test.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

setup: $(VENV)/.installed

demo: setup
	bash demo.sh

test: setup
	$(PY) -m pytest -q tests

clean:
	rm -rf $(VENV) demo_out
