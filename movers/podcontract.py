"""What the two pod contracts share (``movers.backup.request`` for the mover, ``movers.restore.request`` for the
writer): the one env variable that carries a request into a pod, reading the request back in the pod, one line of
what a model refused, and counters models made from the engine's stats dataclasses.

The flow renders a request's ``model_dump_json()`` into ``REQUEST_ENV``; the pod's CLI reads it back with
``request_from_env`` (a missing or unreadable request is a ``UsageError``: one line, exit code 2); the pod's result
goes to its termination log and the flow parses it with the result's own class (``summary`` says what it refused).
"""

from __future__ import annotations

import os
from dataclasses import fields
from typing import TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from movers.errors import UsageError

REQUEST_ENV = "CBT_MOVER_REQUEST"  # the pod's env variable holding its request (JSON)
# the most of a container's termination message file the kubelet reads (kubelet: MaxContainerTerminationMessageLength):
# a result written there must fit, or the flow reads a cut JSON document
TERMINATION_MESSAGE_MAX = 4096

Model = TypeVar("Model", bound=BaseModel)


def request_from_env(model: type[Model], name: str, what: str) -> Model:
    """The ``model`` in env variable ``name``; ``UsageError`` when it is not set or is not ``what`` (e.g. "a backup
    request this mover reads": another version's)."""
    text = os.environ.get(name)
    if not text:
        raise UsageError(f"--request-env {name}: the variable is not set")
    try:
        return model.model_validate_json(text)
    except ValidationError as err:
        raise UsageError(f"--request-env {name} is not {what} ({summary(err)})") from None


def summary(err: ValidationError) -> str:
    """What a model refused, on one line: ``field.path: message`` for each error."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors(include_url=False))


def counters_model(name: str, stats: type, doc: str) -> type[BaseModel]:
    """The counters of dataclass ``stats`` as a frozen model that keeps unknown keys (a newer pod's): their names,
    types and defaults declared there, once."""
    hints = get_type_hints(stats)
    return create_model(
        name,
        __config__=ConfigDict(frozen=True, extra="allow"),
        __doc__=doc,
        **{f.name: (hints[f.name], f.default) for f in fields(stats)},
    )
