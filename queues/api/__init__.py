"""Kueue's wire types: the kinds as pydantic models, their fields, rules, conversion to the model, labels."""
