#!/usr/bin/env bash
# The whole suite in one pytest run (what `make test` and CI run): installs the pinned real agent CLIs
# for the cli tier (each runs against a local stub of its vendor's API), builds (cached) and starts the
# real test cluster, builds every image (`make images`), runs every tier and e2e/ against the cluster,
# and stops the cluster again if this script started it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/phases.sh
source tests/lib/phases.sh
state="${HARNESS_CLUSTER_STATE:-/var/lib/harness-operator-cluster}"
bin="${HARNESS_CLUSTER_CACHE:-/var/cache/harness-operator/cluster}/bin"

cli_bin="$(phase cli-tools bash tests/cli-tools.sh claude codex gemini qwen opencode pi copilot aider claude-acp codex-acp | tail -n 1)"
export PATH="$cli_bin:$PATH"

was_running=0
if [[ -x $bin/kubectl && -f $state/admin.kubeconfig ]] &&
	"$bin/kubectl" --kubeconfig "$state/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1; then
	was_running=1
fi
start=$SECONDS
if ((!was_running)); then
	tests/cluster/down --purge >&2 || true # a cluster this script starts starts empty
fi
kubeconfig_line="$(phase cluster tests/cluster/up | tail -n 1)"
echo "run-all: cluster ready in $((SECONDS - start))s" >&2
export "${kubeconfig_line?}"
if ((!was_running)); then
	trap 'tests/cluster/down >&2 || true' EXIT
fi
# What a user installs: every image from sandbox-image/Dockerfile, tagged as the chart's defaults and
# loaded onto the node (e2e/ runs them); then the integration tests' fake-agent image.
phase images make images >&2
phase test-image sandbox-image/build --test --only test >&2

phase pytest .venv/bin/python -m pytest -q --durations=15
