"""One module per job kind (and one per family of kinds that share a shape)."""
