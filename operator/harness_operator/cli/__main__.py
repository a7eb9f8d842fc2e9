"""python -m harness_operator.cli: harnessctl."""

import sys

from harness_operator.cli.main import main

sys.exit(main())
