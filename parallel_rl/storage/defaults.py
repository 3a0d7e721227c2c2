"""The shared store's keys of the run config's ``parallel`` section (its root and the object store's options). A
module of its own, importing only the config's section type: the config's assembly reads it without loading the
store's backends."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict

from easydict import EasyDict

from ..config.section import Section, setting


@dataclasses.dataclass(frozen=True)
class StorageSection(Section):
    """The shared store: where the chunks, checkpoints and the coordinator's state live."""

    path = "parallel"
    title = "Shared store"

    shared_dir: str = setting(
        "",
        doc="""shared filesystem root: a local path or file:// URL, or an object store
        (s3://bucket/prefix, gs://, az://); empty: <exp_name>/shared""",
    )
    storage_options: Dict[str, Any] = setting(
        {},
        doc="""options of the object store's fsspec filesystem, e.g.
        dict(endpoint_url=..., profile=...) for s3fs (credentials are better left to AWS_ACCESS_KEY_ID /
        AWS_SECRET_ACCESS_KEY or a profile: every worker receives this config); any keys""",
    )


def storage_default_config() -> EasyDict:
    """The shared store's keys of the ``parallel`` section, with their defaults (the seed name)."""
    return StorageSection.defaults()
