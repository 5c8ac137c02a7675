"""Quartermaster's pure model: API types, quantities, cohort tree, pending queues."""
