"""Models by name: the zoo of real library architectures (:mod:`.zoo`, :mod:`.zoo_any`), the built-in examples (:mod:`.examples`) and what a MODEL word resolves to (:mod:`.resolve`)."""
