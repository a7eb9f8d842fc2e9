"""The gateways' grants as the operator writes them (controller/grants.py, controller/metering.py) against an
API server that keeps ConfigMaps with their resourceVersions: an attempt's token goes live only as it
starts and leaves as it ends; a name another run's grant (or no grant) holds is never written over; a
write that lost a race is retried; the run's meter is read at its end, after its grant is gone."""

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from tests.unit.controller.fake_kube import ConfigMapApi

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Attempt, CostSource, HarnessDefinitionSpec, HarnessRun, Usage
from harness_operator.contract.model_access import MeteredUsage, ModelGrant, is_token_of
from harness_operator.controller.errors import MeterUnavailable, retries_of
from harness_operator.controller.grants import Grants
from harness_operator.controller.metering import AttemptMetering
from harness_operator.core.attempt import Attempt as DecidedAttempt
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.egress_grant import grant_name as egress_grant_name
from harness_operator.core.pod.model_grant import model_grant_name, model_token
from harness_operator.core.resolve.resolution import AttemptTarget, RunFailure

GATEWAYS = OperatorConfig(
    model_gateway_service="model.harness-system.svc",
    model_gateway_namespace="harness-system",
    model_gateway_vendors=("anthropic",),
    model_gateway_key="m0del-k3y",
    egress_gateway_service="egress.harness-system.svc",
    egress_gateway_namespace="harness-system",
    egress_gateway_key="egr3ss-k3y",
)
CLAUDE = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "modelRoute": {
            "vendor": "anthropic",
            "env": [{"name": "ANTHROPIC_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"}],
        },
    }
)
WEB = HarnessDefinitionSpec.model_validate({"binary": "tool", "egress": [{"host": "docs.example.com"}]})


METER_RETRIES = retries_of("meter")


class ApiServer(ConfigMapApi):
    """The shared fake's ConfigMaps and Events, with the gateways' Secrets."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}

    def delete_grant(self, namespace: str, name: str) -> None:
        self.config_maps.pop((namespace, name), None)

    def delete_secret(self, namespace: str, name: str) -> None:
        self.secrets.pop((namespace, name), None)

    def apply_key_secret(self, body: dict[str, Any]) -> None:
        self.secrets[(body["metadata"]["namespace"], body["metadata"]["name"])] = body

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return "sk-own" if (name, key) == ("mine", "k") else None

    def grant(self, namespace: str, run: str) -> ModelGrant | None:
        found = self.config_maps.get(("harness-system", model_grant_name(namespace, run)))
        return ModelGrant.model_validate_json(found["data"]["grant.json"]) if found else None


def make_run(name: str = "review", namespace: str = "team-a", uid: str = "uid-1", **spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"provider": "claude", "prompt": "x", "retry": {"limit": 2}, **spec},
        }
    )


def targets(run: HarnessRun, *definitions: HarnessDefinitionSpec) -> list[DecidedAttempt]:
    plain = [AttemptTarget(i, "p", d, 1) for i, d in enumerate(definitions or (CLAUDE,) * 3, start=1)]
    return decide_attempts(run, plain, GATEWAYS)


def live(api: ApiServer, run: HarnessRun) -> list[int]:
    grant = api.grant(run.metadata["namespace"], run.metadata["name"])
    assert grant is not None
    tokens = {i: model_token(run, GATEWAYS, i) for i in (1, 2, 3)}
    return [i for i, t in tokens.items() if any(is_token_of(a, t) for a in grant.attempts.values())]


def test_an_attempts_token_is_live_from_its_start_to_its_end_only() -> None:
    api, run = ApiServer(), make_run(limits={"maxCostUSD": 0.05})
    grants, chain = Grants(api, GATEWAYS), targets(run)  # type: ignore[arg-type]
    secrets = grants.write(run, chain)
    # The plan Secret holds every attempt's token from the start; none is live yet.
    assert {k for k in secrets if k.startswith("model-env-")} == {
        f"model-env-{i}-ANTHROPIC_API_KEY" for i in (1, 2, 3)
    }
    assert api.grant("team-a", "review") is None
    grants.admit(run, chain, 1)
    assert live(api, run) == [1]
    grants.admit(run, chain, 1)  # a start done again (an operator restarted): the same grant
    assert live(api, run) == [1]
    grants.revoke_attempt(run, 1)
    grants.admit(run, chain, 2)
    assert live(api, run) == [2]
    grant = api.grant("team-a", "review")
    assert grant is not None and (grant.max_cost_usd, grant.max_tokens) == (0.05, None)
    grants.revoke_attempt(run, 2)
    assert live(api, run) == []
    grants.revoke_run("team-a", "review")
    assert api.grant("team-a", "review") is None


def test_an_unrouted_attempt_joins_no_grant_and_its_own_key_is_copied_as_it_starts() -> None:
    api = ApiServer()
    run = make_run(credentials=[{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "mine", "key": "k"}}])
    chain = targets(run, WEB, CLAUDE)
    grants = Grants(api, GATEWAYS)  # type: ignore[arg-type]
    grants.write(run, chain)
    grants.admit(run, chain, 1)
    assert api.grant("team-a", "review") is None and not api.secrets
    grants.admit(run, chain, 2)
    grant = api.grant("team-a", "review")
    assert grant is not None and grant.attempts["2"].key_field == "attempt-2"
    [secret] = api.secrets.values()
    assert secret["stringData"] == {"attempt-2": "sk-own"}


def test_another_runs_grant_or_no_grant_is_never_written_over() -> None:
    api, run = ApiServer(), make_run()
    grants, chain = Grants(api, GATEWAYS), targets(run)  # type: ignore[arg-type]
    name = model_grant_name("team-a", "review")
    squatter = {"namespace": "team-b", "run": "review", "uid": "u", "attempts": {}}
    api.write_config_map(
        {
            "metadata": {
                "name": name,
                "namespace": "harness-system",
                "labels": {"agentharness.dev/model-grant": "true"},
            },
            "data": {"grant.json": json.dumps(squatter)},
        }
    )
    before = api.fetch_config_map("harness-system", name)
    with pytest.raises(RunFailure) as failure:
        grants.admit(run, chain, 1)
    assert failure.value.reason == Reason.ChildConflict and "team-b/review" in failure.value.message
    grants.revoke_attempt(run, 1)  # nor taken apart
    assert api.fetch_config_map("harness-system", name) == before
    # An egress grant's name held by a model grant: the egress grant is not written either.
    tool = make_run(name="team-a.review", namespace="model")
    egress = egress_grant_name("model", "team-a.review")
    assert before is not None
    planted = {k: v for k, v in before["metadata"].items() if k != "resourceVersion"}
    assert api.write_config_map({**before, "metadata": {**planted, "name": egress}}) is not None
    with pytest.raises(RunFailure, match="not a grant"):
        Grants(api, GATEWAYS).write(tool, targets(tool, WEB))  # type: ignore[arg-type]


def test_a_namespace_named_model_and_its_neighbour_each_keep_their_grant() -> None:
    api = ApiServer()
    tool, run = make_run(name="team-a.review", namespace="model", uid="uid-m"), make_run()
    grants = Grants(api, GATEWAYS)  # type: ignore[arg-type]
    grants.write(tool, targets(tool, WEB))
    egress = api.fetch_config_map("harness-system", "model.team-a.review")
    grants.write(run, targets(run))
    grants.admit(run, targets(run), 1)
    assert api.fetch_config_map("harness-system", "model.team-a.review") == egress
    assert live(api, run) == [1] and len(api.config_maps) == 2


def test_a_deleted_runs_grant_of_the_same_name_is_replaced_without_its_attempts() -> None:
    api, old, new = ApiServer(), make_run(uid="uid-old"), make_run(uid="uid-new")
    grants = Grants(api, GATEWAYS)  # type: ignore[arg-type]
    grants.admit(old, targets(old), 1)
    grants.admit(old, targets(old), 2)
    grants.revoke_attempt(new, 1)  # not the new run's to take apart
    assert live(api, old) == [1, 2]
    grants.admit(new, targets(new), 1)
    grant = api.grant("team-a", "review")
    assert grant is not None and grant.uid == "uid-new" and live(api, new) == [1]
    assert live(api, old) == []


def test_a_grant_changed_while_it_was_written_is_written_again() -> None:
    api, run = ApiServer(), make_run()
    grants, chain = Grants(api, GATEWAYS), targets(run)  # type: ignore[arg-type]
    grants.admit(run, chain, 1)
    fetch = api.fetch_config_map

    def stale(namespace: str, name: str) -> dict[str, Any] | None:
        found = fetch(namespace, name)
        api.version += 1  # another writer, between the read and the write
        key = (namespace, name)
        api.config_maps[key]["metadata"]["resourceVersion"] = str(api.version)
        return found

    api.fetch_config_map = stale  # type: ignore[method-assign]
    with pytest.raises(ApiException) as conflict:
        grants.admit(run, chain, 2)
    assert conflict.value.status == 409  # temporary: the reconcile is retried
    api.fetch_config_map = fetch  # type: ignore[method-assign]
    grants.admit(run, chain, 2)
    assert live(api, run) == [1, 2]


class Reader:
    def __init__(self, api: ApiServer, meter: MeteredUsage | None) -> None:
        self.api, self.meter = api, meter
        self.grant_at_read: list[bool] = []

    def read(self, run_uid: str, attempt: int | None) -> MeteredUsage:
        assert attempt is None
        self.grant_at_read.append(self.api.grant("team-a", "review") is not None)
        if self.meter is None:
            raise MeterUnavailable("the model gateway's meter of the run: refused")
        return self.meter


def test_the_runs_meter_is_read_at_its_end_after_its_grant_is_gone() -> None:
    api, run = ApiServer(), make_run()
    grants = Grants(api, GATEWAYS)  # type: ignore[arg-type]
    grants.admit(run, targets(run), 1)
    reader = Reader(api, MeteredUsage(requests=5, input_tokens=50, cost_usd=0.05))
    metering = AttemptMetering(api, GATEWAYS, grants, reader)  # type: ignore[arg-type]
    first = Usage(input_tokens=20, cost_usd=0.02, cost_source=CostSource.metered)
    unpriced = Usage(input_tokens=10, cost_source=CostSource.unknown)  # metered, its model has no price
    reported = Usage(input_tokens=999, cost_usd=9.0, cost_source=CostSource.reported)  # not the meter's
    attempts = [
        Attempt(index=1, provider="p", usage=first, reported_usage=Usage(input_tokens=18)),
        Attempt(index=2, provider="p", usage=unpriced, reported_usage=Usage()),
        Attempt(index=3, provider="p", usage=reported),
    ]
    rest = metering.meter_run(run, attempts, 0)
    assert rest is not None and (rest.input_tokens, rest.cost_usd) == (20, 0.03)
    assert reader.grant_at_read == [False]  # revoked first: nothing spends after the reading
    assert [r for r, _ in api.events] == [Reason.UsageMismatch]


def test_a_silent_gateway_is_asked_again_then_said_lost() -> None:
    api, run = ApiServer(), make_run()
    metering = AttemptMetering(api, GATEWAYS, Grants(api, GATEWAYS), Reader(api, None))  # type: ignore[arg-type]
    with pytest.raises(MeterUnavailable):
        metering.meter_run(run, [], METER_RETRIES - 1)
    assert metering.meter_run(run, [], METER_RETRIES) is None
    assert api.events == [
        (
            Reason.MeterLost,
            f"the model gateway's meter of the run: refused, {METER_RETRIES} times: spend no attempt's meter "
            "shows is not counted",
        )
    ]


def test_a_required_own_key_that_is_missing_fails_the_run_before_its_token_goes_live() -> None:
    api = ApiServer()
    run = make_run(
        credentials=[{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "mine", "key": "gone"}}]
    )
    with pytest.raises(RunFailure) as failure:
        Grants(api, GATEWAYS).admit(run, targets(run), 1)  # type: ignore[arg-type]
    assert failure.value.reason == Reason.CredentialsMissing
    assert "Secret mine has no key gone" in failure.value.message
    assert api.grant("team-a", "review") is None and not api.secrets


def test_a_runs_end_deletes_its_egress_grant_its_model_grant_and_its_own_keys() -> None:
    api = ApiServer()
    run = make_run(credentials=[{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "mine", "key": "k"}}])
    grants = Grants(api, GATEWAYS)  # type: ignore[arg-type]
    grants.write(run, targets(run, WEB, CLAUDE))
    grants.admit(run, targets(run, WEB, CLAUDE), 2)
    assert api.fetch_config_map("harness-system", egress_grant_name("team-a", "review")) is not None
    assert api.grant("team-a", "review") is not None and api.secrets
    grants.revoke_run("team-a", "review")
    assert api.config_maps == {} and api.secrets == {}
