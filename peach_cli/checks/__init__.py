"""The checks behind `peach validate`: conf and notebooks, A/B, undeclared imports, triggers."""
