"""How a profile becomes a :class:`lab.profile.load.Profile`, one stage a
module; :mod:`.load` runs them and is what the rest of the lab imports."""
