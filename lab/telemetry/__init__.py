"""What the lab samples while it measures: process memory (:mod:`.memory`),
CPU contention (:mod:`.contention`), GPUs (:mod:`.gpu`), read bandwidth
(:mod:`.bandwidth`) and token arrival latency (:mod:`.latency`)."""
