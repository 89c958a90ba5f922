"""The project model: the conf, its loader, the notebook reader, and the plan they build."""
