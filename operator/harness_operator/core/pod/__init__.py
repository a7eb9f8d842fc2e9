"""What an attempt runs in: its Job and containers, policies, gateway grants and the run's data objects
(pure)."""
