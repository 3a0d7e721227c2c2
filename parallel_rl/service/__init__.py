"""The service (``parallel-rl serve``): several trainings (runs) on one pool of collector and learner processes,
shared fairly (:mod:`.share`); a run is a coordinator in the service's process whose workers the pool forks
(:mod:`.hosted`); the runs are kept in ``DIR/service.json`` (:mod:`.runs`) and resumed after a restart
(:mod:`.service`). The CLI is :mod:`.commands`; the REST views are ``coordinator_app.service``. Nothing is
imported here: the CLI reads its parsers without the launcher's imports."""
