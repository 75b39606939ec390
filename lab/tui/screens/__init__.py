"""Screens of the lab."""
