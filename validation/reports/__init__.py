"""Reports: the docs, README sections and plots generated from records and scores."""
