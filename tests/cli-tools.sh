#!/usr/bin/env bash
# Install the pinned real agent CLIs that the CLI tests and fixture captures use.
#
#   PATH="$(bash tests/cli-tools.sh | tail -n1):$PATH"            # claude only (the default)
#   bash tests/cli-tools.sh claude codex gemini qwen opencode pi   # more, by short name
#   bash tests/cli-tools.sh claude-acp codex-acp                    # Zed's ACP adapters
#   HARNESS_CLI_TOOLS="claude codex" bash tests/cli-tools.sh       # same, from the environment
#
# Installs into $HARNESS_CLI_PREFIX (default ${XDG_CACHE_HOME:-$HOME/.cache}/harness-operator/cli-tools):
# npm packages under <prefix>/node_modules, aider in a venv <prefix>/venv; every executable is
# linked into <prefix>/bin. A tool already installed at its pinned version is skipped, so the
# script is idempotent. Progress goes to stderr; the last line on stdout is <prefix>/bin.
# Needs node+npm for the npm tools and python3 (>=3.10) for aider. Reaches only the package
# registries, through npm and pip.
set -euo pipefail

PREFIX="${HARNESS_CLI_PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/harness-operator/cli-tools}"
BIN="$PREFIX/bin"

# short name -> "package version executable", from sandbox-image/agents (the images' pins, verified in
# docs/cli-facts.md): the host's CLIs are the versions the images ship.
declare -A NPM_TOOLS=()
AIDER_VERSION=""
while read -r name kind package version exe; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  if [[ "$kind" == npm ]]; then NPM_TOOLS[$name]="$package $version $exe"; fi
  if [[ "$name" == aider ]]; then AIDER_VERSION="$version"; fi
done <"$(dirname "${BASH_SOURCE[0]}")/../sandbox-image/agents"

log() { printf 'cli-tools: %s\n' "$*" >&2; }

installed_npm_version() {  # $1 = package name
  local pj="$PREFIX/node_modules/$1/package.json"
  [[ -f "$pj" ]] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version || "")' "$pj" 2>/dev/null || true
}

link_exe() {  # $1 = target path, $2 = name in $BIN
  [[ -e "$1" ]] || { log "missing executable $1"; return 1; }
  ln -sfn "$1" "$BIN/$2"
}

install_npm() {  # $1 = short name
  local spec pkg ver exe have
  spec="${NPM_TOOLS[$1]}"
  read -r pkg ver exe <<<"$spec"
  have="$(installed_npm_version "$pkg")"
  if [[ "$have" == "$ver" ]]; then
    log "$pkg@$ver already installed"
  else
    command -v npm >/dev/null || { log "npm not found; cannot install $pkg"; return 1; }
    log "installing $pkg@$ver (had: ${have:-none})"
    npm install --prefix "$PREFIX" --save-exact --no-audit --no-fund --loglevel=error "$pkg@$ver" >&2
  fi
  link_exe "$PREFIX/node_modules/.bin/$exe" "$exe"
  # Claude Code's npm package copies its native binary in a postinstall step; if install scripts
  # were skipped (npm --ignore-scripts, or an allowScripts policy), run that step now.
  if [[ "$1" == claude ]] && ! "$BIN/claude" --version >/dev/null 2>&1; then
    log "claude placeholder found; running its install.cjs"
    (cd "$PREFIX/node_modules/@anthropic-ai/claude-code" && node install.cjs >&2)
  fi
  local got
  got="$("$BIN/$exe" --version </dev/null 2>&1 | head -n1 || true)"
  # ACP adapters speak only the protocol (claude's prints nothing for --version, codex's refuses it):
  # their package says the version.
  [[ "$1" != *-acp ]] || got="$(installed_npm_version "$pkg")"
  [[ "$got" == *"$ver"* ]] || { log "$exe --version printed '$got', expected $ver"; return 1; }
}

install_aider() {
  local venv="$PREFIX/venv" have=""
  if [[ -x "$venv/bin/aider" ]]; then
    have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("aider-chat"))' 2>/dev/null || true)"
  fi
  if [[ "$have" == "$AIDER_VERSION" ]]; then
    log "aider-chat==$AIDER_VERSION already installed"
  else
    log "installing aider-chat==$AIDER_VERSION into $venv (had: ${have:-none})"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "aider-chat==$AIDER_VERSION" >&2
  fi
  link_exe "$venv/bin/aider" aider
}

main() {
  local tools=("$@")
  if [[ ${#tools[@]} -eq 0 ]]; then
    read -r -a tools <<<"${HARNESS_CLI_TOOLS:-claude}"
  fi
  mkdir -p "$BIN"
  local t
  for t in "${tools[@]}"; do
    if [[ "$t" == aider ]]; then
      install_aider
    elif [[ -n "${NPM_TOOLS[$t]:-}" ]]; then
      install_npm "$t"
    else
      log "unknown tool '$t' (known: ${!NPM_TOOLS[*]} aider)"
      return 2
    fi
  done
  echo "$BIN"
}

main "$@"
