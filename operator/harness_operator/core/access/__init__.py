"""What an attempt may reach and use: egress, the model route, confinement, MCP servers, tools, credentials
(pure)."""
