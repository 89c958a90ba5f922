"""A project-local module imported by a notebook cell (the project root is on sys.path)."""


def shout(text: str) -> str:
    return text.upper() + "!"
