# Shared settings for tests/cluster scripts. Source, don't execute.
# Everything mutable lives OUTSIDE the git clone, so a fresh CI clone in
# another folder on the same machine reuses the build cache and the cluster.
CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HARNESS_CLUSTER_CACHE="${HARNESS_CLUSTER_CACHE:-/var/cache/harness-operator/cluster}"
# `worker`: the second cluster (tests/cluster/worker), a MultiKueue worker. The same scripts run it in its
# own network namespace, with its own state, addresses and cgroup root; they share the build cache.
HARNESS_CLUSTER_ROLE="${HARNESS_CLUSTER_ROLE:-main}"
if [[ $HARNESS_CLUSTER_ROLE == worker ]]; then
	HARNESS_CLUSTER_STATE="${HARNESS_CLUSTER_STATE:-/var/lib/harness-operator-worker}"
else
	HARNESS_CLUSTER_STATE="${HARNESS_CLUSTER_STATE:-/var/lib/harness-operator-cluster}"
fi
export HARNESS_CLUSTER_CACHE HARNESS_CLUSTER_STATE HARNESS_CLUSTER_ROLE

# Pinned versions (the Go module in gomod/ is the source of truth; these are
# the strings stamped into the binaries and shown in docs).
K8S_VERSION=v1.34.4
ETCD_VERSION=v3.6.4
HELM_VERSION=v3.19.5

BIN_DIR="$HARNESS_CLUSTER_CACHE/bin"   # symlink to the current keyed build
LOG_DIR="$HARNESS_CLUSTER_STATE/logs"
RUN_DIR="$HARNESS_CLUSTER_STATE/run"
PKI_DIR="$HARNESS_CLUSTER_STATE/pki"
KUBECONFIG_ADMIN="$HARNESS_CLUSTER_STATE/admin.kubeconfig"
# Well-known pointer to the kubeconfig, independent of the state dir layout.
KUBECONFIG_POINTER="$HARNESS_CLUSTER_STATE/KUBECONFIG"

APISERVER_PORT="${HARNESS_CLUSTER_APISERVER_PORT:-6443}"
ETCD_CLIENT_PORT=23790
ETCD_PEER_PORT=23800
NODE_NAME="${HARNESS_CLUSTER_NODE_NAME:-harness-node}"
CONTAINERD_SOCK="$HARNESS_CLUSTER_STATE/containerd/containerd.sock"
POD_CIDR=10.88.0.0/16
SERVICE_CIDR=10.96.0.0/16
SANDBOX_IMAGE=harness.local/pause:3.10
REGISTRY_ADDR=127.0.0.1:5000   # tests/cluster/registry; containerd pulls from it over plain HTTP
KUBE_ROUTER_VERSION=v2.1.0     # tests/cluster/netpol: the NetworkPolicy enforcer (firewall only)
COREDNS_VERSION=v1.15.0        # tests/cluster/dns: cluster DNS
DNS_SERVICE_IP=10.96.0.10
# "Elsewhere": an address on this machine that is neither the node nor a pod (bridge $ELSEWHERE_LINK,
# created by `up`), so connection tests have a second destination without leaving the machine.
ELSEWHERE_IP=10.87.0.1
ELSEWHERE_LINK=harness-else

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# wait_for SECONDS DESCRIPTION CMD... : poll CMD until it succeeds.
wait_for() {
	local timeout=$1 what=$2; shift 2
	local deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			log "timed out after ${timeout}s waiting for $what"
			return 1
		fi
		sleep 0.5
	done
}

NODE_IP=10.88.0.1          # address of the cni0 bridge, created by `up`
# Where clients reach the API server: loopback here; the worker's node IP, which the host routes into the
# worker's network namespace (tests/cluster/worker), so one kubeconfig serves both sides.
APISERVER_HOST=127.0.0.1
# The kubelet's cgroup root: the worker's pods live under a root of their own (two kubelets on one root
# would remove each other's pod cgroups).
CGROUP_ROOT=""
if [[ $HARNESS_CLUSTER_ROLE == worker ]]; then
	NODE_NAME=harness-worker-node
	POD_CIDR=10.89.0.0/16
	NODE_IP=10.89.0.1
	APISERVER_HOST=$NODE_IP
	CGROUP_ROOT=/harness-worker
fi
BRIDGE=cni0
SERVICE_IP=10.96.0.1
CTR=(ctr --address "$CONTAINERD_SOCK" --namespace k8s.io)

# node_has_image TAG: is TAG in the node's containerd? (No `| grep -q`: with
# pipefail, grep exiting early makes ctr die of SIGPIPE and the test fail.)
node_has_image() {
	local images
	[[ -S $CONTAINERD_SOCK ]] || return 1
	images="$("${CTR[@]}" images ls -q 2>/dev/null)" || return 1
	grep -qxF "$1" <<<"$images"
}

# go_install_cached BIN PKG@VERSION [LDFLAGS]: build a Go command from the module proxy into BIN (a path
# in the build cache, keyed by version) unless it is already there.
go_install_cached() {
	local bin=$1 pkg=$2 ldflags="-s -w ${3:-}" start=$SECONDS
	[[ -x $bin ]] && return 0
	command -v go >/dev/null || die "go not found in PATH (needed to build $pkg)"
	log "building $pkg from the Go module proxy"
	mkdir -p "$(dirname "$bin")"
	local tmp
	tmp="$(mktemp -d "$(dirname "$bin")/.build-XXXXXX")"
	GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "$pkg" >&2 || { rm -rf "$tmp"; return 1; }
	mv "$tmp/$(basename "${pkg%@*}")" "$bin"
	rm -rf "$tmp"
	log "built $(basename "$bin") in $((SECONDS - start))s"
}

# Serialise up/down (e.g. several pytest workers calling `up` at once).
# start_proc closes fd 9 for the daemons, or they would hold the lock forever.
lock_state() {
	mkdir -p "$RUN_DIR"
	exec 9>"$RUN_DIR/updown.lock"
	flock 9
}
