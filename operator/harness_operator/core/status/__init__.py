"""What the run reports: the status from what was observed, the run's Events, its progress and
usage (pure)."""
