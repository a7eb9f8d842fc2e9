"""The egress gateway's own code, run beside Squid in the gateway image: Squid's helpers and the exporter."""
