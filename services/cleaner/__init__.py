"""Cleaner worker: stateless log compaction (registration only so far)."""
