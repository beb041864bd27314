"""Reliability and security: fault injection, load, schema fuzzing, property tests and tenant isolation."""
