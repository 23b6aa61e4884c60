"""PyTorch integration: :class:`ShardDataset`, an ``IterableDataset`` of batches.

Recommended use: the dataset batches itself on C++ threads, so give the
DataLoader ``batch_size=None``, ``num_workers=0`` and ``collate_fn=passthrough``
(``ds.dataloader()`` does)::

    ds = ShardDataset("s3://bucket/data/manifest.jsonl", fields=["tokens.npy"],
                      batch_size=256, shuffle_buffer=10000, seed=1,
                      cache_dir="/nvme/cache", cache_limit="500GiB")
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0,
                                     collate_fn=passthrough)      # or ds.dataloader()
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in dl:
            x = batch["tokens.npy"].cuda(non_blocking=True)   # pinned: async copy

Tensors are zero-copy views of pooled host memory (CUDA pinned when a GPU is
present, so DataLoader's ``pin_memory=True`` is not needed); a buffer returns
to the pool when the last tensor viewing it is freed.

The package's modules, one job each: ``topology`` (where the calling process
stands), ``collate`` (batches and samples as torch tensors, the hooks' calls),
``dataset`` (``ShardDataset``) and ``state`` (its state dicts and their merging).
"""

try:
    import torch as _torch  # noqa: F401
except ImportError as e:  # the base package works without it; this part cannot
    raise ImportError('shardstream.torch needs PyTorch, which is not installed: '
                      'pip install "shardstream[torch]" (or torch itself)', name="torch") from e

from .collate import passthrough
from .dataset import ShardDataset
from .state import (STATE_FORMAT, gather_state_dict, merge_state_dicts,
                    state_dict_from_stateful_dataloader)
from .topology import local_topology, ranks_per_node, topology

__all__ = ["ShardDataset", "topology", "local_topology", "ranks_per_node", "merge_state_dicts",
           "gather_state_dict", "state_dict_from_stateful_dataloader", "passthrough"]
