"""The baseline of `benchmarks/rollout.py`: the rollout project as a bare Serve app.

An ingress deployment calling a model deployment by handle (as ``bare_serve_app.py``), the
model as the peach project's component: an ``__init__`` that takes ``ROLLOUT_INIT_S`` (a model
loading), a unary ``hello`` and a ``ticks`` stream. The benchmark changes the model's
``ROLLOUT_VERSION`` (an env var of its runtime_env: a new version of its code, the ingress
untouched) and Serve rolls it with its defaults.
"""

from __future__ import annotations

import asyncio
import os
import time

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Model:
    def __init__(self) -> None:
        time.sleep(float(os.environ.get("ROLLOUT_INIT_S", "3")))
        self.version = int(os.environ.get("ROLLOUT_VERSION", "1"))

    def hello(self, name: str) -> dict:
        return {"greeting": f"hello {name}", "version": self.version}

    async def ticks(self, n: int, gap: float):
        for i in range(n):
            yield f"{self.version} {i}\n"
            await asyncio.sleep(gap)


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Ingress:
    def __init__(self, model) -> None:
        self.model = model

    async def __call__(self, request: Request) -> Response:
        query = request.query_params
        if request.url.path.endswith("/ticks"):
            handle = self.model.options(stream=True)
            chunks = handle.ticks.remote(int(query.get("n", "10")), float(query.get("gap", "0.1")))

            async def body():
                async for chunk in chunks:
                    yield chunk

            return StreamingResponse(body())
        return JSONResponse(await self.model.hello.remote(query.get("name", "world")))


app = Ingress.bind(Model.bind())
