"""A streaming OpenAI-style server that misbehaves on purpose, for fault tests only (the real vLLM server cannot
be made to send these faults). python tests/faultserver.py PORT MODE; MODE: ok | slow | 500 | cut | badjson | garbage."""

import asyncio
import json
import sys

from aiohttp import web

MODE = sys.argv[2] if len(sys.argv) > 2 else "ok"


async def health(_):
    return web.Response(text="ok")


async def models(_):
    return web.json_response({"object": "list", "data": [{"id": "fault-model", "object": "model"}]})


async def completions(request):
    body = await request.json()
    n = body.get("max_tokens", 4)
    if MODE == "500":
        return web.json_response({"error": {"message": "injected failure"}}, status=500)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(n):
        await asyncio.sleep(0.05 if MODE == "slow" else 0.002)
        if MODE == "cut" and i == n // 2:
            request.transport.close()  # the connection drops half-way through the stream
            return resp
        if MODE == "badjson" and i == 1:
            await resp.write(b"data: {\"choices\": [{\"text\": \"x\"\n\n")
            continue
        if MODE == "garbage":
            await resp.write(b"this is not server-sent events\n\n")
            continue
        await resp.write(b"data: " + json.dumps({"choices": [{"index": 0, "text": " tok"}]}).encode() + b"\n\n")
    await resp.write(b"data: " + json.dumps({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}}).encode()
                     + b"\n\ndata: [DONE]\n\n")
    return resp


app = web.Application()
app.add_routes([web.get("/health", health), web.get("/v1/models", models), web.post("/v1/completions", completions)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
