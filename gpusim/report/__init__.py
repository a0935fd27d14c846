"""Report: text tables and JSON (:mod:`.text`), the per-module roll-up (:mod:`.rollup`) and pictures (:mod:`.viz`)."""
