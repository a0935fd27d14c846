"""Fitting: figures for the data files the predictor reads (GPU specs, kernel-class figures, rules), each written with its provenance, from the records and sweeps."""
