"""The API contract of a project (SPEC §11): its OpenAPI document, read from the code.

``build_document(plan, route_prefix=None) -> dict`` is the document; ``endpoint_contracts``
gives each endpoint's parameters with their JSON Schemas (``EndpointContract``). Nothing
here runs user code: the notebooks' code is read with ``ast``.
"""

from peach_cli.openapi.contract import (
    NO_DEFAULT,
    EndpointContract,
    Parameter,
    endpoint_contract,
)
from peach_cli.openapi.document import (
    build_document,
    document_of,
    endpoint_contracts,
)

__all__ = [
    "NO_DEFAULT",
    "EndpointContract",
    "Parameter",
    "build_document",
    "document_of",
    "endpoint_contract",
    "endpoint_contracts",
]
