"""The web console: a client of the public REST and client gRPC APIs (see services/console/main.py)."""
