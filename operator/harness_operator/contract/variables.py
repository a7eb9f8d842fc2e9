"""`$(NAME)` in an MCP header's value: the attempt variable NAME, which the CLI or the runner's MCP gate
expands (plain `re`: the gate imports it as it starts, before any other dependency)."""

import re

HEADER_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
