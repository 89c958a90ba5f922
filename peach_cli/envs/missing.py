"""Which distribution provides a module, by name: the usual mismatches, then normalisation.

    distribution_for("yaml")        # 'pyyaml'
    distribution_for("my_pkg")      # 'my-pkg'
    explain_missing_module("sklearn", "llm")
    # "module 'sklearn' is not installed in py_env 'llm': add 'scikit-learn' to
    #  py_environments.llm.dependencies"

Used when a replica fails with ``ModuleNotFoundError`` and by ``peach validate`` (PC308)
when an env is not built. Standard library only: replicas import it.
"""

from __future__ import annotations

import re

MODULE_TO_DISTRIBUTION: dict[str, str] = {
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "cv2": "opencv-python",
    "dateutil": "python-dateutil",
    "dotenv": "python-dotenv",
    "docx": "python-docx",
    "fitz": "pymupdf",
    "gi": "pygobject",
    "google.protobuf": "protobuf",
    "jose": "python-jose",
    "jwt": "pyjwt",
    "magic": "python-magic",
    "MySQLdb": "mysqlclient",
    "OpenSSL": "pyopenssl",
    "PIL": "pillow",
    "pptx": "python-pptx",
    "psycopg2": "psycopg2-binary",
    "serial": "pyserial",
    "skimage": "scikit-image",
    "sklearn": "scikit-learn",
    "slugify": "python-slugify",
    "socks": "pysocks",
    "telegram": "python-telegram-bot",
    "tomli_w": "tomli-w",
    "usb": "pyusb",
    "win32api": "pywin32",
    "yaml": "pyyaml",
    "zmq": "pyzmq",
    "Crypto": "pycryptodome",
    "Levenshtein": "levenshtein",
    "lightgbm": "lightgbm",
    "multipart": "python-multipart",
    "faiss": "faiss-cpu",
    "sentencepiece": "sentencepiece",
    "git": "gitpython",
    "ldap": "python-ldap",
    "Bio": "biopython",
    "mpl_toolkits": "matplotlib",
    "pkg_resources": "setuptools",
    "setuptools": "setuptools",
    "google.cloud": "google-cloud",
    "umap": "umap-learn",
    "igraph": "igraph",
    "sentence_transformers": "sentence-transformers",
}
"""Import name → the distribution to declare, where they differ beyond normalisation."""

# distributions that provide several modules, or a module under another name
_EXTRA_PROVIDES: dict[str, tuple[str, ...]] = {
    "opencv-python-headless": ("cv2",),
    "opencv-contrib-python": ("cv2",),
    "opencv-contrib-python-headless": ("cv2",),
    "psycopg2": ("psycopg2",),
    "pycrypto": ("Crypto",),
    "pycryptodomex": ("Cryptodome",),
    "faiss-gpu": ("faiss",),
    "pillow-simd": ("PIL",),
    "python-jose": ("jose",),
    "protobuf": ("google",),
    "setuptools": ("setuptools", "pkg_resources", "_distutils_hack"),
    "matplotlib": ("matplotlib", "mpl_toolkits", "pylab"),
    "scikit-learn": ("sklearn",),
}

_SEPARATORS = re.compile(r"[-_.]+")


def _normalize(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()


def distribution_for(module: str) -> str:
    """The distribution to declare for an import of ``module`` (its top level decides).

    >>> distribution_for("PIL.Image"), distribution_for("Foo_Bar")
    ('pillow', 'foo-bar')
    """
    if module in MODULE_TO_DISTRIBUTION:
        return MODULE_TO_DISTRIBUTION[module]
    top = module.split(".")[0]
    return MODULE_TO_DISTRIBUTION.get(top, _normalize(top))


def modules_of(distribution: str) -> set[str]:
    """Top-level modules a distribution is known to provide, without its metadata.

    >>> "yaml" in modules_of("PyYAML"), sorted(modules_of("tomli-w"))
    (True, ['tomli_w'])
    """
    name = _normalize(distribution)
    found = {m.split(".")[0] for m, d in MODULE_TO_DISTRIBUTION.items() if d == name}
    found.update(_EXTRA_PROVIDES.get(name, ()))
    for prefix in ("python-", "py"):
        if name.startswith(prefix) and len(name) > len(prefix):
            found.add(name[len(prefix) :].replace("-", "_"))
            break
    found.add(name.replace("-", "_"))
    return found


def explain_missing_module(module: str, env_name: str) -> str:
    """The message for ``ModuleNotFoundError: No module named 'module'`` in ``env_name``.

    >>> explain_missing_module("yaml", "base")
    "module 'yaml' is not installed in py_env 'base': add 'pyyaml' to py_environments.base.dependencies (peach runs each py_env in its own environment, as the platform does)"
    """
    top = module.split(".")[0]
    distribution = distribution_for(module)
    return (
        f"module '{top}' is not installed in py_env '{env_name}': add '{distribution}' to "
        f"py_environments.{env_name}.dependencies (peach runs each py_env in its own "
        "environment, as the platform does)"
    )
