"""Each built-in's knownOptions are what its pinned CLI's help prints (tests/cli_options.py generates
them): a CLI upgrade that adds or drops an option fails here until the catalog is regenerated."""

from __future__ import annotations

import pytest
from tests.cli_options import CLI_BIN, HELP, options_of

from harness_operator.catalog import load_builtin_catalog

pytestmark = pytest.mark.cli
CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}


@pytest.mark.parametrize("provider", sorted(HELP))
def test_known_options_are_what_the_pinned_cli_prints(provider: str) -> None:
    if not (CLI_BIN / HELP[provider][0]).exists():
        pytest.fail(f"{provider} is not installed in {CLI_BIN}: bash tests/cli-tools.sh {provider}")
    assert CATALOG[provider].known_options == options_of(provider), "python -m tests.cli_options --write"


def test_every_installable_cli_builtin_has_its_list() -> None:
    with_list = {name for name, spec in CATALOG.items() if spec.known_options is not None}
    cli_with_image = {name for name, spec in CATALOG.items() if spec.image and spec.protocol == "cli"}
    assert with_list == set(HELP) == cli_with_image
