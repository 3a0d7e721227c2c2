"""The learner wing: the learner and its hooks (`learner`: `BaseLearner`), the process shell and its data
pipeline (`shell`: `LearnerSlave`), data-parallel ranks (`aggregator`: `LearnerAggregator`), its section of the
run config (`defaults`: `parallel.learner`)."""
