"""Quota service: quota configuration and throttle delays (registration only so far)."""
