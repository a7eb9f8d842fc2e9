# Developer entry points. `make test` is what CI runs (via .ci/run); see the README.
PY ?= .venv/bin/python
VENV_STAMP := .venv/.installed

.PHONY: venv test unit lint generate demo dist images cluster-up cluster-down flux-test kueue-test multikueue-test reliability resume-matrix forge-test trace-test release release-test

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	.venv/bin/pip install -q -e '.[dev]'
	touch $(VENV_STAMP)

venv: $(VENV_STAMP)

## unit tests only: no cluster, no agent CLIs, no Go builds
unit: venv
	$(PY) -m pytest -m "not integration and not cli and not e2e and not gotool and not forge and not traces and not release" -q

## the whole suite: unit, real agent CLIs against local stubs, the real test cluster, and e2e/ on it
test: venv
	bash tests/run-all.sh

# Every tracked or new shell script (a sh/bash shebang); -P lets shellcheck follow `source "$(dirname ...)/lib/x.sh"`.
SHELL_SCRIPTS = $(shell git ls-files --cached --others --exclude-standard -z | xargs -0 grep -lIE --max-count=1 '^\#!(/usr/bin/env |/bin/)(ba)?sh' --)

lint: venv
	.venv/bin/ruff check operator tests e2e bench release
	.venv/bin/ruff format --check operator tests e2e bench release
	.venv/bin/mypy
	.venv/bin/lint-imports
	shellcheck -x -P SCRIPTDIR -P SCRIPTDIR/.. $(SHELL_SCRIPTS)

## regenerate crds/ (and the chart's copies of the CRDs and the built-in catalog) from the source, and the
## chart README's values table from values.yaml
generate: venv
	.venv/bin/harnessctl crds -o crds -o charts/harness-operator/files/crds
	rm -f charts/harness-operator/catalog/*.yaml
	cp operator/harness_operator/catalog/*.yaml charts/harness-operator/catalog/
	"$$($(PY) -m tests.tools.gobuilds helm-docs)" --chart-search-root=charts --sort-values-order=file \
		--skip-version-footer

## run an example locally with the bundled demo agent (no cluster, no API key); needs only python3: the
## package and its runtime dependencies, no dev tools, in a venv of its own (DEMO_VENV), reinstalled when
## the package's files change
DEMO_VENV ?= .venv-demo
$(DEMO_VENV)/.installed: pyproject.toml $(shell find operator/harness_operator -name '*.py' -o -name '*.yaml')
	python3 -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install -q .
	touch $@

demo: $(DEMO_VENV)/.installed
	PATH=$(abspath $(DEMO_VENV))/bin:$$PATH $(DEMO_VENV)/bin/harnessctl run examples/demo/demo-run.yaml

## the wheel and the source archive into DIST (dist/), what `pipx install` takes; PY=python with `build`
## installed (the default, the dev venv, has it)
DIST ?= dist
dist: $(if $(filter .venv/bin/python,$(PY)),venv)
	rm -f $(DIST)/harness_operator-*
	$(PY) -m build --outdir $(DIST) .

## build every image from sandbox-image/Dockerfile, tagged as the chart's defaults, and load them into the
## local test cluster; REGISTRY=host[:port][/path] PUSH=1 also tags them there and pushes them;
## ONLY=name,... builds only those (operator, gateway, store, sandbox, or agent names from sandbox-image/agents)
images:
	sandbox-image/build $(if $(REGISTRY),--registry $(REGISTRY)) $(if $(PUSH),--push) $(if $(ONLY),--only $(ONLY))

cluster-up:
	tests/cluster/up

cluster-down:
	tests/cluster/down

## Flux drives runs on the test cluster: builds source-controller and kustomize-controller from the Go
## module proxy on first use (about 11 minutes on 2 cores; cached), then runs the journey (about 30s)
flux-test: venv
	HARNESS_FLUX=1 $(PY) -m pytest tests/integration/test_flux_journey.py -q

## Kueue admits runs' Jobs on the test cluster: builds Kueue v0.17.0 from the Go module proxy on first use
## (about 5 minutes on 2 cores; cached), installs it (tests/cluster/kueue), runs tests/integration/test_kueue.py
## and removes Kueue again
kueue-test: venv
	HARNESS_KUEUE=1 $(PY) -m pytest tests/integration/test_kueue.py -q

## a real Gitea on the test cluster's node address (tests/cluster/gitea), then the publisher and the reporting
## step against it (tests/forge) and the whole loop on the cluster with the chart and the images `make images`
## loaded (e2e/test_forge_loop.py: an issue labelled in Gitea ends with a reviewed pull request); Gitea is built
## from the Go module proxy on first use (about 11 CPU-minutes: 31 minutes measured on the shared 2 cores, an
## estimated 6-7 on idle ones; cached) and keeps running afterwards (tests/cluster/gitea stop; `tests/cluster/down`
## stops it too)
forge-test: venv
	tests/cluster/gitea start
	HARNESS_FORGE=1 $(PY) -m pytest tests/forge e2e -m forge -q

## a real Jaeger v2 (an OpenTelemetry Collector with memory storage) on the test cluster's node address
## (tests/cluster/jaeger: OTLP on :4318 and :4317, its query API on :16686), then the traces the operator, the
## sandbox and the gateways export, read back from it (tests/traces, and e2e/ tests marked `traces`); Jaeger is
## built from the Go module proxy on first use (about 8.5 CPU-minutes: 5 minutes measured on the 2 cores;
## cached) and keeps running afterwards (tests/cluster/jaeger stop; `tests/cluster/down` stops it too)
trace-test: venv
	tests/cluster/jaeger start
	HARNESS_TRACES=1 $(PY) -m pytest tests/traces e2e -m traces -q

## a release a platform can verify (docs/release.md): every image (sandbox-image/build) pushed to REGISTRY
## (default the test registry, 127.0.0.1:5000/harness: tests/cluster/registry start), the chart pushed as an OCI
## artifact to REGISTRY/charts naming every image by digest, an SBOM (syft, SPDX) and SLSA provenance attested
## on each, each signed with cosign: COSIGN_KEY=cosign.key (COSIGN_PASSWORD unlocks it) or a KMS reference, or
## COSIGN_KEYLESS=1 (Fulcio and Rekor: their network). RELEASE_IMAGES=operator,claude releases only those.
## Writes dist/release/VERSION/ (release.json, cosign.pub, release-values.yaml). cosign, syft and helm are
## built from the Go module proxy on first use (release/tools; cached)
release:
	release/release

## a release of the operator and sandbox-claude images to the test registry with a generated key, then
## cosign verify and verify-attestation as a platform runs them, and a tampered image (tests/release); about
## 15 minutes the first time (the tools and the two images built), 35 s after
release-test: venv
	HARNESS_RELEASE=1 $(PY) -m pytest tests/release -m release -q

## MultiKueue dispatches runs to a second cluster: starts it (tests/cluster/worker, its own control plane,
## kubelet and network namespace; about 15 s warm), Kueue on both clusters, runs
## tests/integration/test_multikueue.py, and removes Kueue and the second cluster again
multikueue-test: venv
	HARNESS_MULTIKUEUE=1 $(PY) -m pytest tests/integration/test_multikueue.py -q

## every fault test (tests/reliability) on the test cluster, the slow ones included: the operator SIGKILLed
## ten times in a burst of 200 runs, kube-apiserver and etcd restarted, the kubelet restarted (about 15 minutes)
reliability: venv
	HARNESS_RELIABILITY=1 $(PY) -m pytest tests/reliability -q -s

## spec.resumeFrom on the cluster for every built-in that declares sessionResume (about 3 minutes; the
## chart and images on the running test cluster: make cluster-up images first)
resume-matrix: venv
	HARNESS_RESUME_MATRIX=1 $(PY) -m pytest e2e/test_session_resume_all.py -q
