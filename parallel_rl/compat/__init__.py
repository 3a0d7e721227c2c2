"""Other libraries' names over our loops: DI-engine's comm factories (`comm`) and cluster class names (`ding`),
tianshou's and torchrl's collectors (`collectors`). One collection loop in the code base, however many names
it answers to."""
