"""The evaluator wing: serial evaluators (`serial`: `InteractionSerialEvaluator`, `MetricSerialEvaluator`;
`battle`: two-player games). The cluster evaluates on collectors (`parallel_rl.collector.cluster`)."""
