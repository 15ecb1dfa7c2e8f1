"""Field rules of the APIs' typed requests, shared by their modules and by the REST door's paths and
queries: Kafka's topic-name rule, name limits, integer bounds, config names and values."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

#: Topic names as Kafka allows them: letters, digits, '.', '_', '-', at most 249 characters, not "." or "..".
TOPIC_NAME_PATTERN = r"^([a-zA-Z0-9_-][a-zA-Z0-9._-]*|\.[a-zA-Z0-9_-][a-zA-Z0-9._-]*|\.\.[a-zA-Z0-9._-]+)$"
TOPIC_NAME_MAX = 249
TOPIC_NAME_SCHEMA: dict[str, Any] = {"pattern": TOPIC_NAME_PATTERN, "minLength": 1, "maxLength": TOPIC_NAME_MAX}
#: Group ids, client ids and user names: Kafka takes any string; here 1-255 characters without control
#: characters (C0, DEL, C1). The services check the rest (printable).
NAME_MAX = 255
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: A config value: Kafka's string form ("604800000", "true"), or a JSON number/boolean of the
#: config's own type. Integers are int64; "3" is never read as a JSON integer field elsewhere.
ConfigValue = Annotated[StrictInt, Field(ge=INT64_MIN, le=INT64_MAX)] | StrictFloat | StrictBool | Annotated[
    StrictStr, Field(max_length=1024)]
ConfigName = Annotated[StrictStr, Field(min_length=1, max_length=255)]
#: A user name or client id (``<default>`` names the default entity in queries).
EntityName = Annotated[StrictStr, Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
