"""Quartermaster's admission layer: scheduler, drivers, CLI and loaders over ``queues``."""
