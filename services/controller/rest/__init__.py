"""The REST admin API (FastAPI): one router per resource, shared dependencies in ``deps``."""
