"""An MCP client nobody here wrote: the official Python SDK (`pip install mcp`, the 2.x line and
the 1.x line), driven by tests/mcp.rs.

Reads a plan as JSON on stdin, prints what happened as JSON on stdout:

- {"transport": "stdio", "command": ..., "args": [...], "calls": [...]}
- {"transport": "http", "url": ..., "headers": {...}, "calls": [...]}
- {"transport": "probe", "url": ..., "headers": {...}}: one raw initialize POST; its status.
- {"transport": "raw", "url": ..., "requests": [...]}: raw HTTP requests, see `raw`.
- {"transport": "race", ...}: one tenant's calls on another's session, see `race`.
- {"transport": "open", "url": ..., "key": ..., "count": N}: N sessions opened at once and
  never closed; how many the server opened.

A call is {"name": ..., "arguments": {...}}; an argument "$N.a.b" is replaced by field a.b of
the structured result of call N. The answer is {"sdk": version, "tools": [{"name",
"input_schema"}], "results": [{"is_error", "structured", "text"}]}.

`raw` and `race` use the standard library only, so they test the server and not the SDK.
"""

import asyncio
import json
import sys
import threading
import urllib.error
import urllib.request
from importlib.metadata import version

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

try:  # the 2.x line
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    def http_client(url, headers):
        return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))

except ImportError:  # the 1.x line
    from mcp.client.streamable_http import streamablehttp_client

    def http_client(url, headers):
        return streamablehttp_client(url, headers=headers)


def field(result, snake, camel):
    """A result's field: 2.x names it in snake case, 1.x in camel case."""
    return getattr(result, snake, None) if hasattr(result, snake) else getattr(result, camel, None)


def resolve(value, results):
    if isinstance(value, str) and value.startswith("$"):
        index, *path = value[1:].split(".")
        found = results[int(index)]["structured"]
        for key in path:
            found = found[int(key)] if isinstance(found, list) else found[key]
        return found
    if isinstance(value, dict):
        return {k: resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, results) for v in value]
    return value


async def run_calls(session, calls):
    await session.initialize()
    listed = await session.list_tools()
    answer = {
        "sdk": version("mcp"),
        "tools": [
            {"name": t.name, "input_schema": field(t, "input_schema", "inputSchema")}
            for t in listed.tools
        ],
        "results": [],
    }
    for call in calls:
        arguments = resolve(call.get("arguments", {}), answer["results"])
        result = await session.call_tool(call["name"], arguments)
        answer["results"].append(
            {
                "is_error": bool(field(result, "is_error", "isError")),
                "structured": field(result, "structured_content", "structuredContent"),
                "text": [c.text for c in result.content if getattr(c, "type", None) == "text"],
            }
        )
    return answer


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}


def send(url, method="POST", headers=None, body=None, timeout=10):
    """One HTTP request: {"status", "body", "session"} (the Mcp-Session-Id it answered)."""
    data = None
    if body is not None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    sent.update(headers or {})
    request = urllib.request.Request(url, data=data, headers=sent, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return {
                "status": response.status,
                "body": response.read().decode(errors="replace"),
                "session": response.headers.get("mcp-session-id"),
            }
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode(errors="replace"), "session": None}
    except OSError as error:  # a time-out: the server never answered
        return {"status": None, "body": repr(error), "session": None}


def probe(plan):
    answer = send(plan["url"], headers=plan.get("headers"), body=INITIALIZE)
    return {"status": answer["status"], "body": answer["body"]}


def raw(plan):
    """Requests in order: {"method", "headers", "body"}; a header value "$N" is the session id
    that request N answered, and an empty one is left out; body "initialize" is an initialize
    request."""
    results = []
    for request in plan["requests"]:
        headers = {
            name: results[int(value[1:])]["session"] if value.startswith("$") else value
            for name, value in request.get("headers", {}).items()
            if value != ""
        }
        body = request.get("body")
        if body == "initialize":
            body = INITIALIZE
        results.append(send(plan["url"], request.get("method", "POST"), headers, body))
    return {"results": results}


def open_session(url, key):
    """An initialized session of `key`: its id."""
    opened = send(url, headers={"Authorization": f"Bearer {key}"}, body=INITIALIZE)
    assert opened["status"] == 200 and opened["session"], opened
    done = send(
        url,
        headers={"Authorization": f"Bearer {key}", "Mcp-Session-Id": opened["session"]},
        body={"jsonrpc": "2.0", "method": "notifications/initialized"},
    )
    assert done["status"] in (200, 202), done
    return opened["session"]


def answered(body, request_id):
    """The JSON-RPC response to `request_id` in a JSON or SSE body, if any."""
    texts = [body] + [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
    for text in texts:
        try:
            message = json.loads(text)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("id") == request_id and (
            "result" in message or "error" in message
        ):
            return message
    return None


def race(plan):
    """The owner's session; each round, the owner and the intruder send a tools/call with the same
    JSON-RPC id on it at once. Counts the owner's calls left unanswered, the intruder's answers
    that carry `secret`, and the intruder's requests the server accepted. Stops early after 10
    anomalies, so a broken server fails fast."""
    url, call = plan["url"], plan["call"]
    session = open_session(url, plan["owner"])
    counts = {"rounds": 0, "unanswered": 0, "foreign": 0, "intruder_accepted": 0, "statuses": {}}
    for round_id in range(100, 100 + plan["rounds"]):
        body = {"jsonrpc": "2.0", "id": round_id, "method": "tools/call", "params": call}
        replies = {}

        def post(who, key):
            headers = {
                "Authorization": f"Bearer {key}",
                "Mcp-Session-Id": session,
                "Mcp-Protocol-Version": "2025-06-18",
            }
            replies[who] = send(url, headers=headers, body=body, timeout=5)

        threads = [
            threading.Thread(target=post, args=(who, plan[who])) for who in ("owner", "intruder")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        counts["rounds"] += 1
        owner, intruder = replies["owner"], replies["intruder"]
        mine = answered(owner["body"], round_id)
        if owner["status"] != 200 or mine is None or plan["secret"] not in owner["body"]:
            counts["unanswered"] += 1
        if plan["secret"] in intruder["body"]:
            counts["foreign"] += 1
        if intruder["status"] == 200:
            counts["intruder_accepted"] += 1
        status = str(intruder["status"])
        counts["statuses"][status] = counts["statuses"].get(status, 0) + 1
        counts["intruder_body"] = intruder["body"]
        if counts["unanswered"] + counts["foreign"] + counts["intruder_accepted"] >= 10:
            break
    return counts


def open_many(plan):
    from concurrent.futures import ThreadPoolExecutor

    def one(_):
        return send(plan["url"], headers={"Authorization": f"Bearer {plan['key']}"}, body=INITIALIZE)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, range(plan["count"])))
    return {"opened": sum(1 for a in answers if a["status"] == 200 and a["session"])}


async def main():
    plan = json.load(sys.stdin)
    if plan["transport"] == "probe":
        answer = probe(plan)
    elif plan["transport"] == "raw":
        answer = raw(plan)
    elif plan["transport"] == "race":
        answer = race(plan)
    elif plan["transport"] == "open":
        answer = open_many(plan)
    elif plan["transport"] == "stdio":
        params = StdioServerParameters(
            command=plan["command"], args=plan["args"], env=plan.get("env")
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                answer = await run_calls(session, plan["calls"])
    else:
        async with http_client(plan["url"], plan.get("headers")) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                answer = await run_calls(session, plan["calls"])
    print(json.dumps(answer))


if __name__ == "__main__":
    asyncio.run(main())
