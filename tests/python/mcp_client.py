"""A plain MCP client for the interoperability tests: the official Python SDK (`mcp`) with its
default settings, over its streamable HTTP transport (`mcp.client.streamable_http`).

Commands:
  list-tools                 the tools the server lists
  call TOOL JSON             one tools/call with JSON arguments
  call-and-poll TOOL JSON    a tools/call; if the answer is an error result with code
                             `approval_pending`, polls `gatehouse.call_status {call_id}` until
                             the call is final or --deadline seconds pass

Prints exactly one JSON object on stdout describing what it saw, and exits 0 if the server
answered (a JSON-RPC error is an answer), 1 if it could not talk MCP at all or failed part way
(the object then has "exception", beside what it saw before), 2 on bad usage. HTTP error
statuses it met are in "http_errors".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

PENDING = "approval_pending"
STATUS_TOOL = "gatehouse.call_status"


def dump(model: Any) -> Any:
    """A pydantic model as the JSON the server sent (aliases such as `isError`, `_meta`)."""
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


def result_json(result: Any) -> dict[str, Any]:
    data = dump(result)
    return {
        "content": data.get("content", []),
        "structuredContent": data.get("structuredContent"),
        "isError": bool(data.get("isError", False)),
        "_meta": data.get("_meta"),
    }


def find_pending(value: Any) -> dict[str, Any] | None:
    """The object that says `code: approval_pending`, wherever the result carries it: in
    structuredContent, in _meta, or as JSON in a text block."""
    if isinstance(value, dict):
        if value.get("code") == PENDING:
            return value
        for inner in value.values():
            found = find_pending(inner)
            if found is not None:
                return found
    elif isinstance(value, list):
        for inner in value:
            found = find_pending(inner)
            if found is not None:
                return found
    elif isinstance(value, str) and PENDING in value:
        try:
            return find_pending(json.loads(value))
        except ValueError:
            return None
    return None


def pending_of(result: dict[str, Any]) -> dict[str, Any] | None:
    if not result["isError"]:
        return None
    return find_pending([result["structuredContent"], result["_meta"], result["content"]])


def call_id_of(pending: dict[str, Any]) -> str | None:
    for key in ("call_id", "callId"):
        if isinstance(pending.get(key), str):
            return pending[key]
    return None


def error_json(error: MCPError) -> dict[str, Any]:
    return {"code": error.code, "message": error.message, "data": error.data}


def exception_json(error: BaseException) -> dict[str, Any]:
    """An exception, or the first leaf of an exception group, with an HTTP status if one shows."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    out: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    response = getattr(error, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        out["http_status"] = status
    return out


async def run(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """Runs the command, filling `out` as it goes, so a failure part way still shows what came
    before it."""
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else None
    http = create_mcp_http_client(headers=headers)
    # The SDK reports an HTTP error status only as a generic JSON-RPC error: note the statuses.
    statuses: list[int] = []

    async def note_status(response: Any) -> None:
        if response.status_code >= 400:
            statuses.append(response.status_code)
            out["http_errors"] = statuses

    http.event_hooks["response"].append(note_status)
    transport = streamable_http_client(args.url, http_client=http)
    async with Client(transport, mode=args.mode) as client:
        out["protocol_version"] = getattr(client.session, "protocol_version", None)
        if args.command == "list-tools":
            listed = await client.list_tools()
            tools = [dump(tool) for tool in listed.tools]
            out["tools"] = [tool["name"] for tool in tools]
            out["listed"] = tools
            return out

        try:
            arguments = json.loads(args.arguments)
        except ValueError as error:
            raise SystemExit(f"arguments are not JSON: {error}") from error
        try:
            result = result_json(await client.call_tool(args.tool, arguments))
        except MCPError as error:
            out["error"] = error_json(error)
            return out
        out["result"] = result
        if args.command == "call":
            return out

        pending = pending_of(result)
        out["pending"] = pending
        out["polls"] = 0
        if pending is None:
            # Final at once: an approver may have acted before the answer was made.
            out["final"] = not still_running(result)
            return out
        call_id = call_id_of(pending)
        if call_id is None:
            out["poll_error"] = "approval_pending without a call id"
            return out
        deadline = time.monotonic() + args.deadline
        while True:
            try:
                status = result_json(await client.call_tool(STATUS_TOOL, {"call_id": call_id}))
            except MCPError as error:
                out["error"] = error_json(error)
                return out
            out["polls"] += 1
            out["result"] = status
            if pending_of(status) is None and not still_running(status):
                out["final"] = True
                return out
            if time.monotonic() > deadline:
                out["final"] = False
                return out
            await asyncio.sleep(args.interval)


def still_running(result: dict[str, Any]) -> bool:
    """Whether a call_status answer describes a call that has not ended yet."""
    structured = result["structuredContent"]
    if not isinstance(structured, dict):
        return False
    state = structured.get("state") or structured.get("status")
    return state in ("pending", "approved", "executing")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the MCP endpoint")
    parser.add_argument("--key", help="sent as Authorization: Bearer")
    parser.add_argument(
        "--mode",
        default="auto",
        help="the SDK's negotiation: auto (its default), legacy, or a version such as 2026-07-28",
    )
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds call-and-poll polls for")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between polls")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list-tools")
    for name in ("call", "call-and-poll"):
        command = commands.add_parser(name)
        command.add_argument("tool")
        command.add_argument("arguments", help="the arguments as a JSON object")
    args = parser.parse_args()
    out: dict[str, Any] = {"command": args.command}
    try:
        asyncio.run(run(args, out))
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
