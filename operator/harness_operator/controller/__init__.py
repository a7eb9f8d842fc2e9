"""The imperative shell: kopf registrations, the reconciler, the API client, caches, errors and metrics."""
