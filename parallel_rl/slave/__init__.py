"""What every worker process is: a slave of the coordinator (`slave`: `Slave`), its HTTP app (`app`), task
inbox and metadata outbox (`mail`), registration and heartbeats (`link`), the `parallel.worker` defaults (`defaults`) and
DI-engine's comm base classes (`comm`)."""
