"""Local stubs of vendor model APIs (stdlib only), for running real agent CLIs offline."""
