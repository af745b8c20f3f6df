"""Backup policies: the model (``model``: ``BackupPolicy`` and one frozen pydantic model per section, loaded
from YAML), the hooks section (``hooks``: quiesce hooks as data, from a policy or from pod annotations),
the field checks they validate with (``checks``) and a backup flow run's policy, its parameters applied over the
policy file (``overrides``).

Nothing is re-exported here: import ``movers.policy.model`` / ``movers.policy.checks`` /
``movers.policy.hooks`` / ``movers.policy.overrides``, so that a light import (``checks`` from the CLI) does not
load the whole model.
"""
