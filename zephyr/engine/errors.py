"""The engine's errors. They are defined in `zephyr.errors`, below every package, so that the
filesystem layer and the config loader raise the same types; this module keeps the engine's name."""

from zephyr.errors import BadInputError, PlanError, UserCodeError, ZephyrError

__all__ = ["ZephyrError", "BadInputError", "UserCodeError", "PlanError"]
