"""The client behind `peach ask`: request items, sending, and reading framed streams."""
