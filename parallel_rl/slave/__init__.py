"""What every worker process is: a slave of the coordinator (`slave`: `Slave`), its HTTP app (`app`), task
inbox and metadata outbox (`mail`), registration, heartbeats and the `parallel.worker` defaults (`link`) and
DI-engine's comm base classes (`comm`)."""
