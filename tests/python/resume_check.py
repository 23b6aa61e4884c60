"""The exactly-once check the format tests share: each of 2 ranks reads with a
StatefulDataLoader of 2 workers, saves its state after some batches, loses the
next batch (a "crash"), and resumes from the state; returns every value of
`field` delivered, over both ranks (each value should come once)."""

import pickle

from torchdata.stateful_dataloader import StatefulDataLoader

from shardstream.torch import passthrough


def delivered_over_two_ranks(make_ds, field, before_batches=3):
    delivered = []
    for rank in range(2):
        ds = make_ds(rank)
        sdl = StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough)
        it = iter(sdl)
        before = [int(x) for _ in range(before_batches) for x in next(it)[field]]
        state = pickle.loads(pickle.dumps(sdl.state_dict()))
        next(it)  # lost with the "crash"
        del it, sdl
        ds.close()
        ds = make_ds(rank)
        sdl = StatefulDataLoader(ds, batch_size=None, num_workers=2, collate_fn=passthrough)
        sdl.load_state_dict(state)
        after = [int(x) for b in sdl for x in b[field]]
        ds.close()
        assert not set(before) & set(after), "a value delivered before the save came again"
        delivered += before + after
    return delivered
