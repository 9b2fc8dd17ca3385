"""An MCP client nobody here wrote: the official Python SDK (`pip install mcp`), driven by
tests/mcp.rs.

Reads a plan as JSON on stdin, prints what happened as JSON on stdout:

- {"transport": "stdio", "command": ..., "args": [...], "calls": [...]}
- {"transport": "http", "url": ..., "headers": {...}, "calls": [...]}
- {"transport": "probe", "url": ..., "headers": {...}}: one raw initialize POST; its status.

A call is {"name": ..., "arguments": {...}}; an argument "$N.a.b" is replaced by field a.b of
the structured result of call N. The answer is {"tools": [{"name", "input_schema"}],
"results": [{"is_error", "structured", "text"}]}.
"""

import asyncio
import json
import sys
import urllib.error
import urllib.request

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client


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
        "tools": [{"name": t.name, "input_schema": t.inputSchema} for t in listed.tools],
        "results": [],
    }
    for call in calls:
        arguments = resolve(call.get("arguments", {}), answer["results"])
        result = await session.call_tool(call["name"], arguments)
        answer["results"].append(
            {
                "is_error": bool(result.isError),
                "structured": result.structuredContent,
                "text": [c.text for c in result.content if getattr(c, "type", None) == "text"],
            }
        )
    return answer


def probe(plan):
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "probe", "version": "0"},
            },
        }
    ).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    headers.update(plan.get("headers", {}))
    request = urllib.request.Request(plan["url"], data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return {"status": response.status}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "body": error.read().decode(errors="replace")}


async def main():
    plan = json.load(sys.stdin)
    if plan["transport"] == "probe":
        answer = probe(plan)
    elif plan["transport"] == "stdio":
        params = StdioServerParameters(
            command=plan["command"], args=plan["args"], env=plan.get("env")
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                answer = await run_calls(session, plan["calls"])
    else:
        async with streamablehttp_client(plan["url"], headers=plan.get("headers")) as (
            read,
            write,
            _,
        ):
            async with ClientSession(read, write) as session:
                answer = await run_calls(session, plan["calls"])
    print(json.dumps(answer))


if __name__ == "__main__":
    asyncio.run(main())
