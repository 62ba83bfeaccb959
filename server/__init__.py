"""The Loreguard sidecar: governance pipeline, inference backends, CLI."""
