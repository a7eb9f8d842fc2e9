"""The chart README's values table is the one generated from values.yaml, and every value is documented."""

import pytest
from tests.chart_readme import CHART, build_rows, parse_docs, render_table, undocumented, with_table

SAMPLE = """\
# Header comment, not a doc.

# -- The image.
image:
  # -- Where from.
  repository: r
  tag: ""   # a trailing comment documents nothing
# -- Two lines
# of description.
list: []
plain:
  # -- Nested.
  leaf: 1
  other: {a: 1}
undocumented: true
"""


def test_parse_docs_reads_dash_dash_comments_with_their_continuations() -> None:
    assert parse_docs(SAMPLE) == {
        "image": "The image.",
        "image.repository": "Where from.",
        "list": "Two lines of description.",
        "plain.leaf": "Nested.",
    }


def test_undocumented_values_are_named_and_a_documented_mapping_covers_its_children() -> None:
    assert undocumented(SAMPLE) == ["plain.other.a", "undocumented"]


def test_rows_carry_type_and_default() -> None:
    rows = {r.key: r for r in build_rows(SAMPLE)}
    assert (rows["image"].type, rows["image"].default) == ("object", '{"repository": "r", "tag": ""}')
    assert (rows["plain.leaf"].type, rows["plain.leaf"].default) == ("integer", "1")
    assert "| `list` | list | `[]` | Two lines of description. |" in render_table(list(rows.values()))


def test_a_doc_comment_on_a_key_that_is_not_a_value_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"items\.key, which is not a value"):
        build_rows("items:\n  - nested: 1\n    # -- Inside a list item.\n    key: 2\n")


def test_every_value_has_a_doc_comment() -> None:
    assert undocumented((CHART / "values.yaml").read_text()) == []


def test_readme_table_is_generated_from_values_yaml() -> None:
    readme = (CHART / "README.md").read_text()
    table = render_table(build_rows((CHART / "values.yaml").read_text()))
    assert with_table(readme, table) == readme, "run `make generate`"
