"""speclab: a terminal lab for speculative decoding."""

__version__ = "0.1.0"
