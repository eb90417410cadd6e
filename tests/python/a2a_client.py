"""A plain A2A client for the interoperability tests: the official Python SDK (`a2a-sdk`, A2A v1).
It fetches the agent card with the SDK's card resolver (`A2ACardResolver`, from
BASE/.well-known/agent-card.json) and makes the client from that card with the SDK's
`ClientFactory`, restricted to one binding (--transport jsonrpc|grpc), so every command goes
through the interface the card lists for that binding.

Usage: a2a_client.py --card-url BASE [--transport jsonrpc|grpc] [--key KEY]
                     [--header NAME=VALUE]... [--tenant T] [--deadline SECONDS] COMMAND ...

Commands:
  card                       the public agent card
  extended-card              GetExtendedAgentCard
  send TOOL JSON             SendMessage with one data part {"tool": TOOL, "arguments": JSON}
      [--message-id ID] [--return-immediately]
  send-text TEXT             SendMessage with one text part
  stream TOOL JSON           SendStreamingMessage with the same data part: every event in order
      [--message-id ID] [--stop-on STATES]
  get TASK_ID                GetTask
  wait TASK_ID STATES        GetTask every 0.2 s until the task's state is one of STATES
                             (comma separated, e.g. TASK_STATE_AUTH_REQUIRED,TASK_STATE_COMPLETED)
                             or --deadline seconds pass
  subscribe TASK_ID          SubscribeToTask: every event in order
      [--stop-on STATES]
  cancel TASK_ID             CancelTask
  list                       ListTasks

--key KEY sends `Authorization: Bearer KEY` and --header NAME=VALUE sends NAME: VALUE on every
request: as HTTP headers on the card fetch and on JSON-RPC, as gRPC metadata (lower-cased
names) on gRPC. The SDK itself adds the `A2A-Version: 1.0` service parameter (HTTP header
`A2A-Version`, gRPC metadata `a2a-version`). --tenant T fills the requests' `tenant` field.

A streaming command reads until the server ends the stream, a task reaches one of the
--stop-on states (default: the terminal ones, TASK_STATE_COMPLETED, _FAILED, _CANCELED,
_REJECTED) or --deadline seconds pass. With --ready-file PATH it writes PATH once the first event
has arrived, so that a test acts on the task only when the stream is surely open.

Prints exactly one JSON object on stdout, with "command" and "transport", and exits 0 if the
server answered (an A2A error is an answer: the object then has "error": {"code", "message",
"status", ...}), 1 if it could not talk at all or failed part way (the object then has
"exception", beside what it saw before), 2 on bad usage. An error's "code" is the JSON-RPC
error code where one is known (an A2A error the SDK recognised on either binding, or the
JSON-RPC error object in an HTTP error's body), else the gRPC status name; its "status" is
the gRPC status name either way (an HTTP error status mapped as google.rpc does: 401
UNAUTHENTICATED, 403 PERMISSION_DENIED, ...), beside "grpc_status" or "http_status" and
"body" as met. HTTP error statuses seen on the way are in "http_errors".

A task prints as {"id", "contextId", "state" (e.g. "TASK_STATE_COMPLETED"), "statusText" (the
text parts of status.message, joined), "artifacts": [{"artifactId", "name", "parts": [{"text":
...} | {"data": ...}]}], "metadata"}; a message as {"messageId", "contextId", "taskId", "role",
"text", "parts", "metadata"}. Whole numbers in data parts print as integers (protobuf's Value
carries every number as a double).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
from google.protobuf import json_format, struct_pb2

from a2a.client import (
    A2ACardResolver,
    A2AClientTimeoutError,
    AgentCardResolutionError,
    Client,
    ClientCallInterceptor,
    ClientConfig,
    ClientFactory,
)
from a2a.client.client import ClientCallContext
from a2a.client.interceptors import AfterArgs, BeforeArgs
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2A_ERROR_MAPPING, JSON_RPC_ERROR_CODE_MAP, A2AError

BINDINGS = {"jsonrpc": TransportProtocol.JSONRPC, "grpc": TransportProtocol.GRPC}
TERMINAL = (
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_REJECTED",
)
POLL_INTERVAL = 0.2

# The gRPC status an HTTP status stands for (as in google.rpc's HTTP mapping), so an error has
# a transport-independent "status" on both bindings.
HTTP_TO_GRPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    412: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class CouldNotTalk(Exception):
    """The server could not be reached (no answer at all)."""


# ---------------------------------------------------------------------------------------------
# Printing protobuf objects as the wire's JSON


def plain(value: Any) -> Any:
    """JSON from protobuf's Value, with whole-number doubles as integers."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: plain(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [plain(inner) for inner in value]
    return value


def to_dict(message: Any) -> dict[str, Any]:
    """A protobuf message as its JSON mapping: camelCase names, enums by name."""
    return plain(json_format.MessageToDict(message))


def state_name(state: int) -> str:
    """The wire's name of a TaskState, e.g. TASK_STATE_COMPLETED."""
    return a2a_pb2.TaskState.Name(state)


def part_json(part: a2a_pb2.Part) -> dict[str, Any]:
    data = to_dict(part)
    out: dict[str, Any] = {}
    kind = part.WhichOneof("content")
    if kind is not None:
        out[kind] = data.get(kind)
    for key in ("mediaType", "filename", "metadata"):
        if key in data:
            out[key] = data[key]
    return out


def texts_of(parts: Any) -> str:
    return "\n".join(part.text for part in parts if part.WhichOneof("content") == "text")


def artifact_json(artifact: a2a_pb2.Artifact) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifactId": artifact.artifact_id,
        "name": artifact.name,
        "parts": [part_json(part) for part in artifact.parts],
    }
    if artifact.description:
        out["description"] = artifact.description
    if artifact.HasField("metadata"):
        out["metadata"] = to_dict(artifact.metadata)
    return out


def message_json(message: a2a_pb2.Message) -> dict[str, Any]:
    return {
        "messageId": message.message_id,
        "contextId": message.context_id,
        "taskId": message.task_id,
        "role": a2a_pb2.Role.Name(message.role),
        "text": texts_of(message.parts),
        "parts": [part_json(part) for part in message.parts],
        "metadata": to_dict(message.metadata) if message.HasField("metadata") else None,
    }


def task_json(task: a2a_pb2.Task) -> dict[str, Any]:
    status_message = task.status.message if task.status.HasField("message") else None
    return {
        "id": task.id,
        "contextId": task.context_id,
        "state": state_name(task.status.state),
        "statusText": texts_of(status_message.parts) if status_message else "",
        "artifacts": [artifact_json(artifact) for artifact in task.artifacts],
        "metadata": to_dict(task.metadata) if task.HasField("metadata") else None,
        "historyLength": len(task.history),
    }


# ---------------------------------------------------------------------------------------------
# Errors


def grpc_error_of(error: BaseException) -> grpc.aio.AioRpcError | None:
    """The gRPC failure an SDK exception was raised from, if any."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, grpc.aio.AioRpcError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def http_error_of(error: BaseException) -> httpx.HTTPStatusError | None:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, httpx.HTTPStatusError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def jsonrpc_error_in(text: str) -> dict[str, Any] | None:
    """The JSON-RPC error object in an HTTP error body, if the body is one."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"]
    return None


def error_json(error: BaseException) -> dict[str, Any]:
    """An answer the server gave as an error, the same shape on both bindings. Raises
    CouldNotTalk when the error says the server was not reached at all."""
    out: dict[str, Any] = {"type": type(error).__name__}
    rpc = grpc_error_of(error)
    if rpc is not None:
        out["grpc_status"] = rpc.code().name
        if rpc.code() == grpc.StatusCode.UNAVAILABLE and re.search(
            r"failed to connect|connection refused|errors resolving|DNS resolution failed",
            f"{rpc.details()} {rpc.debug_error_string()}",
            re.IGNORECASE,
        ):
            raise CouldNotTalk(f"gRPC {rpc.code().name}: {rpc.details()}") from error
    if isinstance(error, A2AError) and type(error) in JSON_RPC_ERROR_CODE_MAP:
        # An A2A error the SDK recognised (by JSON-RPC code, or by the gRPC ErrorInfo reason).
        out["code"] = JSON_RPC_ERROR_CODE_MAP[type(error)]
        out["message"] = error.message
        out["status"] = out.get("grpc_status") or A2A_ERROR_MAPPING[type(error)].grpc_status
        if error.data:
            out["data"] = error.data
        return out
    if rpc is not None:
        out["code"] = rpc.code().name
        out["status"] = rpc.code().name
        out["message"] = rpc.details() or ""
        return out
    http = http_error_of(error)
    if http is not None:
        status = http.response.status_code
        out["http_status"] = status
        out["status"] = HTTP_TO_GRPC_STATUS.get(status, "INTERNAL" if status >= 500 else "UNKNOWN")
        out["code"] = out["status"]
        out["message"] = str(http).splitlines()[0]
        try:
            body = http.response.text
        except httpx.ResponseNotRead:
            body = ""
        if body:
            out["body"] = body[:2000]
            inner = jsonrpc_error_in(body)
            if inner is not None:
                out["code"] = inner.get("code", out["code"])
                out["message"] = inner.get("message", out["message"])
                if "data" in inner:
                    out["data"] = inner["data"]
        return out
    message = str(error)
    # The SDK's fallback for a JSON-RPC error code it has no class for.
    found = re.match(r"JSON-RPC Error (-?\d+): (.*)", message, re.DOTALL)
    if found:
        out["code"] = int(found.group(1))
        out["message"] = found.group(2)
        out["status"] = "UNKNOWN"
        return out
    if isinstance(error, AgentCardResolutionError) and error.status_code is not None:
        out["http_status"] = error.status_code
        out["status"] = HTTP_TO_GRPC_STATUS.get(error.status_code, "UNKNOWN")
        out["code"] = out["status"]
        out["message"] = error.message
        return out
    raise CouldNotTalk(f"{type(error).__name__}: {message}") from error


def exception_json(error: BaseException) -> dict[str, Any]:
    """An exception, or the first leaf of an exception group."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    out: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    cause = error.__cause__
    if cause is not None:
        out["cause"] = {"type": type(cause).__name__, "message": str(cause)}
    return out


# ---------------------------------------------------------------------------------------------
# Credentials


class ServiceParameters(ClientCallInterceptor):
    """Adds the headers to every call's service parameters, which the SDK's transports send as
    HTTP headers (JSON-RPC) or as gRPC metadata."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers

    async def before(self, args: BeforeArgs) -> None:
        if args.context is None:
            args.context = ClientCallContext()
        if args.context.service_parameters is None:
            args.context.service_parameters = {}
        args.context.service_parameters.update(self.headers)

    async def after(self, args: AfterArgs) -> None:
        return None


def grpc_target(url: str) -> tuple[str, bool]:
    """The gRPC target for a card's gRPC interface URL, and whether it wants TLS. The card may
    give `host:port`, or a URL (grpc://, grpcs://, http://, https://) whose authority is the
    target."""
    found = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://([^/?#]+)", url)
    if not found:
        return url, False
    scheme = found.group(1).lower()
    return found.group(2), scheme in ("https", "grpcs")


# ---------------------------------------------------------------------------------------------
# Commands


def request_with_tenant(request: Any, args: argparse.Namespace) -> Any:
    if args.tenant:
        request.tenant = args.tenant
    return request


def parse_arguments(text: str) -> dict[str, Any]:
    try:
        arguments = json.loads(text)
    except ValueError as error:
        raise SystemExit(f"arguments are not JSON: {error}") from error
    if not isinstance(arguments, dict):
        raise SystemExit("arguments must be a JSON object")
    return arguments


def data_message(args: argparse.Namespace) -> a2a_pb2.Message:
    arguments = parse_arguments(args.arguments)
    part = a2a_pb2.Part(
        data=json_format.ParseDict({"tool": args.tool, "arguments": arguments}, struct_pb2.Value())
    )
    return a2a_pb2.Message(
        message_id=args.message_id or str(uuid.uuid4()),
        role=a2a_pb2.Role.ROLE_USER,
        parts=[part],
    )


def send_request(args: argparse.Namespace, message: a2a_pb2.Message) -> a2a_pb2.SendMessageRequest:
    request = a2a_pb2.SendMessageRequest(message=message)
    if getattr(args, "return_immediately", False):
        request.configuration.return_immediately = True
    return request_with_tenant(request, args)


class Aggregate:
    """The task a stream describes, built from its events as a client would."""

    def __init__(self) -> None:
        self.task: a2a_pb2.Task | None = None

    def _ensure(self, task_id: str, context_id: str) -> a2a_pb2.Task:
        if self.task is None:
            self.task = a2a_pb2.Task(id=task_id, context_id=context_id)
        return self.task

    def apply(self, event: a2a_pb2.StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "task":
            self.task = a2a_pb2.Task()
            self.task.CopyFrom(event.task)
        elif kind == "status_update":
            update = event.status_update
            self._ensure(update.task_id, update.context_id).status.CopyFrom(update.status)
        elif kind == "artifact_update":
            update = event.artifact_update
            task = self._ensure(update.task_id, update.context_id)
            for artifact in task.artifacts:
                if artifact.artifact_id == update.artifact.artifact_id:
                    if update.append:
                        artifact.parts.extend(update.artifact.parts)
                    else:
                        artifact.CopyFrom(update.artifact)
                    break
            else:
                task.artifacts.append(update.artifact)


def event_json(event: a2a_pb2.StreamResponse, aggregate: Aggregate) -> dict[str, Any]:
    kind = event.WhichOneof("payload")
    current = state_name(aggregate.task.status.state) if aggregate.task else None
    if kind == "task":
        return {"kind": "task", "state": state_name(event.task.status.state), "task": task_json(event.task)}
    if kind == "status_update":
        update = event.status_update
        status_message = update.status.message if update.status.HasField("message") else None
        return {
            "kind": "status",
            "state": state_name(update.status.state),
            "taskId": update.task_id,
            "contextId": update.context_id,
            "statusText": texts_of(status_message.parts) if status_message else "",
            "metadata": to_dict(update.metadata) if update.HasField("metadata") else None,
        }
    if kind == "artifact_update":
        update = event.artifact_update
        return {
            "kind": "artifact",
            "state": current,
            "taskId": update.task_id,
            "contextId": update.context_id,
            "artifact": artifact_json(update.artifact),
            "append": update.append,
            "lastChunk": update.last_chunk,
        }
    if kind == "message":
        return {"kind": "message", "state": current, "message": message_json(event.message)}
    return {"kind": "unknown", "state": current, "raw": to_dict(event)}


async def read_stream(
    stream: AsyncIterator[a2a_pb2.StreamResponse],
    args: argparse.Namespace,
    out: dict[str, Any],
) -> None:
    """Reads a stream into out["events"] and out["final"] until it ends, a --stop-on state
    shows, or the deadline passes."""
    stop_on = set(args.stop_on.split(",")) if args.stop_on else set(TERMINAL)
    aggregate = Aggregate()
    events: list[dict[str, Any]] = []
    out["events"] = events
    out["final"] = None
    out["timed_out"] = False
    out["ended"] = "stream_closed"

    async def consume() -> None:
        async for event in stream:
            aggregate.apply(event)
            out["final"] = task_json(aggregate.task) if aggregate.task else None
            shown = event_json(event, aggregate)
            events.append(shown)
            if len(events) == 1 and args.ready_file:
                # The stream is open and has answered: whoever waits on the file may act now.
                with open(args.ready_file, "w") as ready:
                    ready.write(shown.get("state") or "")
            if shown["kind"] in ("task", "status") and shown["state"] in stop_on:
                out["ended"] = "stop_state"
                return

    try:
        await asyncio.wait_for(consume(), timeout=args.deadline)
    except asyncio.TimeoutError:
        out["timed_out"] = True
        out["ended"] = "deadline"
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:  # noqa: BLE001 - closing an abandoned stream is best effort
                pass


async def run_command(client: Client, card: a2a_pb2.AgentCard, args: argparse.Namespace, out: dict[str, Any]) -> None:
    # Bounds each unary call; the streams are bounded by read_stream instead.
    unary = ClientCallContext(timeout=args.deadline)
    command = args.command
    if command == "extended-card":
        request = request_with_tenant(a2a_pb2.GetExtendedAgentCardRequest(), args)
        out["cardAdvertisesExtended"] = card.capabilities.extended_agent_card
        out["card"] = to_dict(await client.get_extended_agent_card(request, context=unary))
    elif command in ("send", "send-text"):
        if command == "send":
            message = data_message(args)
        else:
            message = a2a_pb2.Message(
                message_id=args.message_id or str(uuid.uuid4()),
                role=a2a_pb2.Role.ROLE_USER,
                parts=[a2a_pb2.Part(text=args.text)],
            )
        out["messageId"] = message.message_id
        async for event in client.send_message(send_request(args, message), context=unary):
            kind = event.WhichOneof("payload")
            if kind == "task":
                out["task"] = task_json(event.task)
            elif kind == "message":
                out["message"] = message_json(event.message)
            else:
                out.setdefault("other", []).append(to_dict(event))
    elif command == "stream":
        message = data_message(args)
        out["messageId"] = message.message_id
        out["cardStreaming"] = card.capabilities.streaming
        await read_stream(client.send_message(send_request(args, message)), args, out)
    elif command == "get":
        request = request_with_tenant(a2a_pb2.GetTaskRequest(id=args.task_id), args)
        out["task"] = task_json(await client.get_task(request, context=unary))
    elif command == "wait":
        wanted = [state for state in args.states.split(",") if state]
        request = request_with_tenant(a2a_pb2.GetTaskRequest(id=args.task_id), args)
        deadline = time.monotonic() + args.deadline
        out["polls"] = 0
        out["timed_out"] = False
        while True:
            task = task_json(await client.get_task(request, context=ClientCallContext(timeout=args.deadline)))
            out["polls"] += 1
            out["task"] = task
            if task["state"] in wanted:
                return
            if time.monotonic() + POLL_INTERVAL > deadline:
                out["timed_out"] = True
                return
            await asyncio.sleep(POLL_INTERVAL)
    elif command == "subscribe":
        request = request_with_tenant(a2a_pb2.SubscribeToTaskRequest(id=args.task_id), args)
        await read_stream(client.subscribe(request), args, out)
    elif command == "cancel":
        request = request_with_tenant(a2a_pb2.CancelTaskRequest(id=args.task_id), args)
        out["task"] = task_json(await client.cancel_task(request, context=unary))
    elif command == "list":
        request = request_with_tenant(a2a_pb2.ListTasksRequest(), args)
        listed = await client.list_tasks(request, context=unary)
        out["tasks"] = [task_json(task) for task in listed.tasks]
        out["nextPageToken"] = listed.next_page_token
        out["totalSize"] = listed.total_size
    else:  # pragma: no cover - argparse keeps to the commands above
        raise SystemExit(f"unknown command {command}")


async def run(args: argparse.Namespace, headers: dict[str, str], out: dict[str, Any]) -> None:
    """Runs the command, filling `out` as it goes, so a failure part way still shows what came
    before it."""
    binding = BINDINGS[args.transport]
    # One HTTP client for the card fetch and the JSON-RPC calls: it carries the credentials, and
    # the factory adds A2A-Version to it.
    http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(args.deadline))
    statuses: list[int] = []

    async def note_status(response: httpx.Response) -> None:
        if response.status_code >= 400:
            statuses.append(response.status_code)
            out["http_errors"] = statuses

    http.event_hooks["response"].append(note_status)
    def grpc_channel(url: str) -> grpc.aio.Channel:
        target, tls = grpc_target(url)
        out["grpc_target"] = target
        if tls:
            return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())
        return grpc.aio.insecure_channel(target)

    config = ClientConfig(
        # BaseClient streams (and allows SubscribeToTask) only when this is set; `send` wants the
        # plain SendMessage.
        streaming=args.command in ("stream", "subscribe"),
        httpx_client=http,
        grpc_channel_factory=grpc_channel,
        supported_protocol_bindings=[binding],
    )
    factory = ClientFactory(config)
    try:
        try:
            card = await A2ACardResolver(http, args.card_url).get_agent_card()
        except AgentCardResolutionError as error:
            out["error"] = error_json(error)
            out["stage"] = "card"
            return
        if args.command == "card":
            out["card"] = to_dict(card)
            return
        chosen = ClientFactory._find_best_interface(  # the factory's own choice, for the report
            list(card.supported_interfaces), protocol_bindings=[binding]
        )
        out["interface"] = to_dict(chosen) if chosen is not None else None
        try:
            client = factory.create(card, interceptors=[ServiceParameters(headers)])
        except ValueError as error:
            raise CouldNotTalk(f"the card lists no usable {binding.value} interface: {error}") from error
        try:
            await run_command(client, card, args, out)
        except A2AClientTimeoutError:
            raise
        except (A2AError, grpc.aio.AioRpcError) as error:
            out["error"] = error_json(error)
            if "ended" in out:
                out["ended"] = "error"
        finally:
            await client.close()
    finally:
        await http.aclose()


def parse_headers(args: argparse.Namespace) -> dict[str, str]:
    headers: dict[str, str] = {}
    if args.key:
        headers["Authorization"] = f"Bearer {args.key}"
    for item in args.header or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--header wants NAME=VALUE, not {item!r}")
        headers[name] = value
    return headers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--card-url", required=True, help="HTTP base URL; the card is at BASE/.well-known/agent-card.json")
    parser.add_argument("--transport", choices=sorted(BINDINGS), default="jsonrpc", help="the card's interface to use")
    parser.add_argument("--key", help="sent as Authorization: Bearer KEY (HTTP header and gRPC metadata)")
    parser.add_argument("--header", action="append", metavar="NAME=VALUE", help="one more header on every request")
    parser.add_argument("--tenant", help="the requests' tenant field")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds a call, wait or stream may take")
    parser.add_argument("--ready-file", help="written once a stream has delivered its first event")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("card")
    commands.add_parser("extended-card")
    send = commands.add_parser("send")
    send.add_argument("tool")
    send.add_argument("arguments", help="the arguments as a JSON object")
    send.add_argument("--message-id")
    send.add_argument("--return-immediately", action="store_true")
    send_text = commands.add_parser("send-text")
    send_text.add_argument("text")
    send_text.add_argument("--message-id")
    stream = commands.add_parser("stream")
    stream.add_argument("tool")
    stream.add_argument("arguments", help="the arguments as a JSON object")
    stream.add_argument("--message-id")
    stream.add_argument("--stop-on", help="comma-separated states that end the reading")
    for name in ("get", "cancel"):
        commands.add_parser(name).add_argument("task_id")
    wait = commands.add_parser("wait")
    wait.add_argument("task_id")
    wait.add_argument("states", help="comma-separated TASK_STATE_* names")
    subscribe = commands.add_parser("subscribe")
    subscribe.add_argument("task_id")
    subscribe.add_argument("--stop-on", help="comma-separated states that end the reading")
    commands.add_parser("list")
    args = parser.parse_args()
    out: dict[str, Any] = {"command": args.command, "transport": args.transport}
    try:
        headers = parse_headers(args)
        if hasattr(args, "arguments"):
            parse_arguments(args.arguments)  # bad usage, before any traffic
        asyncio.run(run(args, headers, out))
        code = 0
    except SystemExit as error:
        if isinstance(error.code, str):
            print(error.code, file=sys.stderr)
            return 2
        raise
    except BaseException as error:  # noqa: BLE001 - the test wants to see any failure as JSON
        out["exception"] = exception_json(error)
        code = 1
    print(json.dumps(out))
    return code


if __name__ == "__main__":
    sys.exit(main())
