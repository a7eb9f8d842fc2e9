"""The publisher's secret scan on the cluster, with the chart's defaults: the real Claude Code writes a
GitHub token of the real format (not a credential the run was granted) into its workspace, and the
gitleaks in the sandbox image refuses the change by file, line and rule; the value reaches neither the
run's status, its Events nor the publisher's log, and nothing is kept or pushed. A clean change beside
it is published, scanned by the same publisher."""

from __future__ import annotations

import secrets
import string

from .conftest import Runs
from .test_publish import OWNER_REPO, Publishing, forge, git_server, publishing

__all__ = ["forge", "git_server", "publishing"]  # the fixtures test_publish.py defines


def test_a_token_of_a_providers_format_is_refused_by_the_scanner(publishing: Publishing, runs: Runs) -> None:
    token = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    write = f"mkdir -p src && printf '# settings\\nGITHUB_TOKEN = \"%s\"\\n' {token} > src/settings.py"
    publishing.create("holds-token", write)
    publishing.create("clean", "printf 'hello, world\\n' > README.md")

    refused = runs.wait_finished("holds-token")

    assert refused["phase"] == "Failed", publishing.describe("holds-token")
    assert refused["reason"] == "ChangeHoldsSecret", publishing.describe("holds-token")
    assert "src/settings.py:2 (github-pat)" in refused["message"], refused["message"]
    events = [str(e) for e in runs.events("holds-token")]
    said = [str(refused), *events, publishing.describe("holds-token")]
    assert not [s for s in said if token in s or token[4:] in s]
    assert "harness/holds-token" not in publishing.server.branches(OWNER_REPO)
    assert "patchConfigMapName" not in refused.get("changes", {})  # nothing kept

    clean = runs.wait_finished("clean")
    assert clean["phase"] == "Succeeded", publishing.describe("clean")
    assert publishing.server.branches(OWNER_REPO)["harness/clean"] == clean["changes"]["commit"]
    assert publishing.server.refs_pushed() == ["refs/heads/harness/clean"]
