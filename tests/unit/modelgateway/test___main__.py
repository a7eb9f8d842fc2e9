"""The model gateway's entrypoint as a real process: a bad tracing setting stops it at startup with a
message naming the variable, before it reaches for a cluster or a store."""

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("HARNESS_TRACING_ENDPOINT", "otel-collector:4318", "is not an http(s) URL"),
        ("HARNESS_TRACING_SAMPLING", "half", "is not a number from 0 to 1"),
    ],
)
def test_a_bad_tracing_setting_stops_it_naming_the_variable(variable, value, said):
    env = {
        "PATH": os.environ["PATH"],
        **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
        "HARNESS_TRACING_ENDPOINT": "http://127.0.0.1:4318",
        variable: value,
    }
    done = subprocess.run(
        [sys.executable, "-m", "harness_operator.modelgateway"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"harness-model-gateway: {variable}={value!r} {said}, e.g. "), done.stderr
