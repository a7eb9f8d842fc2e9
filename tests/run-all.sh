#!/usr/bin/env bash
# The whole suite (what `make test` and CI run): installs the pinned real agent CLIs for the cli tier
# (each runs against a local stub of its vendor's API), builds (cached) and starts the real test cluster,
# builds every image (`make images`), runs every tier and e2e/ against the cluster (the tiers that need
# no cluster in a second pytest beside it), and stops the cluster again if this script started it. The
# Go builds run beside the downloads.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/phases.sh
source tests/lib/phases.sh
state="${HARNESS_CLUSTER_STATE:-/var/lib/harness-operator-cluster}"
bin="${HARNESS_CLUSTER_CACHE:-/var/cache/harness-operator/cluster}/bin"

was_running=0
if [[ -x $bin/kubectl && -f $state/admin.kubeconfig ]] &&
	"$bin/kubectl" --kubeconfig "$state/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1; then
	was_running=1
fi
if ((!was_running)); then
	tests/cluster/down --purge >&2 || true # a cluster this script starts starts empty
fi

# The Go builds (CPU: the cluster's binaries, then the tools tests' helpers) in the background, while the
# CLI tools and the images download (I/O); the cluster then starts from what they cached. Each in its own
# session, so a failure here stops the whole group, the compilers included.
background() { # NAME LOG CMD...: sets bg_pid
	local name=$1 log=$2
	shift 2
	setsid bash -c 'source tests/lib/phases.sh && phase "$@"' _ "$name" "$@" >"$log" 2>&1 &
	bg_pid=$!
}
await() { # PID LOG WHAT
	wait "$1" || { cat "$2" >&2; echo "run-all: $3 failed" >&2; exit 1; }
}
go_log="$(mktemp)"
background go-cluster "$go_log" tests/go-builds cluster
go_builds=$bg_pid
trap 'kill -- -$go_builds 2>/dev/null || true' EXIT

cli_bin="$(phase cli-tools bash tests/cli-tools.sh claude codex gemini qwen opencode pi copilot aider claude-acp codex-acp | tail -n 1)"
export PATH="$cli_bin:$PATH"
# What a user installs: every image from sandbox-image/Dockerfile, tagged as the chart's defaults. Built
# before the cluster runs when this script starts it (loaded below), so the build overlaps the Go builds.
if ((!was_running)); then
	phase images sandbox-image/build --no-load >&2
fi
await "$go_builds" "$go_log" "the cluster's Go builds"
tools_log="$(mktemp)"
background go-tools "$tools_log" tests/go-builds tools # beside the cluster's start
tools_builds=$bg_pid
trap 'kill -- -$tools_builds 2>/dev/null || true' EXIT

start=$SECONDS
kubeconfig_line="$(phase cluster tests/cluster/up | tail -n 1)"
echo "run-all: cluster ready in $((SECONDS - start))s" >&2
export "${kubeconfig_line?}"
if ((!was_running)); then
	trap 'kill -- -$tools_builds 2>/dev/null || true; tests/cluster/down >&2 || true' EXIT
fi
# The images loaded onto the node (e2e/ runs them; a build already done above is Docker's cache), then
# the integration tests' fake-agent image.
phase images-load make images >&2
phase test-image sandbox-image/build --test --only test >&2

await "$tools_builds" "$tools_log" "the tools tests' Go builds"

# Two pytest runs side by side, which together select every test once: the tiers that need no cluster
# (unit, and the agent CLIs against their stubs: CPU) in the background, beside the cluster's tiers, whose
# waits for pods leave the CPU mostly idle. Each has its own temporary directory.
local_log="$(mktemp)"
local_tmp="$(mktemp -d)"
background pytest-local "$local_log" .venv/bin/python -m pytest -q --durations=10 -p no:cacheprovider \
	--basetemp="$local_tmp/pytest" -m "not integration and not e2e and not gotool and not forge and not traces and not release"
local_tests=$bg_pid
if ((was_running)); then
	trap 'kill -- -$local_tests 2>/dev/null || true' EXIT
else
	trap 'kill -- -$local_tests 2>/dev/null || true; tests/cluster/down >&2 || true' EXIT
fi

status=0
phase pytest .venv/bin/python -m pytest -q --durations=15 -m "(integration or e2e or gotool) and not forge and not traces and not release" || status=$?
wait "$local_tests" || status=$?
echo "run-all: the tiers without the cluster (pytest -m 'not integration and not e2e and not gotool and not forge and not traces and not release'):"
cat "$local_log"
rm -rf "$local_tmp"
exit "$status"
