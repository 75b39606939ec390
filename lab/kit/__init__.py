"""What plugins may use beside the contract: the speculative loop
(:mod:`.speculative`), prompt rendering (:mod:`.prompting`), model
references resolved to files (:mod:`.models`) and doctor checks
(:mod:`.checks`). Nothing here imports an engine at module level."""
