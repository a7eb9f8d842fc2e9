"""The functional core (pure), by what it builds: status/, plan/, pod/ over attempt.py, decided once from
what resolve/ found and access/ allows; queue/, objects/ and config.py beneath (pyproject's layers)."""
