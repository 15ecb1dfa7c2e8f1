"""The REST admin API (FastAPI): one router per resource, each route translating onto its API in
``services/controller/api``; shared dependencies (the request layer, the request context) in ``deps``."""
