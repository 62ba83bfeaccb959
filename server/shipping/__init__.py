"""Shipping the sidecar: a frozen bundle for players' machines, its start-up, and the addon's zip."""
