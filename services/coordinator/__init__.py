"""Group coordinator: consumer groups and offsets in __consumer_offsets (registration only so far)."""
