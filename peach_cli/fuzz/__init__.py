"""`peach fuzz` (SPEC §11): generated requests from each parameter's JSON Schema, sent to
the project's simulator or a URL, every finding shrunk to a minimal request.

``targets`` reads the endpoints and their parameters from the OpenAPI document,
``strategies`` turns a parameter's schema into a Hypothesis strategy (edge values
included), ``watch`` hears what the simulator says about each request, ``findings``
classifies an answer and writes its ready case, ``engine`` drives Hypothesis. Only
``strategies`` and ``engine`` import Hypothesis (the ``fuzz`` extra).
"""
