"""Where the calling process stands: rank and world size (torch.distributed or
torchrun's environment), DataLoader worker, ranks per node."""

from __future__ import annotations

import os
from typing import Optional, Tuple

import torch
import torch.utils.data

from ..errors import ConfigError


def topology() -> Tuple[int, int, int, int]:
    """(rank, world_size, worker, num_workers) of the calling process.

    rank and world size come from torch.distributed when it is initialised,
    else from the RANK and WORLD_SIZE environment variables (torchrun's), else
    (0, 1); worker and num_workers from ``get_worker_info()`` inside a
    DataLoader worker, else (0, 1).
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        rank = int(os.environ.get("RANK", "0"))
        world = int(os.environ.get("WORLD_SIZE", "1"))
    info = torch.utils.data.get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank, world, worker, workers


def local_topology() -> Tuple[int, int]:
    """(local_rank, local_world_size) from LOCAL_RANK and LOCAL_WORLD_SIZE (default (0, 1))."""
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"config: environment variable {name}={value!r} is not an integer") from None


def ranks_per_node(rank: int, world: int) -> int:
    """Ranks per node, for node-local shard affinity: torchrun's LOCAL_WORLD_SIZE,
    else SLURM's SLURM_NTASKS_PER_NODE (or the first count of
    SLURM_TASKS_PER_NODE), else 1 on a single rank. Checks that the rank
    agrees with torchrun's GROUP_RANK and LOCAL_RANK (ranks numbered node by
    node) and with torch.distributed; raises ConfigError naming the variable
    otherwise."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        env_rank = _env_int("RANK")
        if env_rank is not None and env_rank != torch.distributed.get_rank():
            raise ConfigError(f"config: RANK={env_rank} disagrees with torch.distributed's rank "
                              f"{torch.distributed.get_rank()}")
    local = _env_int("LOCAL_WORLD_SIZE")
    source = "LOCAL_WORLD_SIZE"
    if local is None:
        local = _env_int("SLURM_NTASKS_PER_NODE")
        source = "SLURM_NTASKS_PER_NODE"
    if local is None and os.environ.get("SLURM_TASKS_PER_NODE"):
        text = os.environ["SLURM_TASKS_PER_NODE"]
        digits = text.split("(")[0].split(",")[0]
        if not digits.isdigit():
            raise ConfigError(f"config: SLURM_TASKS_PER_NODE={text!r} has no task count")
        local, source = int(digits), "SLURM_TASKS_PER_NODE"
    if local is None:
        if world == 1:
            return 1
        raise ConfigError("config: node_local needs the ranks per node: set LOCAL_WORLD_SIZE "
                          "(torchrun does) or pass local_world_size")
    if local < 1 or world % local != 0:
        raise ConfigError(f"config: {source}={local} does not divide the world size {world}")
    group, local_rank = _env_int("GROUP_RANK"), _env_int("LOCAL_RANK")
    if group is not None and local_rank is not None and rank != group * local + local_rank:
        raise ConfigError(f"config: rank {rank} is not GROUP_RANK*LOCAL_WORLD_SIZE+LOCAL_RANK "
                          f"({group}*{local}+{local_rank}): node-local affinity needs ranks "
                          "numbered node by node, as torchrun numbers them")
    return local
