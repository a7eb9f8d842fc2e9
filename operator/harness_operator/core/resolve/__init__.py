"""What a run asks for, resolved: its provider chain, inputs and retries (pure)."""
