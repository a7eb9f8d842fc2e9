"""import_dagu: harnesses become HarnessDefinitions, harness.run steps HarnessRuns, outputs chain."""

import yaml

from harness_operator.catalog import load_builtin_catalog
from harness_operator.dagu_import import dns_name, import_dagu
from harness_operator.manifests import parse_documents
from harness_operator.validation import ERROR, validate_documents

DAG = yaml.safe_load(
    """
working_dir: /repo
harnesses:
  my_agent:
    binary: /usr/local/bin/my-agent
    prompt_mode: flag
    prompt_flag: --task
    prompt_position: after_flags
    flag_style: single_dash
    option_flags:
      max_turns: --turns
    env_file: .env
steps:
  - id: review
    action: harness.run
    with:
      provider: my_agent
      prompt: Review this patch for correctness.
      stdin: |
        diff --git a/main.go b/main.go
      max_turns: 3
      fallback:
        - provider: codex
          model: gpt-5-codex
    output: REVIEW_RESULT
  - id: summarize
    depends: review
    action: harness.run
    with:
      provider: claude
      prompt: Summarize the review on stdin.
      stdin: ${REVIEW_RESULT}
  - id: mixed
    action: harness.run
    with:
      provider: claude
      prompt: "Fix what ${REVIEW_RESULT} says"
    retry_policy: {limit: 2}
  - id: print
    run: echo done
schedule: "0 * * * *"
"""
)


def test_definitions_and_runs() -> None:
    result = import_dagu(DAG, "nightly")
    kinds = [(m["kind"], m["metadata"]["name"]) for m in result.manifests]
    assert kinds == [
        ("HarnessDefinition", "my-agent"),
        ("HarnessRun", "nightly-review"),
        ("HarnessRun", "nightly-summarize"),
        ("HarnessRun", "nightly-mixed"),
    ]
    definition = result.manifests[0]["spec"]
    assert definition == {
        "binary": "/usr/local/bin/my-agent",
        "promptMode": "flag",
        "promptFlag": "--task",
        "promptPosition": "afterFlags",
        "flagStyle": "singleDash",
        "optionFlags": {"max_turns": "--turns"},
    }
    review = result.manifests[1]["spec"]
    assert review == {
        "provider": "my-agent",
        "prompt": "Review this patch for correctness.",
        "stdin": "diff --git a/main.go b/main.go\n",
        "fallback": [{"provider": "codex", "with": {"model": "gpt-5-codex"}}],
        "with": {"max_turns": 3},
        "workspace": {"workingDir": "/repo"},
    }


def test_output_consumed_whole_becomes_run_output() -> None:
    summarize = import_dagu(DAG, "nightly").manifests[2]["spec"]
    assert summarize["stdinFrom"] == {"runOutput": {"name": "nightly-review"}}
    assert "stdin" not in summarize


def test_unsupported_parts_are_reported() -> None:
    unsupported = import_dagu(DAG, "nightly").unsupported
    assert "harnesses.my_agent.env_file: no HarnessDefinition field; not imported" in unsupported
    assert "steps[3] (print): not a harness.run step; not imported" in unsupported
    assert "steps[2] (mixed).retry_policy: no HarnessRun field; not imported" in unsupported
    assert any(
        u.startswith("steps[2] (mixed).prompt: ${REVIEW_RESULT} is kept verbatim") for u in unsupported
    )
    assert "schedule: DAG-level setting with no HarnessRun equivalent; not imported" in unsupported
    assert not any("summarize).depends" in u for u in unsupported)


def test_legacy_executor_shape() -> None:
    dag = {
        "steps": [
            {
                "name": "fix",
                "executor": {"type": "harness", "config": {"provider": "claude"}},
                "command": "Fix the test",
                "script": "log",
                "dir": "/w",
            }
        ]
    }
    spec = import_dagu(dag, "d").manifests[0]["spec"]
    assert spec == {
        "provider": "claude",
        "prompt": "Fix the test",
        "stdin": "log",
        "workspace": {"workingDir": "/w"},
    }


def test_imported_manifests_validate() -> None:
    result = import_dagu(DAG, "nightly")
    docs = parse_documents(yaml.safe_dump_all(result.manifests), "out.yaml")
    errors = [f for f in validate_documents(docs, load_builtin_catalog()) if f.severity == ERROR]
    assert errors == []


def test_dns_name() -> None:
    assert dns_name("My_Agent v2") == "my-agent-v2"
    assert len(dns_name("x" * 100)) == 63
    assert dns_name("___") == "unnamed"
