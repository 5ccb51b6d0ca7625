"""The kopf operator: start-up, webhook TLS and server, handler registration."""
