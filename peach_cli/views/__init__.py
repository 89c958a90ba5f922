"""What `peach` shows in a terminal: the one place that uses Rich, and the live views."""
