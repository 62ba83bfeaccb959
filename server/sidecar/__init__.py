"""The sidecar: protocol v1 over a ZeroMQ ROUTER socket (see PROTOCOL.md)."""
