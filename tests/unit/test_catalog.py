"""The built-ins' structured-output declarations: which CLIs take a JSON Schema themselves, and which can
continue a session for a re-prompt, each with a flag its pinned CLI's help prints (docs/cli-facts.md)."""

from harness_operator.catalog import load_builtin_catalog

CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}


def test_the_clis_with_a_native_schema_option_declare_it_and_no_other_does() -> None:
    declared = {name for name, spec in CATALOG.items() if spec.capabilities.structured_output}
    assert declared == {"claude", "codex"}
    assert {n for n, s in CATALOG.items() if s.output_schema_option is not None} == declared


def test_each_native_schema_flag_and_continue_flag_is_one_the_pinned_cli_prints() -> None:
    for name, spec in CATALOG.items():
        flags = [spec.output_schema_option.flag] if spec.output_schema_option else []
        flags += [a for a in spec.continue_args if a.startswith("--")]
        assert all(f.removeprefix("--") in (spec.known_options or []) for f in flags), name


def test_the_file_form_is_codexs_and_pi_continues_its_session() -> None:
    assert CATALOG["codex"].output_schema_option is not None
    assert CATALOG["codex"].output_schema_option.form == "file"
    assert CATALOG["claude"].output_schema_option is not None
    assert CATALOG["claude"].output_schema_option.form == "inline"
    assert {n: s.continue_args for n, s in CATALOG.items() if s.continue_args} == {"pi": ["--continue"]}
