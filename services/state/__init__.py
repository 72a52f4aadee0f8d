"""Local state per owned partition: an on-disk store, a bounded cache, a changelog checkpoint.

A service that owns partition p of a keyed input keeps what it knows of p's
keys in an embedded RocksDB database of its own (``disk.PartitionStore``,
one directory per partition under ``AGUI_STATE_DIR``), with a cache of
decoded values bounded in bytes in front (``cache.ByteLRU``,
``AGUI_STATE_CACHE_MB``). A compacted topic is the store's changelog: every
value the store holds was first committed there, and the store records,
in the same RocksDB write batch as the values, the changelog offset it
reflects. On assignment only the records after that offset are read
(``changelog.catch_up``); a store that cannot be trusted (none, corrupt or
foreign files, a checkpoint the topic cannot account for) is wiped and
rebuilt from the topic, with a log line saying why (``plan``, pure).

``dirs.StateDir`` lays the directories out, guarantees that two processes
never open one partition's store (a lock file held while it is open), and
deletes the stores of partitions no longer owned once a grace period has
passed. ``metrics`` tells Prometheus the size on disk, the cache's hits and
misses, and what each restore read and how long it took.

Errors: ``StoreUnusableError`` (the files cannot be opened or read as a store:
rebuilt), ``StoreLockedError`` (another process holds the partition),
``StoreWriteError`` (a write failed, e.g. the disk is full: the owner keeps
what it could not write in memory and reports not ready).
"""

from services.state.disk import (
    PartitionStore,
    StoreError,
    StoreLockedError,
    StoreUnusableError,
    StoreWriteError,
)

__all__ = [
    "PartitionStore",
    "StoreError",
    "StoreLockedError",
    "StoreUnusableError",
    "StoreWriteError",
]
