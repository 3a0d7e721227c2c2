"""Configs: defaults from every component (:mod:`.assembly`), deep merge and strict validation (:mod:`.schema`).

A config is a nested dict (EasyDict-compatible). ``compile_config(user_cfg)`` deep-merges the user's values
over :func:`default_config` and rejects keys the defaults do not know, naming the key and the closest valid
one. A default that is an empty dict is *open*: any keys are accepted below it (e.g. env kwargs).
"""

from .assembly import compile_config, default_buffer_type, default_config, load_cluster_config, load_config
from .schema import (
    RUN_CONFIG_NAME,
    SELFPLAY_POLICY_TYPES,
    apply_overrides,
    check_cluster_config,
    coerce,
    load_config_file,
    merge,
    parse_override,
    read_run_config,
    save_run_config,
    validate,
)

__all__ = [
    "RUN_CONFIG_NAME",
    "SELFPLAY_POLICY_TYPES",
    "apply_overrides",
    "check_cluster_config",
    "coerce",
    "compile_config",
    "default_buffer_type",
    "default_config",
    "load_cluster_config",
    "load_config",
    "load_config_file",
    "merge",
    "parse_override",
    "read_run_config",
    "save_run_config",
    "validate",
]
