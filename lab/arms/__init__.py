"""An arm's life (:mod:`lab.arms.life`), the process it runs in
(:mod:`lab.arms.host`, :mod:`lab.arms.handles`), the order of a run's cells
(:mod:`lab.arms.order`) and which engines stay loaded between them
(:mod:`lab.arms.fit`)."""
