"""Entry points: the serial pipeline and the local cluster launcher."""
