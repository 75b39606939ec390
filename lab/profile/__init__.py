"""How a profile becomes a :class:`lab.profile.load.Profile`, one stage a
module: read the TOML (:mod:`.read`), check names, options, files and the
``acceptance`` key, validate the tables (:mod:`.validate`), expand sweeps
(:mod:`.sweeps`), pick baselines (:mod:`.baselines`). :mod:`.load` runs them
in order and is what the rest of the lab imports; :mod:`.errors` is the one
error, naming file, line and key path."""
