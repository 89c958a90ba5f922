"""The baseline of `benchmarks/rollout.py`: the rollout project as a bare Serve app.

An ingress deployment calling a model deployment by handle (as ``bare_serve_app.py``), the
model as the peach project's component: an ``__init__`` that takes ``ROLLOUT_INIT_S`` (a model
loading), a unary ``hello`` and a ``ticks`` stream. The benchmark changes the model's
``ROLLOUT_VERSION`` (an env var of its runtime_env: a new version of its code, the ingress
untouched) and Serve rolls it with its defaults.

``in_place`` is the same ingress over ``InPlaceModel``, whose version comes in its
deployment's ``user_config`` and is applied by ``reconfigure`` in the running replica
(``benchmarks/rollout_reconfigure.py``): ``{"version": N, "mode": "sleep" | "cpu",
"seconds": S}`` makes ``reconfigure`` take ``S`` seconds of ``asyncio.sleep`` or of CPU in a
thread; its ``hello`` also says what the replica saw.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

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


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    total = 0
    while time.thread_time() < end:
        total += sum(range(1000))


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class InPlaceModel:
    def __init__(self) -> None:
        self.version = 0
        self.reconfigures = 0
        self.reconfiguring = False
        self.handled_while_reconfiguring = 0
        self.last_reconfigure = (0.0, 0.0)
        """Wall-clock start and end of the last reconfigure (``time.time``)."""

    async def reconfigure(self, config: dict[str, Any]) -> None:
        began = time.time()
        if self.reconfigures:  # the first one is the replica's start
            self.reconfiguring = True
            seconds = float(config.get("seconds", 3))
            try:
                if config.get("mode") == "cpu":
                    await asyncio.to_thread(_busy, seconds)
                else:
                    await asyncio.sleep(seconds)
            finally:
                self.reconfiguring = False
        self.reconfigures += 1
        self.version = int(config["version"])
        self.last_reconfigure = (began, time.time())

    def hello(self, name: str) -> dict:
        """The answer, and what the replica saw: calls it handled while it reconfigured
        (none means the router sent it none), when the last reconfigure ran."""
        if self.reconfiguring:
            self.handled_while_reconfiguring += 1
        return {
            "greeting": f"hello {name}",
            "version": self.version,
            "pid": os.getpid(),
            "handled_while_reconfiguring": self.handled_while_reconfiguring,
            "last_reconfigure": self.last_reconfigure,
        }

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
in_place = Ingress.bind(InPlaceModel.bind())
