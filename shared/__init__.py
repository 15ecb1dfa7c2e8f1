"""Code shared by every Tidelog service: codec, protos, metadata layout, client, CLI."""
