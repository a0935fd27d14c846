"""The records: what the lab measured, read back (:mod:`.store`), the error statistics every score uses (:mod:`.stats`), and the broad sample of library models (:mod:`.broad_zoo`)."""
