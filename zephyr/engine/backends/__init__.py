"""Where shard tasks run: the `Backend` protocol (`api`), the backends themselves (`local`: in-process and
a pool of processes; `ray`, with `ray_cluster` for joining and watching a cluster), the run-wide transfer
ledger they share with their workers (`ledger`), and the warm worker pool kept between runs (`pool`).

Their registry by name stays one level up (`zephyr.engine.backend_registry`): the config checks a backend
name and its options against it, and the backends here run the worker, which plans on that config; a
registry inside this package would tie the package both under and over the config. A new backend is one
module here holding a class that implements `Backend`, plus its entry in `backend_registry.BACKENDS`;
nothing else names it. This package's face imports nothing, so that `ray` is imported only by a run that
uses it.
"""
