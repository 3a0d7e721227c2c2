"""The collector wing: serial collectors (`serial`, `battle`), the cluster's collector logic (`cluster`,
`cluster_battle`, on the `base` interface) and its process shell (`shell`: `CollectorSlave`)."""
