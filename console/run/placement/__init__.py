"""Where a run's tasks run, chosen once from its cluster: hosts of one's own, or a Slurm job (Qt-free).

``placement_for(cluster)`` is the one place that asks which it is; everything downstream speaks to the
``Placement`` interface (console/run/placement/base.py).
"""

from __future__ import annotations

from console import cluster as cl
from console.run.placement.base import Placement
from console.run.placement.hosts import OwnHosts
from console.run.placement.slurm import SlurmJob

__all__ = ["Placement", "placement_for"]


def placement_for(cluster: cl.Cluster) -> Placement:
    """The place ``cluster``'s tasks run: its ``[slurm]`` job, else its own hosts."""
    return SlurmJob(cluster) if cluster.slurm is not None else OwnHosts(cluster)
