"""Nova scheduler filter and weigher deciding through numaplace's fleet service.

See numaplace's docs/adapters.md for the configuration an operator writes.
"""
