"""`peach profile` (SPEC §12): profiles merged and folded (``model``), a flame graph (``flame``)."""
