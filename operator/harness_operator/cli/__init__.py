"""harnessctl: validate, run (local), render, logs, import-dagu, crds."""
