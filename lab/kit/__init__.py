"""What plugins may use beside the contract: the speculative loop
(:mod:`.speculative`), prompt rendering (:mod:`.prompting`), model
references resolved to files (:mod:`.models`) and doctor checks
(:mod:`.checks`), and a fake target a drafter's unit tests drive
``draft()`` against (:mod:`.testing`). Nothing here imports an engine at module level."""
