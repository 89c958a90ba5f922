"""A project module imported by the `loud` endpoint's cell."""


def shout(text: str) -> str:
    return text.upper() + "!"
