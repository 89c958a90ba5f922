"""The commands of `peach`: one module a command, each thin over the core it calls."""
