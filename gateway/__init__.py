"""The HTTP edge: app assembly, webhook ingress, provider presets, admin and runtime APIs, CLI."""
