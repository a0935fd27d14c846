"""gpusim: predict PyTorch run time on NVIDIA GPUs and what operator fusion buys."""
