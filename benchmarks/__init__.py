"""The lab's cost against each engine's own tool, and the investigations
behind it. Run from the repository root as ``python -m benchmarks.NAME``;
``common`` holds what the scripts share.

Some benchmarks run llama.cpp in their own process (the ``process``
variants); as in an arm's own process (lab.arms.host), its libraries load
here first, before anything imports numpy, whose BLAS may bring an OpenMP
runtime that a later ggml backend crashed beside on a CUDA host."""

from lab.base.native import preload

preload("llama_cpp")
