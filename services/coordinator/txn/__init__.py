"""The transaction coordinator's pure core (issue 22): ``__transaction_state`` records (``records``), the
state machine (``state``) and the per-partition shard that decides and replays (``shard``). No I/O."""
