"""peach: validate, run, stream and deploy PEACH endpoints from the terminal.

Importing this package is cheap on purpose: notebooks run ``from peach_cli import endpoint``
inside every replica, so nothing here pulls in typer, rich, ray or uvicorn.
"""

from peach_cli.runtime.decorator import endpoint

__all__ = ["endpoint", "__version__"]
__version__ = "0.1.0"
