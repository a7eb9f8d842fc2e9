#!/usr/bin/env bash
# The e2e suite on a laptop: create a kind cluster, build the images and `kind load` them, install the
# chart with its defaults, run `pytest e2e` against the cluster. Extra arguments go to pytest.
# Needs docker, kind, helm and make, and a registry kind can pull its node image from (README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."

KIND_VERSION=v0.30.0 # the kind that validates cluster.yaml in tests/tools/test_kind_config.py
cluster="${KIND_CLUSTER_NAME:-harness-e2e}"
node_image="${KIND_NODE_IMAGE:-kindest/node:v1.34.0}"
kubeconfig="${KIND_KUBECONFIG:-${TMPDIR:-/tmp}/$cluster.kubeconfig}"

die() {
	echo "run.sh: $*" >&2
	exit 1
}
command -v kind >/dev/null || die "kind not found; install it with: go install sigs.k8s.io/kind@$KIND_VERSION"
for tool in docker helm make; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

clusters="$(kind get clusters)"
if ! grep -qx "$cluster" <<<"$clusters"; then
	kind create cluster --name "$cluster" --config e2e/kind/cluster.yaml --image "$node_image" \
		--kubeconfig "$kubeconfig" --wait 180s
fi
kind get kubeconfig --name "$cluster" >"$kubeconfig"
export KUBECONFIG="$kubeconfig"

make venv
# `make images` builds and tags the images as the chart's defaults name them and prints one per line;
# on a machine with a registry, from the public Debian image.
images="$(BASE_IMAGE="${BASE_IMAGE:-debian:bookworm-slim}" make -s images | grep -E '^[^[:space:]]+:[^[:space:]]+$')" ||
	die "make images printed no image"
for image in $images; do
	kind load docker-image --name "$cluster" "$image"
done

helm upgrade --install harness-operator charts/harness-operator \
	--namespace harness-system --create-namespace --wait --timeout 300s
# Pods reach the stubs the suite serves at the kind network's gateway (this machine); the upgrade
# journey loads its retagged image with kind.
E2E_STUB_HOST="$(docker network inspect kind -f '{{(index .IPAM.Config 0).Gateway}}')" \
	E2E_LOAD_IMAGE="kind load docker-image --name $cluster" \
	.venv/bin/python -m pytest e2e -q "$@"
echo "run.sh: done; the cluster stays up (KUBECONFIG=$kubeconfig); delete it with: kind delete cluster --name $cluster"
