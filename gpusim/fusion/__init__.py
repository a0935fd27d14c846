"""Fusion: partitions scored through the same lower -> cost -> simulate path as predict (:mod:`.scoring`), and the searches over them (:mod:`.search`)."""
