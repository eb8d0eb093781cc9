"""Fakes of outside systems that speak their real protocol, for unit tests of the adapters."""
