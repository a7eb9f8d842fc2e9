"""Forge deliveries (pure): read and verify a webhook delivery, decide the run it starts, and what the
reporting step writes back on the forge."""
