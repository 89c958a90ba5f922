"""The baseline of `benchmarks/deploy.py`'s request latency: a bare two-deployment Serve app.

An ingress deployment that calls a model deployment by handle — the same two hops as a peach
gateway calling a component — with nothing of peach in it. Deployed by the benchmark under
its own route prefix (``import_path: bare_serve_app:app``).
"""

from __future__ import annotations

import uuid

from ray import serve
from starlette.requests import Request


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Model:
    def __init__(self) -> None:
        self.token = uuid.uuid4().hex

    def hello(self, name: str) -> dict:
        return {"greeting": f"hello {name}", "token": self.token}


@serve.deployment(ray_actor_options={"num_cpus": 0.1})
class Ingress:
    def __init__(self, model) -> None:
        self.model = model

    async def __call__(self, request: Request) -> dict:
        return await self.model.hello.remote(request.query_params.get("name", "world"))


app = Ingress.bind(Model.bind())
