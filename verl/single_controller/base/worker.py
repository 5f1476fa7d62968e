"""Base class of every worker hosted in a worker group.

A worker learns its place in the group from the environment variables the group sets before constructing it:
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` (the torch.distributed conventions). A
worker constructed outside any group (unit tests, single-process tools) is rank 0 of a world of size 1.
"""

from __future__ import annotations

import os
import socket

from verl.single_controller.base.decorator import Dispatch, register


def find_free_port() -> int:
    """A TCP port that is free right now on every interface of this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class Worker:
    """Holds the rank/world size of this process and sets up ``torch.distributed`` on demand."""

    def __init__(self) -> None:
        self._rank = int(os.environ.get("RANK", "0"))
        self._world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self._local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self._mesh_dp_rank: dict[str, int] = {}  # mesh name -> this rank's data-parallel rank in it
        self._mesh_collect: dict[str, bool] = {}  # mesh name -> whether this rank's output is collected

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def local_rank(self) -> int:
        return self._local_rank

    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Record this rank's place in the device mesh ``mesh_name`` (upstream verl's call): its data-parallel rank,
        which picks its chunk of a batch dispatched with ``make_nd_compute_dataproto_dispatch_fn(mesh_name)``, and
        whether its output is collected (one rank per data-parallel group, e.g. tensor-parallel rank 0).

        Raises:
            ValueError: ``dp_rank`` is negative, or ``mesh_name`` was registered before with other values.
        """
        if int(dp_rank) < 0:
            raise ValueError(f"mesh {mesh_name!r}: dp_rank must be >= 0, got {dp_rank}")
        known = (self._mesh_dp_rank.get(mesh_name), self._mesh_collect.get(mesh_name))
        if known != (None, None) and known != (int(dp_rank), bool(is_collect)):
            raise ValueError(f"mesh {mesh_name!r} is already registered on rank {self._rank} as {known}")
        self._mesh_dp_rank[mesh_name], self._mesh_collect[mesh_name] = int(dp_rank), bool(is_collect)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_dispatch_info(self, mesh_name: str) -> int:
        """This rank's data-parallel rank in ``mesh_name``. Raises KeyError: the mesh was never registered here."""
        if mesh_name not in self._mesh_dp_rank:
            raise KeyError(f"rank {self._rank} registered no mesh {mesh_name!r} (has {sorted(self._mesh_dp_rank)})")
        return self._mesh_dp_rank[mesh_name]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_collect_info(self, mesh_name: str) -> bool:
        """Whether this rank's output is collected for ``mesh_name``. Raises KeyError: the mesh is unknown here."""
        if mesh_name not in self._mesh_collect:
            raise KeyError(f"rank {self._rank} registered no mesh {mesh_name!r} (has {sorted(self._mesh_collect)})")
        return self._mesh_collect[mesh_name]

    def get_master_addr_port(self) -> tuple[str, str]:
        """Address and port of rank 0's rendezvous (used by the group to configure the other ranks)."""
        return os.environ.get("MASTER_ADDR", "127.0.0.1"), os.environ.get("MASTER_PORT", "")

    def init_distributed(self, device: str) -> None:
        """Create the default process group (gloo on CPU, nccl on CUDA) when the world has more than one rank.

        On CUDA the current device is set first: under Ray each worker sees only its own GPU (device 0); under
        torchrun every GPU of the node is visible and ``LOCAL_RANK`` picks one. A no-op for a world of size 1 or when
        the group already exists.

        Raises:
            ValueError: ``device`` is neither ``"cpu"`` nor ``"cuda"``.
        """
        import torch
        import torch.distributed as dist

        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if device == "cuda" and torch.cuda.is_available():
            torch.cuda.set_device(self._local_rank % torch.cuda.device_count())
        if self._world_size <= 1 or dist.is_initialized():
            return
        backend = "nccl" if device == "cuda" else "gloo"
        dist.init_process_group(backend=backend, rank=self._rank, world_size=self._world_size)
