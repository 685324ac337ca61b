"""``horovod.common``'s public helpers, for scripts that import them (see ``collective.common.util``)."""
