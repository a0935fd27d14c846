"""Predict: capture -> lower -> cost -> simulate composed for one GPU (:mod:`.pipeline`), read by training phase (:mod:`.step`) and across GPUs (:mod:`.compare`)."""
