"""The chart README is what helm-docs (pinned, built from the Go module proxy) renders from README.md.gotmpl
and values.yaml's `# --` comments, and every value it lists is documented."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.tools.gobuilds import helm_docs_binary
from tests.unit.chart.test_chart_render import CHART, ROOT, WORKER_CHART

pytestmark = pytest.mark.gotool


def rendered(chart: Path = CHART) -> str:
    """`helm-docs --dry-run` of one chart, with the arguments `make generate` gives it."""
    only = f"--chart-to-generate={chart.relative_to(ROOT)}"
    done = subprocess.run(
        [str(helm_docs_binary()), "--dry-run", "--log-level=warning", *GENERATE_ARGS, only],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout


GENERATE_ARGS = ("--chart-search-root=charts", "--sort-values-order=file", "--skip-version-footer")


@pytest.mark.parametrize("chart", [CHART, WORKER_CHART], ids=lambda c: c.name)
def test_the_readme_is_what_helm_docs_renders(chart: Path) -> None:
    text = rendered(chart).rstrip("\n")
    assert text == (chart / "README.md").read_text().rstrip("\n"), "run `make generate`"


def test_every_value_in_the_table_is_documented() -> None:
    rows = [
        line for line in rendered().splitlines() if line.startswith("| ") and not line.startswith("| Key")
    ]
    assert len(rows) > 50
    undocumented = [row.split(" | ")[0].lstrip("| ") for row in rows if row.rstrip().endswith("|  |")]
    assert undocumented == [], "add a `# --` comment above each in values.yaml"
