"""harness-operator: runs AI coding-agent CLIs as isolated Kubernetes Jobs.

`__version__` is the one version source: the package, the image tags (sandbox-image/build), the chart's
appVersion and default images, and the built-in catalog's images follow it (tests/unit/test_versions.py).
"""

__version__ = "0.1.0"
