"""Widgets of the lab, each named for what it shows."""
