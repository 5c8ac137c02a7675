"""What the service knows of the cluster: list-then-watch informers, the fields they keep, and informer events into the engine's cache."""
