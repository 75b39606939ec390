"""Why a lab baseline token on an H200 took longer than llama-bench's: the
steps of that investigation, in the order its README gives."""
