"""The local simulator behind `peach dev`: a gateway and replica processes with the platform's semantics."""
