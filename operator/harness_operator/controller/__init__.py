"""The imperative shell: the watch caches, queues and the leader; one reconciler per kind (the run's split
by duty: run_start, run_observe, run_dispatch, run_collect), kopf's registrations for budgets, schedules
and definitions, the API client, errors and metrics."""
