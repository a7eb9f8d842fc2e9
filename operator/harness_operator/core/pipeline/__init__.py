"""Pipelines: the DAG's order and checks, the runs each step creates, and the pipeline's status (pure)."""
