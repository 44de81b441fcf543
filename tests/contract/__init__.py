"""One contract suite, run against every storage backend."""
