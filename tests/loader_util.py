"""DataLoader workers shut down on purpose in tests that run users' examples."""

from __future__ import annotations


def shut_down_loaders(scope: dict) -> None:
    """Shut down the workers of every DataLoader in `scope` (the namespace a guide's example ran in) now. An example
    that stops early (`islice(loader, 2)`) leaves persistent workers waiting on their index queues; collected later,
    in whichever test the garbage collector runs, each waits out its join timeout (10 s seen)."""
    from torch.utils.data import DataLoader

    for value in list(scope.values()):
        iterator = getattr(value, "_iterator", None) if isinstance(value, DataLoader) else None
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
            value._iterator = None
