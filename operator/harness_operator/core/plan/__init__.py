"""What the sandbox is told: every attempt's plan, its invocation, prices and resumed session (pure)."""
