"""The broker: partition logs on disk, produce/fetch over gRPC."""
