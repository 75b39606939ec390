"""How a profile becomes a :class:`lab.profile.load.Profile`, one stage a module.

- :mod:`.errors` ProfileError, the key paths and lines it names, and the
  escaping of profile text echoed in a message;
- :mod:`.read` the profile file and its TOML, refused cleanly whatever the
  bytes, plus the typed-table helpers the validator uses;
- :mod:`.limits` the ranges of [run] keys and n_max, the sweep cap, the name
  bounds, and the ranges plugins declare on their options;
- :mod:`.names` arm and prompt names safe inside file names, unique after
  case folding, and the names sweeps generate;
- :mod:`.files` files a profile reads, kept inside the profile's tree;
- :mod:`.options` plugin options against what the plugin declares;
- :mod:`.validate` [profile], [run], [[prompts]] and [[arms]] checked, sweeps
  still unexpanded;
- :mod:`.sweeps` one arm per combination of swept values, capped;
- :mod:`.baselines` which arm each speculative arm is measured against.

:mod:`lab.profile.load` runs them in that order and is what the rest of the lab
imports.
"""
