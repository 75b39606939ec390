"""Tests of the terminal UI."""
