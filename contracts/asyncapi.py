"""The AsyncAPI 3.0.0 document of agui-relay's topics, built from the catalog.

Every topic of ``TopicCatalog`` (default prefix) becomes a channel with its
Kafka bindings (partitions, cleanup policy, retention) and the message its
records carry; ``dispatch.{agent}`` is one parameterised channel. Which
service sends or receives on which topic is listed once, in ``SERVICES``.
The record schemas are inlined under ``components/schemas`` (their ``$defs``
hoisted, references rewritten) so any AsyncAPI parser resolves the document
without file references. A catalog topic with no contract here (a service's
internal changelog) gets an opaque object payload rather than a made-up one.
"""

from __future__ import annotations

from typing import Any

from contracts.headers import ascii_int
from contracts.records import SCHEMA_VERSION
from contracts.topics import TopicCatalog, TopicSpec
from contracts.wire_schema import EVENT_FILE, EVENT_TITLE, RECORDS, Schema, request_headers_schema

KAFKA_BINDING = "0.5.0"
HEADERS_TITLE = "EventHeaders"
REQUEST_HEADERS_TITLE = "RequestHeaders"

SERVICES: dict[str, tuple[tuple[str, str], ...]] = {
    "gatekeeper": (
        ("receive", "requests"), ("receive", "runs"), ("receive", "threads"),
        ("send", "decisions"), ("send", "dispatch"), ("send", "threads"),
        ("send", "deadletter"),
    ),
    "producer": (
        ("receive", "dispatch"), ("receive", "control"), ("send", "events"),
        ("send", "runs"), ("receive", "events"), ("receive", "runs"),
        ("send", "checkpoints"), ("receive", "checkpoints"), ("send", "deadletter"),
    ),
    "consumer-service": (
        ("send", "requests"), ("send", "control"), ("receive", "decisions"),
        ("receive", "events"), ("receive", "threads"), ("send", "deadletter"),
    ),
    "cli": (
        ("send", "requests"), ("send", "control"), ("receive", "events"),
        ("receive", "decisions"), ("receive", "threads"), ("receive", "deadletter"),
    ),
}
"""Who sends and receives on which topic role: the same table as the README's architecture
section and the topic catalog (``contracts.topics``) describe."""

KEYS: dict[str, str] = {
    "requests": "threadId of the input",
    "decisions": "threadId of the request (the request's key when its input had none)",
    "dispatch": "threadId of the input",
    "events": "threadId of the run",
    "runs": "threadId of the run",
    "threads": "threadId: one live record per thread after compaction",
    "control": "threadId of the run to stop",
    "deadletter": "the refused record's own key, when it had one",
}
"""What each topic's record key is (every topic is keyed by thread)."""

MESSAGES: dict[str, str] = {role: _name for _stem, _model, role in RECORDS
                            for _name in (_model.__name__,)}
MESSAGES["events"] = EVENT_TITLE
MESSAGES["runs"] = EVENT_TITLE
"""Topic role → message (and payload schema) name (``runs`` carries events' boundary records)."""


def message_name(role: str) -> str:
    """The message on ``role``'s topic (``<Role>Record`` when it has no contract)."""
    return MESSAGES.get(role) or _camel(role, "record", upper=True)


def _camel(*words: str, upper: bool = False) -> str:
    parts = [p for w in words for p in w.replace("-", " ").replace(".", " ").split()]
    head = parts[0].capitalize() if upper else parts[0]
    return head + "".join(p.capitalize() for p in parts[1:])


def _lower(name: str) -> str:
    return name[0].lower() + name[1:]


def _local(ref: str) -> str:
    return ref.replace("#/$defs/", "#/components/schemas/")


def to_asyncapi(schema: Any) -> Any:
    """A 2020-12 schema as an AsyncAPI (draft-07 superset) schema with component refs.

    ``discriminator`` is an OpenAPI object here but a bare property name in
    AsyncAPI, with another meaning: it is kept as the extension ``x-discriminator``.
    """
    if isinstance(schema, list):
        return [to_asyncapi(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: Schema = {}
    for key, value in sorted(schema.items()):
        if key in ("$schema", "$id", "$defs", "x-kafka-headers"):
            continue
        if key == "$ref":
            out[key] = _local(value)
        elif key == "discriminator":
            out["x-discriminator"] = {
                "propertyName": value["propertyName"],
                "mapping": {k: _local(v) for k, v in sorted(value["mapping"].items())},
            }
        elif key in ("properties", "patternProperties"):
            out[key] = {k: to_asyncapi(v) for k, v in sorted(value.items())}
        else:
            out[key] = to_asyncapi(value)
    return out


def component_schemas(schemas: dict[str, Schema], specs: list[TopicSpec]) -> dict[str, Schema]:
    """All record schemas and their ``$defs`` as one flat, sorted component map."""
    tops = {MESSAGES[role]: schemas[stem] for stem, _, role in RECORDS}
    tops[EVENT_TITLE] = schemas[EVENT_FILE]
    tops[HEADERS_TITLE] = schemas[EVENT_FILE]["x-kafka-headers"]
    tops[REQUEST_HEADERS_TITLE] = request_headers_schema()
    flat: dict[str, Schema] = {}
    for name, schema in tops.items():
        for key, sub in [(name, schema), *schema.get("$defs", {}).items()]:
            converted = to_asyncapi(sub)
            if key in flat and flat[key] != converted:
                raise RuntimeError(f"two different schemas are both named {key}")
            flat[key] = converted
    for spec in specs:
        if spec.role not in MESSAGES:
            flat[message_name(spec.role)] = {
                "type": "object",
                "title": message_name(spec.role),
                "description": f"{spec.description}. Internal to the service that writes it; "
                               "its schema is not part of contracts/.",
            }
    return dict(sorted(flat.items()))


def _topic_binding(spec: TopicSpec, parameterised: bool) -> Schema:
    config: Schema = {}
    for key, value in sorted(spec.configs.items()):
        if key == "cleanup.policy":
            config[key] = value.split(",")
        else:
            number = ascii_int(value, signed=True)
            config[key] = number if number is not None else value
    binding: Schema = {} if parameterised else {"topic": spec.name}
    binding.update(partitions=spec.partitions, replicas=1, topicConfiguration=config,
                   bindingVersion=KAFKA_BINDING)
    return {"kafka": binding}


def _channel(spec: TopicSpec) -> Schema:
    name = message_name(spec.role)
    parameterised = spec.role == "dispatch"
    channel: Schema = {"address": spec.name, "title": spec.role}
    if parameterised:
        channel["parameters"] = {
            "agent": {"description": "The agent's name (AGUI_AGENTS), e.g. approval."}
        }
        channel["description"] = (
            "Dispatch: admitted runs, one topic per agent hosted in the deployment"
        )
    else:
        channel["description"] = spec.description
    channel["messages"] = {_lower(name): {"$ref": f"#/components/messages/{name}"}}
    channel["bindings"] = _topic_binding(spec, parameterised)
    channel["x-copartitioned"] = spec.copartitioned
    return channel


def _message(role: str, components: dict[str, Schema]) -> Schema:
    name = message_name(role)
    description = str(components[name].get("description", ""))
    message: Schema = {
        "name": name,
        "title": name,
        "summary": description.split("\n")[0],
        "contentType": "application/json",
        "payload": {"$ref": f"#/components/schemas/{name}"},
    }
    if role in ("events", "runs"):
        message["headers"] = {"$ref": f"#/components/schemas/{HEADERS_TITLE}"}
    elif role == "requests":
        message["headers"] = {"$ref": f"#/components/schemas/{REQUEST_HEADERS_TITLE}"}
    message["bindings"] = {"kafka": {
        "key": {"type": "string", "description": KEYS.get(role, "threadId")},
        "bindingVersion": KAFKA_BINDING,
    }}
    return message


def _operations(roles: list[str]) -> Schema:
    operations: Schema = {}
    for service, uses in SERVICES.items():
        for action, role in uses:
            if role not in roles:
                continue
            name = message_name(role)
            operations[_camel(service, action, role)] = {
                "action": action,
                "channel": {"$ref": f"#/channels/{role}"},
                "summary": f"{service} {action}s {name} on {role}",
                "tags": [{"name": service}],
                "messages": [{"$ref": f"#/channels/{role}/messages/{_lower(name)}"}],
            }
    return operations


def asyncapi_document(schemas: dict[str, Schema], catalog: TopicCatalog | None = None) -> Schema:
    """The AsyncAPI 3.0.0 document of every topic under ``catalog``'s prefix."""
    catalog = catalog or TopicCatalog()
    specs = catalog.specs(("{agent}",))
    roles = [spec.role for spec in specs]
    components = component_schemas(schemas, specs)
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "agui-relay",
            "version": f"{SCHEMA_VERSION}.0.0",
            "description": (
                "AG-UI 1.0 runs carried over Apache Kafka, with the interrupt/resume rules "
                "enforced by a gatekeeper before any run is dispatched. Topic names are shown "
                f"under the default prefix `{catalog.prefix}` (AGUI_TOPIC_PREFIX) with "
                f"{catalog.partitions} partitions (AGUI_PARTITIONS). Every topic is keyed by "
                "threadId; x-copartitioned marks the topics that share one partition count. "
                "Work follows partitions: gatekeepers (group `<prefix>.gatekeeper`) read "
                "requests and runs, never events; consumer-service instances (group "
                "`<prefix>.consumer`) each read their own partitions of decisions and events, "
                "their assignment carrying every member's AGUI_ADVERTISED_URL, and forward a "
                "thread's HTTP requests to the instance that owns the thread's partition "
                "(marked `agui-forwarded-by`, never forwarded twice). "
                "Generated by `python -m contracts.generate` (make contracts); do not edit."
            ),
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:9092",
                "protocol": "kafka",
                "description": "The local Apache Kafka broker started by `make run`.",
            }
        },
        "channels": {spec.role: _channel(spec) for spec in specs},
        "operations": _operations(roles),
        "components": {
            "schemas": components,
            "messages": {message_name(role): _message(role, components) for role in roles},
        },
    }
