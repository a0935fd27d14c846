"""Scoring: predictions against the records, with no GPU: accuracy by family and GPU, held-out models, training steps, published tables, competitors (MemTracker), and the golden predictions."""
