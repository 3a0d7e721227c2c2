"""The wire protocol between the coordinator and its workers, as dataclasses: one source for the senders, the
coordinator's checks, the OpenAPI document (``coordinator_app/openapi.py``) and ``docs/protocol.md``.

A worker builds a message and sends ``msg.to_json()``; the coordinator reads it with ``Cls.from_json(obj)``,
which checks everything that needs no state (types, ranges, finite numbers) and raises
:class:`~parallel_rl.errors.ProtocolViolation` naming the field. What needs the coordinator's state (the task
runs on the sender, the chunk is on the shared disk, the policy was published) is checked by its message table
(``parallel_rl/coordinator/messages.py``). Fields a reader does not know are ignored: a newer sender may add
some. Numbers keep their limits in the field's metadata (``lo``, ``hi``), where ``from_json`` reads them and
``coordinator_app/openapi.py`` makes each class's schema from its fields.

It stands on the floors below: the transport's codec (``field``/``number_field`` read the REST bodies with the
same words as every other view) and the store's ``check_health_report`` (a worker's report on the store).

Its modules, imported from here: ``fields`` (the limits, ``wire`` and the checks the messages share), ``parts``
(the store report and time breakdown that messages carry), ``messages`` (the metadata messages) and ``bodies``
(the request bodies and the sample answer).
"""

from .bodies import (
    BODIES,
    COMPARE_FORMATS,
    COMPARE_GROUPS,
    MAX_COMPARE_REPS,
    MAX_COMPARE_RUNS,
    CompareQuery,
    Heartbeat,
    MetadataBatch,
    Registration,
    RunSubmission,
    SampleAnswer,
    SampleRequest,
)
from .fields import (
    MAX_COUNTER,
    MAX_RANKS,
    MAX_STEPS_PER_MESSAGE,
    MAX_TASK_IDS,
    PRIORITY_KEYS,
    REFERENCE_KEYS,
    ROLES,
    check_eval_result,
    checked_int,
    finite_number,
    wire,
)
from .messages import (
    MESSAGES,
    Chunk,
    ChunkDamaged,
    Games,
    LearnInfo,
    Message,
    Policy,
    TaskCancelled,
    TaskDone,
    TaskEnd,
    TaskFailed,
    message_class,
    parse_message,
)
from .parts import MAX_PHASES, StorageReport, TimeBreakdown

__all__ = [
    "BODIES",
    "Heartbeat",
    "MetadataBatch",
    "Registration",
    "RunSubmission",
    "CompareQuery",
    "COMPARE_FORMATS",
    "COMPARE_GROUPS",
    "MAX_COMPARE_REPS",
    "MAX_COMPARE_RUNS",
    "SampleAnswer",
    "SampleRequest",
    "MAX_COUNTER",
    "MAX_RANKS",
    "MAX_STEPS_PER_MESSAGE",
    "MAX_TASK_IDS",
    "PRIORITY_KEYS",
    "REFERENCE_KEYS",
    "ROLES",
    "check_eval_result",
    "checked_int",
    "finite_number",
    "wire",
    "MESSAGES",
    "Chunk",
    "ChunkDamaged",
    "Games",
    "LearnInfo",
    "Message",
    "Policy",
    "TaskCancelled",
    "TaskDone",
    "TaskEnd",
    "TaskFailed",
    "message_class",
    "parse_message",
    "MAX_PHASES",
    "StorageReport",
    "TimeBreakdown",
]
