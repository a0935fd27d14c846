"""Cost: one kernel's time on one GPU spec, by the law of its kernel class (:mod:`.kernel`)."""
