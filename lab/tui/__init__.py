"""The Textual lab. It renders what the runner emits and never measures on
its own; nothing in ``lab/`` outside this package imports Textual."""
