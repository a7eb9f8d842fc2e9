"""What every object the core builds shares: names and labels, conditions, ownership, CEL (pure)."""
