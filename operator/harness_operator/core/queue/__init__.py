"""When a run may start: budgets, the namespace's queue, Kueue and MultiKueue (pure)."""
