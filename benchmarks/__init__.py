"""The lab's cost against each engine's own tool, and the investigations
behind it. Run from the repository root as ``python -m benchmarks.NAME`` (or
``python -m lab_llamacpp.native_first benchmarks/NAME.py`` where llama.cpp's
libraries must load first); ``common`` holds what the scripts share."""
