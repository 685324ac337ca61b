"""``horovod.runner``'s helpers that scripts import; the launcher itself is ``python -m collective.run``."""
