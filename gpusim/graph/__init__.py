"""The OpGraph (:mod:`.opgraph`): a networkx DAG of aten operators with FLOPs and bytes, and the op registry that counts them (:mod:`.ops` for inference ops, :mod:`.train_ops` for autograd and optimizer ops).

Importing the package loads both halves of the registry, so every lookup sees every op."""
from gpusim.graph import ops, train_ops  # noqa: F401  (registration)
